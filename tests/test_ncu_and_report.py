"""ncu CSV parsing, classification, plots and the report command, on SYNTHETIC inputs with known answers."""
import argparse
import base64
import csv
import json
from pathlib import Path

import pytest

from analysis.sol.hardware import load_hardware
from analysis.report.ncu import NcuCsvError, class_counts, class_means, classify, read_ncu_csv, ridge_point
from analysis.attribution.rows import KernelRow
from harness.commands import report
from tests.ncu_synthetic import EXPECTED_CLASSES, write_synthetic_ncu_csv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def ncu_csv(tmp_path):
    return write_synthetic_ncu_csv(tmp_path / "synthetic_ncu_raw.csv")


def test_parse_units_and_flops(ncu_csv):
    kernels = read_ncu_csv(ncu_csv)
    assert len(kernels) == 5
    add = kernels[0]
    assert add.values["duration_us"] == pytest.approx(12.0)  # "12,000" nsecond
    assert add.values["dram_bytes_per_s"] == pytest.approx(5e12)  # "5,000" Gbyte/second
    assert add.dram_bytes == pytest.approx(60e6)  # 40 + 20 Mbyte
    assert add.flops == pytest.approx(2e6)  # ffma counts 2
    silu = kernels[3]
    assert silu.flops == pytest.approx(2 * 3e6 + 1e6)
    assert kernels[1].flops == pytest.approx(4e13)  # tensor ops
    assert kernels[4].flops is None  # every FLOP metric n/a


def test_classification_follows_the_seed_rule(ncu_csv):
    hw = load_hardware("h200")
    assert ridge_point(hw) == pytest.approx(989.5e12 / 4.8e12)
    kernels = classify(read_ncu_csv(ncu_csv), hw)
    assert [k.classification for k in kernels] == EXPECTED_CLASSES
    assert kernels[4].rule == "throughput-only"
    assert kernels[0].intensity == pytest.approx(2e6 / 60e6)
    assert class_counts(kernels) == {"compute-bound": 1, "memory-bound": 2, "balanced": 2, "unknown": 0}
    means = class_means(kernels)
    assert means["memory-bound"]["sm_throughput_pct"] == pytest.approx((8.0 + 5.0) / 2)
    assert means["overall"]["duration_us"] == pytest.approx((12 + 400 + 150 + 6 + 90) / 5)


def test_bad_exports_say_what_is_wrong(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("==PROF== nothing profiled\n")
    with pytest.raises(NcuCsvError, match="no header row"):
        read_ncu_csv(empty)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","k"\n')
    with pytest.raises(NcuCsvError, match="line 3"):
        read_ncu_csv(ragged)


def test_plots_render_png(ncu_csv):
    from analysis.report.plots import histogram_png, roofline_png

    kernels = classify(read_ncu_csv(ncu_csv), load_hardware("h200"))
    hist = histogram_png([k.values["sm_throughput_pct"] for k in kernels], "SM", "%")
    roof = roofline_png(kernels, load_hardware("h200"), normalised=True)
    for png in (hist, roof):
        assert png.startswith(PNG_MAGIC) and len(png) > 2000


def _synthetic_analysis_dir(tmp_path):
    """A SYNTHETIC analysis directory in the layout analysis.api.write_outputs produces."""
    out = tmp_path / "analysis"
    out.mkdir()
    fields = [f for f in KernelRow.__struct_fields__ if f not in ("role", "rule", "module_path")]  # a file from before those columns
    names = {"attn_mqa": "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576>>(Params)",
             "combine": "void deep_ep::internode_ll::combine<7168>(void*)"}
    with (out / "kernels_long.csv").open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(fields)
        for step in range(2):
            for layer in range(61):
                w.writerow(["run", "TP0", step, "decode", "layer", layer, 0, "attention", "attn_mqa", "flash_mla",
                            names["attn_mqa"], 7, 0.0, 250.0, 250.0, "signature"])
                if layer >= 3:
                    w.writerow(["run", "TP0", step, "decode", "layer", layer, 0, "moe", "combine", "deep_ep combine",
                                names["combine"], 7, 0.0, 390.0, 390.0, "signature"])
    with (out / "d4_detail.csv").open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["column", "group", "module", "kernel", "layers", "value_us", "median_us", "p90_us", "exposed_us"])
        w.writerow(["run", "attention", "attn_mqa", "flash_mla", "61", "250.0", "250.0", "250.0", "250.0"])
        w.writerow(["run", "moe", "combine", "deep_ep combine", "58", "390.0", "390.0", "390.0", "390.0"])
    (out / "analysis.json").write_text(json.dumps({"run": "run", "d4": {"step_ms": 96.0}}))
    return out


def _run_report(argv):
    parser = argparse.ArgumentParser()
    report.register(parser.add_subparsers())
    args = parser.parse_args(["report", *argv])
    return args.func(args)


def test_report_command_on_synthetic_analysis_dir_with_sol_and_ncu(tmp_path, ncu_csv, capsys):
    adir = _synthetic_analysis_dir(tmp_path)
    rc = _run_report([str(adir), "--hardware", "h800", "--batch-per-rank", "128", "--kv-len", "4096",
                      "--dp", "128", "--ep", "128", "--ncu", str(ncu_csv), "--top", "5"])
    assert rc == 0, capsys.readouterr().err
    md = (adir / "kernel_report.md").read_text()
    html = (adir / "kernel_report.html").read_text()
    for section in ("Top kernels by total time", "Speed of light per D4 row", "What-if", "Nsight Compute",
                    "Appendix: readable names and full signatures"):
        assert section in md and section in html
    assert "| mla_attention |" in md.replace("  ", " ")
    assert "flash_fwd_splitkv_mla_kernel" in md  # appendix holds the full signature
    pngs = sorted((adir / "kernel_report_files").glob("*.png"))
    assert any(p.name == "roofline_physical.png" for p in pngs)
    for p in pngs:
        assert p.read_bytes().startswith(PNG_MAGIC)
        assert f"kernel_report_files/{p.name}" in md
    embedded = html.count("data:image/png;base64,")
    assert embedded == len(pngs)
    first = html.split("data:image/png;base64,")[1].split("'")[0]
    assert base64.b64decode(first).startswith(PNG_MAGIC)


def test_report_command_errors_are_clear(tmp_path, capsys):
    assert _run_report([str(tmp_path / "nope")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "x.txt").write_text("hi")
    assert _run_report([str(tmp_path / "x.txt")]) == 2
    assert "not trace files" in capsys.readouterr().err


def test_report_command_on_a_real_trace(tmp_path):
    from conftest import real_trace

    trace = real_trace("nvidia/sglang_ds-r1-distill-llama-8b_b300/1782843274.7730265-TP-0-DECODE.trace.json.gz")
    assert _run_report([trace, "--out", str(tmp_path / "rep"), "--top", "10"]) == 0
    md = (tmp_path / "rep" / "kernel_report.md").read_text()
    assert "### Stage: decode" in md
    assert "nvjet_sm103_tst_256x16_64x6_4x1_v_bz_TNT" in md and "| cuBLAS |" in md
    assert "Not computed" in md  # SOL and ncu sections say what they need


REAL_NCU = Path(__file__).parent / "data" / "ncu_h100_demo_gpu_raw.csv"


def test_real_h100_export_parses_and_classifies():
    """A real `ncu --csv --page raw` export of the embedded engine on an H100 (docs/gpu-runs.md)."""
    from analysis.sol.estimate import load_hardware

    kernels = read_ncu_csv(REAL_NCU)
    assert len(kernels) == 40
    for k in kernels:
        assert k.values["duration_us"] > 0
        assert 0 <= k.values["dram_throughput_pct"] <= 100 and 0 <= k.values["sm_throughput_pct"] <= 100
        assert k.dram_bytes and k.dram_bytes > 0
    classified = classify(kernels, load_hardware("h100"))
    counts = class_counts(classified)
    assert sum(counts.values()) == 40 and counts["unknown"] == 0
    # Decode at batch 32 streams weights: all but one launch are memory-bound; the exception is a
    # large-tile cuBLAS GEMM (192x192) at 71% SM throughput, which the rule calls balanced.
    assert counts == {"compute-bound": 0, "memory-bound": 39, "balanced": 1, "unknown": 0}
    (balanced,) = [k for k in classified if k.classification == "balanced"]
    assert balanced.name.startswith("nvjet_sm90_tst_192x192") and balanced.values["sm_throughput_pct"] > 70
    assert class_means(classified)["memory-bound"]["dram_throughput_pct"] > 50


def test_real_h200_export_parses_and_classifies():
    """`moe-harness ncu --scenario demo_gpu --top 20` on an H200 (docs/gpu-runs.md): 400 launches named by
    mangled symbol, demangled on reading into the text torch traces carry."""
    from analysis.sol.estimate import load_hardware

    kernels = classify(read_ncu_csv(Path(__file__).parent / "data" / "ncu_h200_demo_gpu_raw.csv.gz"), load_hardware("h200"))
    assert len(kernels) == 400
    assert all(k.symbol.startswith(("_Z", "nvjet_", "cudnn_")) for k in kernels)
    assert sum(k.name.startswith("void ") for k in kernels) > 300  # demangled (`_Z...` -> `void ...(...)`)
    assert class_counts(kernels) == {"compute-bound": 4, "memory-bound": 57, "balanced": 339, "unknown": 0}
    # compute-bound: the 256x160-tile cuBLAS GEMM above the ridge point (206 FLOP/B for bf16 on the H200)
    assert {k.name for k in kernels if k.classification == "compute-bound"} == {"nvjet_sm90_tst_256x160_64x4_1x2_h_bz_coopA_TNT"}
    # the experts' grouped GEMM (which the earlier name filter never selected) is memory bound
    grouped = [k for k in kernels if "GroupProblemShape" in k.symbol]
    assert len(grouped) == 10 and all(k.classification == "memory-bound" for k in grouped)
    assert all(k.values["dram_throughput_pct"] > 50 for k in grouped)
