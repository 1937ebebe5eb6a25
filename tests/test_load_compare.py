"""The profiled steps against what the load measured outside the profile window.

The bundled real run directories (SGLang 0.5.17 under `ray job submit`, profiled with stacks) record
no window: it is found by the profiled steps' cadence, and the load's ITL before it is checked
against the raw records read here without the analysis. A SYNTHETIC load with a known window and
known step times checks the arithmetic, the recorded-window path and MTP's tokens per step.
"""
from __future__ import annotations

import glob
import json
import statistics
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze, render_markdown
from analysis.attribution.rows import StepRow
from analysis.errors import AnalysisError
from analysis.ingest.load_records import chunks_of, load_request_chunks
from analysis.tables.d4 import D4Column
from analysis.tables.load_compare import compare_with_load
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted(p for p in (ROOT / "tests/data/sglang-real/ray-run").iterdir() if p.is_dir())
MODEL = str(ROOT / "benchmarks/gpu/sglang_ray/dsv3_4l_model.yaml")


def test_chunks_come_back_from_evenly_split_gaps():
    # a 1-token chunk after 4 ms, a 3-token chunk after 9 ms (3 ms each), a 1-token chunk after 5 ms
    assert chunks_of([4.0, 3.0, 3.0, 3.0, 5.0], 10.0) == [(pytest.approx(10.004), 1), (pytest.approx(10.013), 3),
                                                         (pytest.approx(10.018), 1)]


@pytest.mark.parametrize("line, says", [
    ("{not json", "not a JSON object"),
    ('{"ok": true, "start_s": 1.0, "ttft_ms": -3, "itl_ms": []}', "ttft_ms must be a finite number >= 0"),
    ('{"ok": true, "start_s": 1.0, "ttft_ms": 3, "itl_ms": [1, "x"]}', "itl_ms[1] must be a finite number"),
    ('{"ok": true, "start_s": 1.0, "ttft_ms": 3, "itl_ms": 5}', "itl_ms must be a list"),
])
def test_a_bad_load_record_is_one_line_naming_file_and_line(tmp_path, line, says):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"ok": true, "start_s": 0.5, "ttft_ms": 2, "itl_ms": [1.0]}\n' + line + "\n")
    with pytest.raises(AnalysisError) as err:
        load_request_chunks(path)
    assert f"{path}:2: " in str(err.value) and says in str(err.value) and "\n" not in str(err.value)


def test_analyze_refuses_a_bad_load_file_before_reading_traces(tmp_path, capsys):
    bad = tmp_path / "requests.jsonl"
    bad.write_text('{"ok": false}\n')
    assert main(["analyze", str(RUNS[0] / "traces"), "--load-records", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"moe-harness analyze: --load-records: {bad}: no completed request in the load records"
    assert main(["analyze", str(RUNS[0] / "traces"), "--window-start-s", "3"]) == 2


def _raw_steady_itl_ms(run: Path) -> float:
    """Read off the raw records: every request's gaps after its second token up to the first gap
    over twice the median of those (the profiler's start), median over all of them."""
    gaps = []
    for line in (run / "load/requests.jsonl").read_text().splitlines():
        itl = json.loads(line)["itl_ms"][1:]
        typical = statistics.median(itl[:30])
        for gap in itl:
            if gap > 2 * typical:
                break
            gaps.append(gap)
    return statistics.median(gaps)


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_a_real_runs_profiled_steps_against_its_load(run):
    """The real runs were profiled with stacks: the profiled steps are 2.5-3x the ITL the load saw
    before the window, and the self-check says the table describes a perturbed system."""
    result = analyze(sorted(glob.glob(str(run / "traces/*.trace.json.gz"))), model=MODEL,
                     options=AnalysisOptions(run=run.name, jobs=1, load_records=str(run / "load/requests.jsonl")))
    load = result.d4.load
    assert load.window_from == "cadence" and load.fit < 0.15 and load.load_tokens > 500
    steps = sorted((s for s in result.step_rows if s.rank == result.step_rows[0].rank), key=lambda s: s.start_us)
    periods = [(b.start_us - a.start_us) / 1000 for a, b in zip(steps, steps[1:])]
    assert load.profiled_ms_per_token == pytest.approx(statistics.fmean(periods), rel=0.02)
    assert load.load_itl_p50_ms == pytest.approx(_raw_steady_itl_ms(run), rel=0.05)
    assert 2.0 < load.ratio < 3.5
    check = next(c for c in result.checks if c.check == "profiler_overhead")
    assert check.verdict == "fail" and "perturbed system" in check.why
    text = render_markdown([result.d4])
    assert f"| profiled vs load | profiler overhead | profiled - ITL p50 (ms/token) | {load.overhead_ms:.2f}ms |" in text
    assert "the profile window located by cadence" in text


# ---------------------------------------------------------------- SYNTHETIC load, known answers

STEADY_MS, PROFILED_MS, STALL_MS, STEPS, REQUESTS = 5.0, 12.0, 300.0, 6, 4


def _synthetic(tmp_path, tokens_per_chunk: int = 1) -> tuple[Path, float, list[StepRow]]:
    """REQUESTS requests decoding together: 40 chunks STEADY_MS apart, the profiler's start stall,
    STEPS chunks PROFILED_MS apart (the profiled steps), a stall, 20 steady chunks. Returns the
    records, the true window start on the load clock, and step rows of one rank with the same steps."""
    gaps = [STEADY_MS] * 40 + [STALL_MS] + [PROFILED_MS] * STEPS + [STALL_MS] + [STEADY_MS] * 20
    gaps = [g + j * 1e-7 for j, g in enumerate(gaps)]  # a real clock never gives two chunks bit-equal gaps
    lines = []
    for rid in range(REQUESTS):
        itl = [g / tokens_per_chunk for g in gaps for _ in range(tokens_per_chunk)]
        lines.append(json.dumps({"request_id": rid, "start_s": 0.01 * rid, "ttft_ms": 50.0 - 10.0 * rid,
                                 "itl_ms": itl, "ok": True}))
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    window_start_s = 0.05 + 40 * STEADY_MS / 1000 + 0.001  # just after the 40th steady chunk
    stage = "target_verify" if tokens_per_chunk > 1 else "decode"
    steps = [StepRow(run="s", rank="TP0", step=i, stage=stage, start_us=1e6 + i * PROFILED_MS * 1000,
                     end_us=1e6 + i * PROFILED_MS * 1000 + 3000, step_us=3000.0, layers_us=2000.0, busy_us=2000.0,
                     exposed_us=2000.0, kernels=10, layers_found=4, layers_expected=4, status="ok",
                     segmented_by="gpu_annotation") for i in range(STEPS)]
    return path, window_start_s, steps


def _column(stage: str, accept_length: float | None = None) -> D4Column:
    return D4Column(name="s", stage=stage, stat="mean", rank_policy="mean", step_ms=3.0, layers_ms=2.0, num_layers=4,
                    pre_ms=0.0, post_ms=0.0, rows=[], accept_length=accept_length)


@pytest.mark.parametrize("recorded", [False, True])
def test_synthetic_window_found_or_recorded_gives_the_known_overhead(tmp_path, recorded):
    path, window_start_s, steps = _synthetic(tmp_path)
    load = compare_with_load(_column("decode"), steps, load_request_chunks(path),
                             window_start_s if recorded else None)
    assert load.window_from == ("recorded" if recorded else "cadence")
    assert load.profiled_ms_per_token == pytest.approx(PROFILED_MS)
    assert load.load_itl_p50_ms == pytest.approx(STEADY_MS, rel=1e-6)
    assert load.overhead_ms == pytest.approx(PROFILED_MS - STEADY_MS, rel=0.05)
    # only steady chunks before the window: all 40 per request, or 39 where the cadence's margin of
    # two gaps (the stall and the steady one before it) was taken
    assert load.load_tokens == REQUESTS * (40 if recorded else 39)
    assert load.load_tpot_ms == pytest.approx(STEADY_MS, rel=1e-6)
    column = _column("decode")
    column.load = load
    said = "opened at 0.251 s on the load's clock (recorded by the run)" if recorded else "located by cadence"
    assert said in render_markdown([column])


def test_synthetic_mtp_counts_the_accepted_tokens_of_a_verify_step(tmp_path):
    """Two tokens per chunk (accept length 2): the profiled verify period is 12 ms, 6 ms per token;
    the load's steady 5 ms chunks are 2.5 ms per token."""
    path, _, steps = _synthetic(tmp_path, tokens_per_chunk=2)
    load = compare_with_load(_column("target_verify", accept_length=2.0), steps, load_request_chunks(path))
    assert load.window_from == "cadence" and load.tokens_per_step == 2.0
    assert load.profiled_ms_per_token == pytest.approx(PROFILED_MS / 2)
    assert load.load_itl_p50_ms == pytest.approx(STEADY_MS / 2, rel=1e-6)
    no_accept = compare_with_load(_column("target_verify"), steps, load_request_chunks(path))
    assert no_accept.profiled_ms_per_token is None and "no time per token" in no_accept.note


def test_steps_that_fit_nowhere_leave_the_window_unfound(tmp_path):
    path, _, steps = _synthetic(tmp_path)
    for i, s in enumerate(steps):  # periods of 40 ms: no run of the load's gaps looks like that
        s.start_us = 1e6 + i * 40_000.0
    load = compare_with_load(_column("decode"), steps, load_request_chunks(path))
    assert load.window_start_s is None and load.load_itl_p50_ms is None and load.ratio is None
    assert "not found in the load's chunk gaps" in load.note
