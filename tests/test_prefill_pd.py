"""Prefill on real SGLang, the prefill half of a prefill/decode pair, against a truth that imports nothing
from `analysis`.

tests/data/sglang-real/pd (four H100s, SGLang 0.5.17, 2026-11-28): a prefill server (TP2 EP2, DeepEP
normal mode, eager, chunked prefill of 4096 tokens, 3000-token prompts) and a decode server (TP2 EP2,
DeepEP low-latency, CUDA graphs) joined by Mooncake over TCP. The prefill windows are plain windows of
six EXTEND steps, one with Python stacks (module ranges: the truth of tests/accuracy/truth.py), one
without. Judged: every D4 group within 1.5 points of the truth's share of step busy time and dispatch,
combine and the routed experts' rows within 1 point (the tool reads the stack recording with its ranges
stripped), the model's 4 layers (1 dense + 3 MoE) in every step, no self-check firing on either prefill
window, and Mooncake's device-to-host copies (launched from its own thread, interleaved with the
step's kernels) reported beside the step, never inside a layer.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from accuracy import table as T
from accuracy.judge import judge
from accuracy.truth import truth_of

PD = Path(__file__).resolve().parent / "data" / "sglang-real" / "pd"
PREFIX = "sglang-0.5.17-dsv3-4l-fp8-h100x4-pd-mooncake"
RANKS = ("TP-0-EP-0", "TP-1-EP-1")
MAX_GROUP_GAP_PP = 1.5
MAX_ROW_GAP_PP = 1.0
ROWS = ("dispatch", "combine", "up_gate", "act", "down", "shared experts")


def _trace(kind: str, rank: str) -> Path:
    return PD / f"{PREFIX}-{kind}-{rank}.trace.json.gz"


def _gaps(truth: dict, found: dict, keys) -> dict:
    return {k: round(found.get(k, 0.0) - truth.get(k, 0.0), 2) for k in keys}


def _row_sums(rows: dict) -> dict:
    return {name: sum(rows.get(k, 0.0) for k in T.COMPARED_ROWS[name]) for name in ROWS}


@pytest.mark.parametrize("rank", RANKS)
def test_the_truth_reads_six_prefill_steps_of_four_layers(rank):
    truth = truth_of(str(_trace("prefill-stack", rank)))
    assert truth.steps == 6
    assert set(truth.layers) == {4} and set(truth.moe_layers) == {3}
    assert truth.unnamed_pct == 0


@pytest.mark.parametrize("rank", RANKS)
def test_every_group_within_1_5_points_and_the_all_to_all_within_1(rank):
    j = judge(str(_trace("prefill-stack", rank)))
    assert j.found_steps == 6 and set(j.found_layers) == {4} and set(j.found_moe_layers) == {3}
    gaps = _gaps(j.truth_groups, j.found_groups, T.GROUPS)
    assert all(abs(g) <= MAX_GROUP_GAP_PP for g in gaps.values()), gaps
    truth, found = _row_sums(j.truth_rows), _row_sums(j.found_rows)
    row_gaps = _gaps(truth, found, ROWS)
    assert all(abs(g) <= MAX_ROW_GAP_PP for g in row_gaps.values()), (row_gaps, truth)
    assert truth["dispatch"] > 0.5 and truth["combine"] > 1.0  # DeepEP normal mode is there to be judged


def test_negative_control_the_other_ranks_truth_is_far_outside_the_bounds():
    """The two ranks of one window differ (rank 1 waits ~50% of its step in the combine for rank 0):
    judged against the other rank's truth the same bounds must fail, or they judge nothing."""
    mine = judge(str(_trace("prefill-stack", RANKS[0])))
    other = truth_of(str(_trace("prefill-stack", RANKS[1])))
    gaps = _gaps(other.group_shares(), mine.found_groups, T.GROUPS)
    assert max(abs(g) for g in gaps.values()) > 10 * MAX_GROUP_GAP_PP, gaps


def _off_thread_copies(path: Path) -> tuple[int, float]:
    """From the raw trace, without the analysis: device copies whose launch call ran on a thread that
    launched no kernel (count, busy us)."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    tid_of = {e["args"]["correlation"]: e["tid"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernel_threads = {tid_of.get(e["args"].get("correlation")) for e in events if e.get("cat") == "kernel"}
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"
              and tid_of.get(e["args"].get("correlation")) not in kernel_threads | {None}]
    return len(copies), sum(e["dur"] for e in copies)


def test_the_transfer_engines_copies_sit_beside_the_step_and_the_self_checks_hold(tmp_path):
    """Mooncake (TCP) copies each finished request's KV cache to host memory from its own thread
    while the next prefill step runs. Named by position they broke the layer cut of 4 of 48 layers
    and layer_kernel_sequence fired on a table that was right."""
    from analysis.pipeline import AnalysisOptions, analyze

    paths = [str(_trace("prefill-stack", r)) for r in RANKS]
    result = analyze(paths, options=AnalysisOptions(run="pd"))
    side = [r for r in result.kernel_rows if r.section == "side"]
    raw = [_off_thread_copies(Path(p)) for p in paths]
    in_steps = {(r.rank, r.step) for r in result.kernel_rows}
    assert len(side) > 6 * 100 and all(r.layer == -1 and r.module == "copies off the step's thread" for r in side)
    assert len(side) <= sum(n for n, _us in raw)  # copies between steps belong to no step
    assert {r.kernel_name.split(" ")[0] for r in side} == {"Memcpy"}
    assert not any(r.section == "layer" and r.stream == side[0].stream for r in result.kernel_rows)
    assert result.d4.side_ms > 1.0 and len(in_steps) == 12
    assert result.checks and not result.failed_checks, result.failed_checks


def test_the_window_without_stacks_reads_the_same_model_and_no_check_fires():
    """Its first step holds fresh prompts only (MLA's plain prefill path), the others a chunk whose
    earlier part is cached (the absorbed path with w_kc / w_vc): an extend step's layers are compared
    with their own step's, not with another batch's path."""
    from analysis.pipeline import AnalysisOptions, analyze

    result = analyze([str(_trace("prefill-nostack", r)) for r in RANKS], options=AnalysisOptions(run="pd"))
    steps = [s for s in result.step_rows if s.stage == "extend"]
    assert len(steps) == 12 and {s.layers_found for s in steps} == {4}
    # the window's last pass prepared the next batch, which came 5.6 s later: that tail is a step of its
    # own (no label, not tabled), not 5.6 s of "idle after the layers" in the last prefill step
    assert max(s.step_us for s in steps) < 200_000 and result.d4.step_ms < 120
    tails = [s for s in result.step_rows if s.stage != "extend"]
    assert len(tails) == 2 and all(s.stage == "unknown" and s.step_us < 10_000 for s in tails)
    # that tail is copies and a few small kernels: no layer (the copies repeat, but a copy anchors none)
    assert all(s.layers_found == 0 for s in tails), [s.layers_found for s in tails]
    raw = sum(1 for e in json.loads(gzip.open(_trace("prefill-nostack", RANKS[0])).read())["traceEvents"]
              if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert sum(1 for r in result.kernel_rows if r.rank == "TP0-EP0") == raw  # nothing dropped
    assert result.checks and not result.failed_checks, result.failed_checks


def test_the_decode_half_reads_as_decode_steps():
    from analysis.pipeline import AnalysisOptions, analyze

    result = analyze([str(_trace("decode", r)) for r in RANKS], options=AnalysisOptions(run="pd"))
    assert result.d4.stage == "decode" and {s.layers_found for s in result.step_rows} == {4}
    assert len(result.step_rows) == 10


def test_the_table_describes_the_stage_asked_for_where_a_window_holds_both():
    """A plain window on a server that also decodes holds extend and decode steps: by default the table
    describes decode (verify over decode over extend); AnalysisOptions.stage (`analyze --stage`, and a
    run whose scenario profiled EXTEND) makes it the extend steps'."""
    from analysis.pipeline import AnalysisOptions, analyze

    paths = [str(_trace("prefill-nostack", RANKS[0])), str(_trace("decode", RANKS[1]))]
    labels = {paths[0]: "TP0", paths[1]: "TP1"}
    default = analyze(paths, options=AnalysisOptions(run="pd", labels=labels))
    asked = analyze(paths, options=AnalysisOptions(run="pd", labels=labels, stage="extend"))
    assert default.d4.stage == "decode" and asked.d4.stage == "extend"
    assert asked.d4.ranks == ["TP0"] and asked.d4.steps_used == 6 and default.d4.ranks == ["TP1"]
