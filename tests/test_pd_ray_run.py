"""The README's command on a real prefill/decode pair (tests/data/sglang-real/pd-ray, docs/gpu-runs.md
2026-11-28 "PD through Ray"): SGLang 0.5.17 on one 4-GPU host run as two Ray nodes, prefill TP2 EP2 DeepEP
normal mode on one, decode TP2 EP2 DeepEP low-latency with CUDA graphs on the other, Mooncake over TCP,
SGLang's router in front; traces slimmed, kernels_long.parquet left out (benchmarks/gpu/pd/bundle_pd_ray.py).

What is checked against what the job wrote: each role's folder reads as a run directory and
`analyze` writes its stored tables (the decode roles' as the job's nodes wrote them; the prefill roles'
written again by benchmarks/reanalyse_run_dir.py for the per-prompt-token lines added since, the job's
own kept as table.node-original.md); the TTFT split recomputed from the job's own scrapes
covers exactly the load's requests (the job's file counted the TTFT histogram's requests over its two
is_streaming series as two ranks: 20 of 39, fixed since); and the same pair with two-batch overlap on the
prefill role, which the analysis does not read yet, says its table is wrong and why.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.metrics.ttft_split import split_files
from tests.run_dir_reanalysis import assert_analyze_reproduces

RUNS = Path(__file__).resolve().parent / "data" / "sglang-real" / "pd-ray"
PAIR = RUNS / "sglang_dsv3_4l_pd_mooncake-20261128-065033"
PREFILL_TBO = RUNS / "sglang_dsv3_4l_pd_mooncake_prefill_tbo-20261128-065819"
LEFT_OUT = frozenset({"kernels_long.parquet"})


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def test_the_real_pair_ran_each_role_on_its_own_ray_node_behind_the_router():
    top = _manifest(PAIR)
    assert top["status"] == "ok" and top["ray_nodes"] == 2 and top["in_ray_job"]
    assert top["pd_roles"] == {"prefill": "prefill", "decode": "decode"} and top["transfer_backend"] == "mooncake"
    argv = top["router"]["argv"]
    assert argv[argv.index("--prefill") + 1:argv.index("--prefill") + 3] == ["http://127.0.0.1:30000", "8998"]
    roles = {role: _manifest(PAIR / role) for role in ("prefill", "decode")}
    assert {r: m["status"] for r, m in roles.items()} == {"prefill": "ok", "decode": "ok"}
    assert roles["prefill"]["nodes"][0]["ray_node_id"] != roles["decode"]["nodes"][0]["ray_node_id"]
    for role, m in roles.items():
        node = m["plan"]["nodes"][0]
        assert node["argv"][node["argv"].index("--disaggregation-mode") + 1] == role
        assert node["env"]["MOONCAKE_PROTOCOL"] == "tcp"
    assert roles["prefill"]["profile"]["stage"] == "EXTEND" and roles["decode"]["profile"]["profiler"] == "plain"
    records = [json.loads(line) for line in (PAIR / "load" / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 39 and all(r["ok"] and r["output_tokens"] == 256 for r in records)


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_role_of_the_real_pair_is_a_run_directory_analyze_reads_as_the_job_did(role, tmp_path, capsys):
    printed = assert_analyze_reproduces(PAIR / role, tmp_path / role, capsys, left_out=LEFT_OUT)
    stage = "extend" if role == "prefill" else "decode"
    assert f"stage {stage}, mean over 10 steps" in printed and "found 4 layers (1 dense + 3 MoE)" in printed


def test_the_pairs_own_folder_names_its_roles_instead_of_a_table(tmp_path, capsys):
    assert main(["analyze", str(PAIR), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "a prefill/decode run" in err and str(PAIR / "prefill") in err and str(PAIR / "decode") in err


def test_the_ttft_split_from_the_jobs_scrapes_covers_every_request_of_the_load():
    parts = {p.name: p for p in split_files([str(PAIR / "metrics" / f"prefill-{w}.prom") for w in ("start", "end")],
                                            [str(PAIR / "metrics" / f"decode-{w}.prom") for w in ("start", "end")])}
    records = (PAIR / "load" / "requests.jsonl").read_text().splitlines()
    assert {name: p.requests for name, p in parts.items()} == {name: len(records) for name in parts}
    written = {p["name"]: p for p in json.loads((PAIR / "ttft_split.json").read_text())}
    assert {n: p.mean_ms for n, p in parts.items()} == pytest.approx({n: p["mean_ms"] for n, p in written.items()})
    # the decode server's own TTFT against the load's, measured by the client through the router
    client_ttft_ms = json.loads((PAIR / "load" / "summary.json").read_text())["ttft_ms"]["mean"]
    assert parts["time to first token"].mean_ms == pytest.approx(client_ttft_ms, rel=0.03)


def test_two_batch_overlap_on_the_real_prefill_role_is_read_as_four_layers(tmp_path, capsys):
    """SGLang 0.5.17 ran TBO on the prefill server of a pair (alone it died at its first decode step),
    DeepEP in normal mode: no two-phase kernel to read TBO from, so the run's own table read 7 layers
    for 4 and said so (table.node-original.md keeps it). Read from launch order
    (analysis/attribution/two_batch_prefill.py; the folder re-sealed with it), `analyze RUN_DIR` finds
    the model's 4 layers (1 dense, 3 MoE of two micro-batches) in every step of both ranks, and no
    self-check fires."""
    node_table = (PREFILL_TBO / "prefill" / "table.node-original.md").read_text()
    assert "LAYER COUNT MISMATCH in 10 of 10 steps" in node_table  # what the run printed then
    printed = assert_analyze_reproduces(PREFILL_TBO / "prefill", tmp_path / "tbo", capsys, left_out=LEFT_OUT)
    assert "LAYER COUNT MISMATCH" not in printed and "not seen in this step's kernels" not in printed
    steps = list(csv.DictReader((tmp_path / "tbo" / "steps.csv").open()))
    assert len(steps) == 10 and {(s["layers_found"], s["moe_layers_found"], s["status"]) for s in steps} == {
        ("4", "3", "ok")}
    assert all("6 MoE micro-layers read as 3 layers of two micro-batches" in s["note"] for s in steps)
    checks = list(csv.DictReader((tmp_path / "tbo" / "checks.csv").open()))
    assert [c["check"] for c in checks if c["verdict"] == "fail"] == []
