"""`moe-harness report` on real inputs: the bundled H100 trace with its real Nsight Compute export,
every real trace beside the checkout, and an analysis that saved its SOL settings."""
import argparse
import base64
import re
from pathlib import Path

import pytest

from conftest import real_trace
from harness.commands import report

DATA = Path(__file__).parent / "data"
H100_TRACE = DATA / "embedded-h100-demo_gpu-TP-0-DECODE.trace.json.gz"
H100_NCU = DATA / "ncu_h100_demo_gpu_raw.csv"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SECTIONS = ("## Top kernels by total time", "## Speed of light per D4 row", "## What-if: where optimisation pays",
            "## Nsight Compute: classification, histograms, roofline", "## Appendix: readable names and full signatures",
            "## Speed of light: the model next to Nsight Compute")
REAL_TRACES = [
    "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz",
    "nvidia/sglang_ds-r1-distill-llama-8b_b300/1782843274.7730265-TP-0-DECODE.trace.json.gz",
    "nvidia/vllm_gpt-oss-120b_b200_eager/eager_trace.json.gz",
    "nvidia/deepseek-v3_train_h800/train.json",
    "amd/sglang_qwen3-8b_mi300x_decode/sglang_Qwen3-8B_decode.json.gz",
    "amd/sglang_qwen3-8b_mi300x_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
]


def _report(argv) -> int:
    parser = argparse.ArgumentParser()
    report.register(parser.add_subparsers())
    args = parser.parse_args(["report", *argv])
    return args.func(args)


def _section(md: str, heading: str) -> str:
    """The text under a `## ` heading, up to the next one."""
    start = md.index(heading) + len(heading)
    nxt = md.find("\n## ", start)
    return md[start:] if nxt < 0 else md[start:nxt]


def _num(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%x"))


def _table(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("|---")]


def test_report_on_the_h100_trace_with_its_real_ncu_export(tmp_path, capsys):
    out = tmp_path / "rep"
    rc = _report([str(H100_TRACE), "--signature", "embedded-hf-deepseek-v3-cuda", "--ncu", str(H100_NCU),
                  "--hardware", "h100", "--out", str(out), "--top", "10"])
    assert rc == 0, capsys.readouterr().err
    md = (out / "kernel_report.md").read_text()
    html = (out / "kernel_report.html").read_text()
    for heading in SECTIONS:
        assert heading in md, heading
        assert heading.removeprefix("## ") in html, heading
    # Top kernels: the trace was analysed into its 5 profiled decode steps; families named.
    top = _section(md, SECTIONS[0])
    assert "### Stage: decode (5 step windows" in top
    first_table = _table(top.split("### Stage: decode")[1])
    header, rows = first_table[0], first_table[1:11]
    assert header[:2] == ["#", "Time %"] and header[-2:] == ["Library", "Kernel"]
    assert len(rows) == 10 and [r[0] for r in rows] == [str(i) for i in range(1, 11)]
    assert {r[-2] for r in rows} & {"cuBLAS", "CUTLASS", "ATen"}, rows
    shares = [_num(r[1]) for r in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.0
    # Appendix: each top kernel's readable name with its full signature.
    appendix = _table(_section(md, SECTIONS[4]))[1:]
    assert {r[0] for r in appendix} >= {r[-1] for r in rows}
    assert all(r[3].startswith(("`", "<code>")) and len(r[3]) > 3 for r in appendix)  # <code>: escaped
    # What-if: step 88.14 ms (docs/gpu-runs.md); each row twice as fast, largest saving first.
    whatif = _section(md, SECTIONS[2])
    assert "### Each row 2x faster" in whatif
    w_rows = _table(whatif)[1:]
    assert w_rows and all(r[6] == "88.14" for r in w_rows)
    savings = [_num(r[8]) for r in w_rows]
    assert savings == sorted(savings, reverse=True) and savings[0] > 0
    # The routed experts' up/gate grouped GEMM (3 MoE layers x 2362.6 us of the 3660.5 us the experts
    # take, docs/gpu-runs.md) is where a faster kernel pays most.
    assert w_rows[0][:4] == ["moe", "up_gate_gemm", "GemmUniversal (grouped)", "3"]
    assert savings[0] == pytest.approx(3.544, abs=0.002)
    for r in w_rows:  # new step = step - layers x (row - row/2)
        assert _num(r[7]) == pytest.approx(88.14 - _num(r[3]) * _num(r[4]) / 2 / 1000, abs=0.02)
    # Classification of the real export: 39 memory-bound, 1 balanced (docs/gpu-runs.md).
    ncu = _section(md, SECTIONS[3])
    classes = {r[0]: r[1] for r in _table(ncu)[1:5]}
    assert classes == {"compute-bound": "0", "memory-bound": "39", "balanced": "1", "unknown": "0"}
    assert "tensor-core operations" in ncu  # this export carries the tensor counters
    # Histograms and rooflines: PNG files, referenced by the markdown, embedded in the HTML.
    pngs = sorted((out / "kernel_report_files").glob("*.png"))
    names = {p.name for p in pngs}
    assert {"roofline_normalised.png", "roofline_physical.png", "hist_sm_throughput_pct.png",
            "hist_dram_throughput_pct.png", "hist_achieved_occupancy_pct.png"} <= names
    assert len([n for n in names if n.startswith("hist_")]) == 13
    for p in pngs:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, p.name
        assert f"kernel_report_files/{p.name}" in md
    embedded = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(embedded) == len(pngs)
    assert sorted(base64.b64decode(e) for e in embedded) == sorted(p.read_bytes() for p in pngs)


@pytest.mark.parametrize("rel", REAL_TRACES)
def test_report_on_every_real_trace(rel, tmp_path, capsys):
    out = tmp_path / "rep"
    assert _report([real_trace(rel), "--out", str(out), "--top", "8"]) == 0, capsys.readouterr().err
    md = (out / "kernel_report.md").read_text()
    for heading in SECTIONS:
        assert heading in md, heading
    stages = re.findall(r"### Stage: (\S+) \((\d+) step windows, ([\d,.]+) ms of kernel time\)", md)
    assert stages and all(float(ms.replace(",", "")) > 0 for _s, _n, ms in stages)
    top_rows = [r for r in _table(_section(md, SECTIONS[0])) if r[0].isdigit()]
    assert top_rows and all(r[-2] for r in top_rows)  # every kernel has a library family
    appendix = _table(_section(md, SECTIONS[4]))[1:]
    assert {r[0] for r in appendix} == {r[-1] for r in top_rows}
    whatif = _section(md, SECTIONS[2])
    assert "### Each row 2x faster" in whatif and _table(whatif)[1:], whatif  # every real trace has steps
    assert "Not computed" in _section(md, SECTIONS[1]) and "Not computed" in _section(md, SECTIONS[3])
    assert (out / "kernel_report.html").stat().st_size > len(md)


def test_report_on_the_bundled_real_sglang_trace_directory(tmp_path, capsys):
    """A folder stands for the traces directly in it: the three real SGLang 0.5.17 decode traces we recorded."""
    out = tmp_path / "rep"
    assert _report([str(DATA / "sglang-real"), "--out", str(out)]) == 0, capsys.readouterr().err
    md = (out / "kernel_report.md").read_text()
    assert "### Stage: decode" in md
    names = [p.name for p in (DATA / "sglang-real").glob("*-DECODE.trace.json.gz")]
    assert len(names) == 3 and all(n in md for n in names)


def test_report_takes_the_sol_settings_an_analysis_saved(tmp_path, capsys):
    from analysis.pipeline import AnalysisOptions, analyze, write_outputs
    from analysis.attribution.signature import load_signature
    from analysis.sol.estimate import Deployment, SolSettings, sol_for_d4_rows
    from synthetic_deepseek import write_rank_trace

    trace = tmp_path / "syn-TP-0-DECODE.trace.json.gz"
    write_rank_trace(trace, load_signature("sglang-sm90-deepep-ll"), steps=1)  # SYNTHETIC
    settings = SolSettings("h800", Deployment(batch_per_rank=128, kv_len=4096, dp=16, ep=16))
    result = analyze([str(trace)], signature="sglang-sm90-deepep-ll", model="deepseek-v3",
                     options=AnalysisOptions(run="syn", sol=settings))
    adir = tmp_path / "analysis"
    write_outputs(result, adir)
    assert _report([str(adir)]) == 0, capsys.readouterr().err
    md = (adir / "kernel_report.md").read_text()
    assert "SOL deployment as saved by the analysis" in md
    sol = _section(md, "## Speed of light per D4 row")
    assert "Hardware H800; batch 128 per rank, KV length 4096, tp 1, dp 16, ep 16" in sol
    rows = {(r[0], r[1], r[2]): r for r in _table(sol)[1:] if len(r) == 8}
    expected = sol_for_d4_rows(result.d4.rows, settings.deployment, "h800")
    for e in expected:
        if e.sol_us is not None:
            assert rows[(e.group, e.module, e.kernel)][5] == f"{e.sol_us:,.2f}"
    assert "### Each row at its speed of light" in md
    # A command-line option overrides the saved one.
    assert _report([str(adir), "--kv-len", "1024", "--out", str(tmp_path / "r2")]) == 0
    assert "KV length 1024, tp 1, dp 16" in (tmp_path / "r2" / "kernel_report.md").read_text()


H200_TRACE = DATA / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz"
H200_NCU = DATA / "ncu_h200_demo_gpu_raw.csv.gz"
SOL_VS_NCU = "## Speed of light: the model next to Nsight Compute"


def test_h200_report_puts_the_models_sol_next_to_what_ncu_measured(tmp_path, capsys):
    """The H200 demo_gpu trace and the ncu export of the same workload (docs/gpu-runs.md), with the
    SOL settings the demo_gpu scenario gives (batch 32, KV 133, bf16, expanded MLA) on h200 peaks."""
    out = tmp_path / "rep"
    rc = _report([str(H200_TRACE), "--signature", "embedded-hf-deepseek-v3-cuda", "--ncu", str(H200_NCU),
                  "--hardware", "h200", "--model", "deepseek-v3-wide4", "--batch-per-rank", "32", "--kv-len", "133",
                  "--weight-dtype", "bf16", "--mla-form", "expanded", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    md = (out / "kernel_report.md").read_text()
    assert SOL_VS_NCU.removeprefix("## ") in (out / "kernel_report.html").read_text()
    table = _table(_section(md, SOL_VS_NCU).split("### Profiled kernels per row")[0])
    header, rows = table[0], {(r[0], r[1], r[2][:5]): dict(zip(table[0], r)) for r in table[1:]}
    assert header[:3] == ["Group", "Module", "Kernel"] and "ncu MB" in header
    # Weight-streaming rows: the DRAM throughput ncu measured is the model's % of SOL within 5 points
    # (both against 4.8 TB/s), and ncu's DRAM bytes per layer agree with the model's HBM bytes within 5%.
    experts = [("moe", "up_gate_gemm", "GemmU"), ("moe", "down_gemm", "GemmU")]
    streaming = [("mlp", "gate_up_proj", "nvjet"), ("mlp", "down_proj", "nvjet"), ("attention", "attn_core", "cudnn")]
    for key in experts + streaming:
        row = rows[key]
        assert row["Bound"] == "memory" and _num(row["Profiled %"]) >= 95, row
        assert abs(_num(row["ncu DRAM %"]) - _num(row["Model % of SOL"])) <= 5, row
    for key in streaming:
        assert _num(rows[key]["ncu MB"]) == pytest.approx(_num(rows[key]["Model MB"]), rel=0.05), rows[key]
    # The two expert GEMMs share one kernel name, so ncu's figure is their mean: compare their sum.
    assert sum(_num(rows[k]["ncu MB"]) for k in experts) == pytest.approx(
        sum(_num(rows[k]["Model MB"]) for k in experts), rel=0.05)
    # kv_b_proj moves about ten times the model's bytes: transformers' MLA expands the whole cached
    # latent through kv_b_proj every step, where the model counts only the new tokens.
    kv_b = rows[("attention", "kv_b_proj", "nvjet")]
    assert _num(kv_b["ncu MB"]) > 5 * _num(kv_b["Model MB"])
    kernels = _table(_section(md, SOL_VS_NCU).split("### Profiled kernels per row")[1])[1:]
    assert any(r[0] == "moe/up_gate_gemm" and r[1] == "GemmUniversal (grouped)" for r in kernels)
