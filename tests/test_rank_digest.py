"""Rank digests (analysis/pipeline/rank_digest.py): tables built from what each rank's worker made of
its rows are the tables built from the rows.

Two kinds of input: the bundled REAL expert-parallel traces (every check passes there), analysed with
a worker per rank and with --jobs 1; and a SYNTHETIC 3-rank DeepSeek-V3 trace set
(tests/synthetic_deepseek.py) whose rows are broken the way a wrong attribution or a bad trace would,
on several ranks at once, so that the merged failures have to name the right rank, step and layer:
those known answers are what the perturbations put there.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import msgspec
import pytest

from analysis.pipeline import AnalysisOptions, analyze, attribute, combine_rows, write_outputs
from analysis.attribution.comm_split import rank_collectives, rows_by_rank, split_collectives
from analysis.ingest.kernel_classes import class_of_name
from analysis.attribution.signature import load_signature
from analysis.tables.d4 import main_stage
from analysis.attribution.kernel_columns import KernelColumns
from analysis.pipeline.lazy_rows import LazyRows
from analysis.tables.kernel_table import read_kernel_rows
from analysis.pipeline.rank_digest import Digest, digest_rank
from analysis.tables.self_checks import FAIL, run_checks, thresholds
from conftest import ROOT
from synthetic_deepseek import write_rank_trace
from self_check_rows import rank_checks, rows_by_step

EP = ROOT / "tests" / "data" / "sglang-real" / "ep"
EP4 = sorted(EP.glob("sglang-0.5.17-dsv3-4l-fp8-h100x4-deepep-ll-eager-TP-*.trace.json.gz"))
EP2_MTP = sorted(EP.glob("sglang-0.5.17-dsv3-4l-fp8-h100x2-deepep-ll-mtp-graph-TP-*.trace.json.gz"))
SMALL_TABLES = ("d4.md", "d4.csv", "d4_detail.csv", "steps.csv", "streams.csv", "problems.csv", "comm.csv",
                "checks.csv", "analysis.json")
SIGNATURE = "sglang-sm90-deepep-ll"


def _outputs(paths: list[Path], folder: Path, **options) -> dict[str, object]:
    result = analyze([str(p) for p in paths], options=AnalysisOptions(**options))
    write_outputs(result, folder)
    files: dict[str, object] = {name: (folder / name).read_bytes() for name in SMALL_TABLES}
    files["kernels_long.parquet"] = read_kernel_rows(folder / "kernels_long.parquet")
    return {"result": result, **files}


@pytest.mark.parametrize("paths", [EP4, EP2_MTP], ids=["ep4-eager", "ep2-mtp-graph"])
def test_workers_digests_give_the_tables_the_rows_give(paths, tmp_path):
    assert len(paths) >= 2
    workers = _outputs(paths, tmp_path / "workers", jobs=2)
    one_by_one = _outputs(paths, tmp_path / "j1", jobs=1)
    for made in (workers, one_by_one):  # each rank's digest, from its columns, in a worker or in this process
        assert made["result"].digest is not None and made["result"].digest.holds(made["result"].kernel_rows)
    result = one_by_one["result"]  # and the tables built from the rows alone, as combine_nodes builds them
    from_rows = combine_rows(list(result.kernel_rows), result.step_rows, [], AnalysisOptions(),
                             load_signature("generic"), None, total_bytes=result.json_bytes)
    assert from_rows.digest is None
    write_outputs(from_rows, tmp_path / "rows")
    rows_files = {name: (tmp_path / "rows" / name).read_bytes() for name in SMALL_TABLES if name != "analysis.json"}
    rows_files["kernels_long.parquet"] = read_kernel_rows(tmp_path / "rows" / "kernels_long.parquet")
    for name in (*SMALL_TABLES, "kernels_long.parquet"):
        assert workers[name] == one_by_one[name], name
        if name in rows_files:
            assert rows_files[name] == one_by_one[name], name


def test_the_stream_summary_follows_the_rank_labels_not_the_worker_order(tmp_path):
    labels = {str(EP4[0]): "z-last", str(EP4[1]): "a-first", str(EP4[2]): "m-middle", str(EP4[3]): "b-second"}
    workers = analyze([str(p) for p in EP4], options=AnalysisOptions(jobs=2, labels=labels))
    one_by_one = analyze([str(p) for p in EP4], options=AnalysisOptions(jobs=1, labels=labels))
    assert [s.rank for s in workers.streams] == sorted(s.rank for s in workers.streams)
    assert workers.streams == one_by_one.streams


def test_workers_rows_stay_encoded_until_read_and_read_back_equal(tmp_path):
    """`analyze` with workers keeps the rows in the digests' encoded kernel table: the tables and
    every file are made without decoding them, and read, they are the rows of one process."""
    workers = analyze([str(p) for p in EP4], options=AnalysisOptions(jobs=2))
    write_outputs(workers, tmp_path)
    rows = workers.kernel_rows
    assert isinstance(rows, LazyRows) and not rows.made  # nothing on the command's path read them
    in_process = analyze([str(p) for p in EP4], options=AnalysisOptions(jobs=1))
    write_outputs(in_process, tmp_path / "j1")
    one_by_one = in_process.kernel_rows  # this process's ranks: kept as their columns, made into rows when read
    assert isinstance(one_by_one, LazyRows) and not one_by_one.made
    assert len(rows) == len(one_by_one) and not rows.made  # the count needs no decoding
    assert rows == one_by_one and list(rows) == list(one_by_one) and rows[5] == one_by_one[5]
    sent = pickle.loads(pickle.dumps(rows))  # to another process (a node's result) as the plain rows
    assert type(sent) is list and sent == list(one_by_one)
    sent_columns = attribute([str(p) for p in EP4], options=AnalysisOptions(jobs=2)).kernel_rows  # sent back whole
    assert sent_columns == list(one_by_one)


def test_the_split_leaves_the_workers_parts_as_they_came():
    result = analyze([str(p) for p in EP4], options=AnalysisOptions(jobs=1))
    rows, steps = result.kernel_rows, result.step_rows
    parts = {rank: rank_collectives(rank, own) for rank, own in rows_by_rank(rows).items()}
    before = pickle.dumps(parts)
    first = split_collectives(rows, steps, parts)
    assert any(c.wait_us is not None for c in first)  # it did split
    assert first == split_collectives(rows, steps, parts) == split_collectives(rows, steps)
    assert pickle.dumps(parts) == before


def test_a_digest_of_other_rows_is_not_used(tmp_path):
    """A caller that filters the rows before combining gets tables of the rows it gave."""
    rows = analyze([str(p) for p in EP4], options=AnalysisOptions(jobs=2))
    assert rows.digest is not None
    kept = [r for r in rows.kernel_rows if r.rank != "TP3-EP3"]
    steps = [s for s in rows.step_rows if s.rank != "TP3-EP3"]
    sig = load_signature("generic")
    with_digest = combine_rows(kept, steps, [], AnalysisOptions(), sig, None, digest=rows.digest)
    without = combine_rows(kept, steps, [], AnalysisOptions(), sig, None)
    assert with_digest.digest is None
    assert with_digest.d4 == without.d4 and with_digest.checks == without.checks
    assert {s.rank for s in with_digest.streams} == {"TP0-EP0", "TP1-EP1", "TP2-EP2"}


# ---------------------------------------------------------------- failures merged across ranks


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """A SYNTHETIC 3-rank run, analysed, then its rows broken on several ranks (known answers below)."""
    tmp = tmp_path_factory.mktemp("digest")
    paths = []
    for r in range(3):
        path = tmp / f"syn-TP-{r}-DECODE.trace.json.gz"
        write_rank_trace(path, load_signature(SIGNATURE), num_layers=4, dense_layers=1, steps=3,
                         clock_us=1e6 * r, scale=1 + 0.1 * r)
        paths.append(str(path))
    result = analyze(paths, signature=SIGNATURE, options=AnalysisOptions(layers=4, jobs=1))
    rows = list(result.kernel_rows)
    gemm = next(r.kernel_name for r in rows if r.module == "o_proj")
    core = next(r.kernel_name for r in rows if class_of_name(r.kernel_name) == "attn_core")

    def edit(rank, step, pick, **changes):
        hits = 0
        for i, r in enumerate(rows):
            if r.rank == rank and r.step == step and pick(r):
                rows[i] = msgspec.structs.replace(r, **{k: v(r) if callable(v) else v for k, v in changes.items()})
                hits += 1
        assert hits, (rank, step, changes)

    edit("TP2", 0, lambda r: r.layer == 2 and r.module == "router", kernel_name=gemm)  # sequence outliers
    edit("TP1", 1, lambda r: r.layer == 3 and r.module == "router", kernel_name=gemm)
    edit("TP2", 1, lambda r: r.layer == 1 and r.kernel_name == core, section="pre")  # a core outside layers
    edit("TP0", 1, lambda r: r.layer == 1 and r.module == "o_proj", busy_us=-1.0)  # negative durations
    edit("TP2", 0, lambda r: r.layer in (1, 3) and r.module in ("o_proj", "router"), busy_us=-2.0)
    edit("TP1", 1, lambda r: r.layer == 2 and r.group == "moe", busy_us=lambda r: r.busy_us * 9)  # slow layers
    edit("TP0", 0, lambda r: r.layer == 3 and r.group == "moe", busy_us=lambda r: r.busy_us * 6)
    for rank in ("TP2", "TP1"):  # the tail counted in the last layer
        for step in range(3):
            edit(rank, step, lambda r: r.section == "post", section="layer", layer=3)
    return result, rows


def _as_workers(result, rows, strict: bool, stage: str | None = None) -> dict:
    """Each rank's part made from its own rows alone, as its worker makes it (`stage`: another one)."""
    parts = {}
    for rank in ("TP0", "TP1", "TP2"):
        own = [r for r in rows if r.rank == rank]
        steps = [s for s in result.step_rows if s.rank == rank]
        parts[rank] = rank_checks(rank, steps, rows_by_step(own), stage or main_stage(steps), strict, {}, thresholds())
    return parts


@pytest.mark.parametrize("strict", [False, True])
def test_failures_on_several_ranks_merge_as_the_rows_say(broken, strict):
    result, rows = broken
    from_rows = run_checks(rows, result.step_rows, result.d4, None, 4, strict)
    from_parts = run_checks(rows, result.step_rows, result.d4, None, 4, strict, None, _as_workers(result, rows, strict))
    assert from_parts == from_rows
    by_name = {c.check: c for c in from_parts}
    assert {name for name, c in by_name.items() if c.verdict == FAIL} == {
        "layer_kernel_sequence", "layer_time", "after_layers", "attention_cores_in_layers", "kernel_durations"}
    # the first outlier by rank, step and layer; the slowest layer over every rank (x9 beats x6)
    assert "TP1 step 1 layer 3" in by_name["layer_kernel_sequence"].why
    assert "TP2 step 0 layer 2" in by_name["layer_kernel_sequence"].why
    assert by_name["layer_time"].why.startswith("TP1 step 1 MoE layer 2 computes")
    assert by_name["after_layers"].why.startswith("TP1: the last layer")  # the first rank by label of TP1, TP2
    assert by_name["attention_cores_in_layers"].why.startswith("first: TP2 step 1, pre section")
    durations = by_name["kernel_durations"]
    # 2 rows of TP0 and 5 of TP2 made negative, 3 stretched into the next step: TP0's come first, 3 named
    assert durations.value.startswith("10 of ") and durations.why.endswith(" ...")
    assert durations.why.count("; ") == 2 and durations.why.count("TP0 step ") == 3 and "TP2" not in durations.why


def test_a_part_made_for_another_stage_is_made_again_from_the_rows(broken):
    result, rows = broken
    from_rows = run_checks(rows, result.step_rows, result.d4, None, 4, False)
    wrong_stage = _as_workers(result, rows, False, stage="extend")
    assert run_checks(rows, result.step_rows, result.d4, None, 4, False, None, wrong_stage) == from_rows
    wrong_strict = _as_workers(result, rows, True)
    assert run_checks(rows, result.step_rows, result.d4, None, 4, False, None, wrong_strict) == from_rows


def test_a_digest_travels_between_processes_whole(broken):
    result, rows = broken
    own = [r for r in rows if r.rank == "TP1"]
    steps = [s for s in result.step_rows if s.rank == "TP1"]
    digest = digest_rank("TP1", KernelColumns.of_rows(own), steps, {}, False)
    back = pickle.loads(pickle.dumps(digest))
    assert back.rows == len(own) and back.checks == digest.checks and back.streams == digest.streams
    assert [[c.pages for c in g.chunks] for g in back.kernel_table] == [[c.pages for c in g.chunks] for g in digest.kernel_table]
    def cells(d):
        return {k: (v.cells.keys(), v.outside, v.mtp_us, {s: list(us) for s, us in v.source_us.items()})
                for k, v in d.cells.items()}
    assert cells(back) == cells(digest)
    merged = Digest()
    merged.add("TP1", back)
    assert merged.holds(own) and not merged.holds(rows)
