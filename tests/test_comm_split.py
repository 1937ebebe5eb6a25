"""Communication kernels split into wait and transfer (analysis/attribution/comm_split.py).

On SYNTHETIC two-rank traces with a known injected delay and known clock offsets
(tests/synthetic_comm.py), on the real 2xH200 expert-parallel traces of the accuracy suite, and
on public single-rank traces (no split: the tool says it does not know).
"""
from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze, load_column, write_outputs
from analysis.tables.d4 import render_markdown
from conftest import real_trace
from synthetic_comm import SIGNATURE, write_ep_ranks

ACCURACY = Path(__file__).parent / "data" / "accuracy" / "h200x2"
EP_SETS = ("bs8-eager", "bs32-eager", "bs8-graph", "bs32-graph")


def _analyze(paths, signature=SIGNATURE, layers=4):
    return analyze([str(p) for p in paths], signature=signature, options=AnalysisOptions(jobs=1, layers=layers))


def _collectives(rows):
    by: dict[tuple, list] = defaultdict(list)
    for c in rows:
        by[(c.step, c.stage, c.micro_batch, c.layer, c.module, c.occurrence)].append(c)
    return by


@pytest.mark.parametrize("signature", [SIGNATURE, "generic"])
def test_injected_delay_is_the_other_ranks_wait_and_the_straggler_is_named(tmp_path, signature):
    injected = write_ep_ranks(tmp_path, delay_us=300.0, delay_rank=1, delay_layer=2, delay_module="topk",
                              transfer_us=25.0, jitter_us=3.0)
    result = _analyze(injected.paths, signature)
    waits = [c.wait_us for c in result.comm_rows
             if (c.rank, c.layer, c.module) == ("TP0-EP0", 2, "dispatch")]
    assert len(waits) == 2  # one per step
    assert statistics.fmean(waits) == pytest.approx(injected.delay_us, rel=0.10)
    # Nowhere else does anyone wait more than the jitter.
    others = [c.wait_us for c in result.comm_rows if (c.layer, c.module) != (2, "dispatch")]
    assert max(others) < 10.0
    transfers = [c.transfer_us for c in result.comm_rows]
    assert statistics.fmean(transfers) == pytest.approx(injected.transfer_us, abs=5.0)
    top = result.d4.stragglers[0]
    assert (top.layer, top.module, top.rank, top.preceding_module) == (2, "dispatch", "TP1-EP1", "topk")
    assert top.others_wait_us == pytest.approx(injected.delay_us, rel=0.10)  # the one other rank's wait
    text = render_markdown([result.d4])
    assert "| 2 | dispatch | TP1-EP1 | 100% of 2 |" in text and "| topk |" in text
    rows = {(r.module, r.kernel): r.value_us for r in result.d4.comm_rows}
    # us per MoE layer, mean over ranks: rank 0 waits 300 us in one of 3 MoE layers, rank 1 never.
    assert rows[("dispatch", "wait")] == pytest.approx(injected.delay_us / 3 / 2, rel=0.10)
    assert rows[("combine", "wait")] < 5.0


def test_the_straggler_is_named_whichever_module_delays_it(tmp_path):
    injected = write_ep_ranks(tmp_path, delay_us=500.0, delay_rank=0, delay_layer=3, delay_module="down_gemm",
                              jitter_us=2.0)
    result = _analyze(injected.paths)
    top = result.d4.stragglers[0]
    assert (top.layer, top.module, top.rank, top.preceding_module) == (3, "combine", "TP0-EP0", "down_gemm")
    waits = [c.wait_us for c in result.comm_rows if (c.rank, c.layer, c.module) == ("TP1-EP1", 3, "combine")]
    assert statistics.fmean(waits) == pytest.approx(500.0, rel=0.10)


@pytest.mark.parametrize("step_fraction", [0.5, 1.0, -1.0, 0.013])
def test_clock_offsets_up_to_a_whole_step_do_not_change_the_split(tmp_path, step_fraction):
    (tmp_path / "base").mkdir()
    (tmp_path / "shifted").mkdir()
    base = write_ep_ranks(tmp_path / "base", jitter_us=3.0)
    offset = step_fraction * base.step_us
    shifted = write_ep_ranks(tmp_path / "shifted", jitter_us=3.0, clock_offsets_us=[0.0, offset + 100_000.0])
    a, b = _analyze(base.paths).comm_rows, _analyze(shifted.paths).comm_rows
    assert len(a) == len(b) == 24  # 2 steps x 3 MoE layers x (dispatch, combine) x 2 ranks
    for x, y in zip(a, b):
        assert (x.step, x.layer, x.module, x.rank, x.last_rank) == (y.step, y.layer, y.module, y.rank, y.last_rank)
        assert y.wait_us == pytest.approx(x.wait_us, abs=1e-3)
        assert y.transfer_us == pytest.approx(x.transfer_us, abs=1e-3)
    # The offset was measured, not assumed: rank 1's clock runs ahead by what was put in.
    for c in b:
        expected = offset + 100_000.0 if c.rank == "TP1-EP1" else 0.0
        assert c.clock_offset_us == pytest.approx(expected, abs=3.0)  # within the jitter of the ends


def test_comm_csv_and_the_split_survive_compare(tmp_path):
    injected = write_ep_ranks(tmp_path, jitter_us=1.0)
    result = _analyze(injected.paths)
    write_outputs(result, tmp_path / "out")
    with open(tmp_path / "out" / "comm.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:8] == ["step", "layer", "module", "rank", "busy_us", "wait_us", "transfer_us", "last_rank"]
    assert len(rows) == len(result.comm_rows) == 24
    column = load_column(tmp_path / "out")
    assert column.comm_rows == result.d4.comm_rows and column.stragglers == result.d4.stragglers
    text = render_markdown([column, column])
    assert "| wait / transfer | dispatch | wait |" in text and "Stragglers" in text


def test_a_collective_missing_on_one_rank_is_not_split_and_said_so(tmp_path):
    injected = write_ep_ranks(tmp_path, jitter_us=1.0)
    result = _analyze(injected.paths)
    dropped = next(r for r in result.kernel_rows if r.rank == "TP1-EP1" and (r.step, r.layer, r.module) == (1, 3, "combine")
                   and r.group == "moe")
    rows = [r for r in result.kernel_rows if r is not dropped]
    from analysis.attribution.comm_split import split_collectives
    from analysis.tables.comm_table import with_comm

    comm = split_collectives(rows, result.step_rows)
    unsplit = [c for c in comm if c.wait_us is None]
    assert [(c.rank, c.step, c.layer, c.module) for c in unsplit] == [("TP0-EP0", 1, 3, "combine")]
    column = with_comm(result.d4, comm, result.step_rows)
    assert "1 of 23 communication kernels are not split into wait and transfer: they have no copy on some rank" in \
        render_markdown([column])


def test_single_rank_has_no_split(tmp_path):
    injected = write_ep_ranks(tmp_path, ranks=2)
    result = _analyze(injected.paths[:1])
    assert result.comm_rows and all(c.wait_us is None and c.last_rank is None for c in result.comm_rows)
    assert result.d4.comm_rows == [] and result.d4.stragglers == []
    assert "12 of 12 communication kernels are not split into wait and transfer: one rank cannot tell" in \
        render_markdown([result.d4])
    write_outputs(result, tmp_path / "out")
    with open(tmp_path / "out" / "comm.csv", newline="") as fh:
        assert {row["wait_us"] for row in csv.DictReader(fh)} == {""}


def _check_invariants(rows, ranks: int) -> None:
    for c in rows:
        assert c.wait_us >= 0 and c.transfer_us >= 0
        assert c.wait_us + c.transfer_us == pytest.approx(c.busy_us, abs=1e-6)
    for key, copies in _collectives(rows).items():
        assert len(copies) == ranks, key
        assert len({c.last_rank for c in copies}) == 1, key
        last = [c for c in copies if c.rank == c.last_rank]
        assert len(last) == 1 and last[0].wait_us == pytest.approx(0.0, abs=1e-6), key


@pytest.mark.parametrize("case", EP_SETS)
def test_real_two_h200_expert_parallel_traces(case):
    files = sorted(ACCURACY.glob(f"dsv3ep-h200x2-e64k8-{case}-TP-*-DECODE.trace.json.gz"))
    assert len(files) == 2
    result = analyze([str(f) for f in files], options=AnalysisOptions(jobs=1, layers=4))
    rows = result.comm_rows
    # 2 steps x 3 MoE layers x (dispatch, combine) x 2 ranks, all NCCL send/recv, all matched.
    assert len(rows) == 24 and all(c.kernel.startswith("ncclDevKernel_SendRecv") for c in rows)
    assert (result.d4.comm_kernels, result.d4.comm_unsplit) == (24, 0)
    assert {c.module for c in rows} == {"dispatch", "combine"}
    _check_invariants(rows, ranks=2)
    # The alignment assumption holds on real hardware: aligned ends agree within a few us, and the
    # two ranks of one host need (almost) no clock shift.
    assert max(c.end_skew_us for c in rows) < 10.0
    assert max(abs(c.clock_offset_us) for c in rows) < 20.0
    # What the accuracy README says of these traces: in eager mode rank 0 arrives first at every
    # dispatch and waits there for rank 1 (its host launches later).
    if "eager" in case:
        for c in rows:
            if c.module == "dispatch":
                assert c.last_rank == "TP1-EP1"
        top = result.d4.stragglers[0]
        assert (top.module, top.rank) == ("dispatch", "TP1-EP1") and top.others_wait_us > 100.0
    # The split rows add up to the dispatch kernel's D4 row.
    split = {(r.module, r.kernel): r.value_us for r in result.d4.comm_rows}
    sendrecv = {r.module: r.value_us for r in result.d4.rows if r.kernel.startswith("ncclDevKernel_SendRecv")}
    for module in ("dispatch", "combine"):
        assert split[(module, "wait")] + split[(module, "transfer")] == pytest.approx(sendrecv[module], rel=1e-6)


@pytest.mark.parametrize("rel,signature", [
    ("nvidia/vllm_gpt-oss-120b_b200_eager/eager_trace.json.gz", "generic"),
    ("nvidia/deepseek-v3_train_h800/train.json", "generic"),
])
def test_public_single_rank_traces_say_they_cannot_split(rel, signature):
    result = analyze([real_trace(rel)], signature=signature, options=AnalysisOptions(jobs=1))
    assert result.comm_rows, "these traces hold communication kernels"
    assert all(c.wait_us is None and c.transfer_us is None and c.last_rank is None for c in result.comm_rows)
    assert all(c.busy_us > 0 for c in result.comm_rows)
    assert result.d4.comm_rows == [] and "Stragglers" not in render_markdown([result.d4])
