"""A rank's kernel rows as columns (analysis/attribution/kernel_columns.py) give every table the rows give.

The truth here is the code that reads KernelRows (still what a filtered analysis, a saved analysis read
again and a node result without digests use):
d4.step_cells, overlap.stream_summary, share_overlap.share_cells, comm_split.rank_collectives,
the self-checks' plain loops over rows (tests/self_check_rows.py) and the kernel table's list writer. The columns' versions share none of
their loops. Inputs: REAL traces chosen so that each path is taken (DeepEP low-latency send / recv
labels, two micro-batches, copies off the step's threads, a shared expert beside the all-to-all,
collectives, MTP), and the same traces PERTURBED with a seed (known only by their effect: the checks
then fail in every way they can, and both readings must still agree). The Parquet pages are also
compared on SYNTHETIC columns at each index width's edge.
"""
from __future__ import annotations

import pickle
import random
import subprocess
import sys

import numpy as np
import pytest

from analysis.attribution.comm_split import rank_collectives, rank_collectives_of_columns
from analysis.attribution.kernel_columns import KernelColumns, _coded, distinct_codes
from analysis.attribution.overlap import stream_summary
from analysis.attribution.rank.attribute import RankOptions, attribute_rank_columns
from analysis.attribution.rows import SECTION_SIDE
from analysis.attribution.signature import load_signature
from analysis.ingest.trace_loader import load_trace
from analysis.io.parquet_columns import coded_chunk, float_chunk, int_chunk
from analysis.io.parquet_writer import FLOAT64, INT64, STRING, _Chunk, write_row_groups
from analysis.tables import column_cells
from analysis.tables.column_cells import share_cells_of_columns, step_cells_of_columns, stream_summary_of_columns
from analysis.tables.d4 import main_stage, step_cells
from analysis.io.parquet_writer import encode_row_groups
from analysis.tables.kernel_table import COLUMNS, METADATA, encode_kernel_columns, read_kernel_rows
from analysis.tables.self_check_columns import rank_checks_of_columns
from analysis.tables.self_checks import thresholds
from analysis.tables.share_overlap import share_cells
from conftest import ROOT
from self_check_rows import rank_checks, rows_by_step

REAL = ROOT / "tests" / "data" / "sglang-real"
TRACES = {
    "deepep-ll-eager": next((REAL / "ep").glob("sglang-0.5.17-dsv3-4l-fp8-h100x4-deepep-ll-eager-TP-0-*.trace.json.gz")),
    "tbo-graph": next((REAL / "tbo").glob("sglang-0.5.17-dsv3-4l-fp8-h100x2-deepep-tbo-dpattn-graph-TP-0-*.trace.json.gz")),
    "pd-prefill": next((REAL / "pd").glob("*prefill-nostack-TP-0*.trace.json.gz")),
    "mtp": REAL / "sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz",
    "tbo61-graph": next((REAL / "tbo61").glob("*graph-TP-1-*.trace.json.gz")),
}


@pytest.fixture(scope="module", params=sorted(TRACES))
def attributed(request):
    options = RankOptions(release_kernels=True)
    columns, steps = attribute_rank_columns(load_trace(str(TRACES[request.param])), load_signature("generic"), None,
                                            options)
    chains = {(columns.rank, step): chain for step, chain in options.chains.items()}
    return request.param, columns, steps, chains


def _cells(cells: dict) -> dict:
    """StepCells as plain values (source_us lists or arrays alike)."""
    return {key: ([(k, v[0], v[1], v[2].bits, v[2].others) for k, v in c.cells.items()], c.outside, c.mtp_us,
                  [(s, [float(x) for x in us]) for s, us in c.source_us.items()]) for key, c in cells.items()}


def _pages(groups) -> list:
    return [(g.rows, [(c.name, c.kind, c.rows, c.uncompressed, c.pages) for c in g.chunks]) for g in groups]


def test_the_tables_of_the_columns_are_the_tables_of_the_rows(attributed):
    name, columns, steps, chains = attributed
    rows = columns.rows()
    assert len(rows) == len(columns) > 0
    assert _pages(encode_kernel_columns(columns)) == _pages(encode_row_groups(rows, COLUMNS))
    assert _cells(step_cells_of_columns(columns)) == _cells(step_cells(rows))
    assert stream_summary_of_columns(columns) == stream_summary(rows)
    assert share_cells_of_columns(columns) == share_cells(rows)
    assert rank_collectives_of_columns(columns.rank, columns) == rank_collectives(columns.rank, rows)
    for stage in {main_stage(steps), "decode", "extend", "unknown"}:
        for strict in (False, True):
            assert (rank_checks_of_columns(columns.rank, steps, columns, stage, strict, chains, thresholds())
                    == rank_checks(columns.rank, steps, rows_by_step(rows), stage, strict, chains, thresholds()))
    back = pickle.loads(pickle.dumps(columns))  # what a rank worker sends
    assert back.rows() == rows


def test_the_traces_take_every_path():
    """The traces above hold what each path of the columns' readers is for (else the test above proves less)."""
    seen = set()
    for path in TRACES.values():
        options = RankOptions(release_kernels=True)
        columns, _steps = attribute_rank_columns(load_trace(str(path)), load_signature("generic"), None, options)
        rows = columns.rows()
        seen |= {"side"} if any(r.section == SECTION_SIDE for r in rows) else set()
        seen |= {"send/recv"} if any(r.kernel.endswith(("(send)", "(recv)")) for r in rows) else set()
        seen |= {"micro-batch 1"} if any(r.micro_batch == 1 for r in rows) else set()
        seen |= {"shared expert"} if share_cells(rows) else set()
        seen |= {"collectives"} if rank_collectives(columns.rank, rows).rows else set()
        seen |= {"mtp"} if any(c.mtp_us is not None for c in step_cells(rows).values()) else set()
        seen |= {"several sources"} if any(len(c.source_us) > 1 for c in step_cells(rows).values()) else set()
    # (no bundled trace has an MTP row outside the layers: _perturbed makes some)
    assert seen == {"side", "send/recv", "micro-batch 1", "shared expert", "collectives", "several sources"}


def test_the_step_cells_read_in_blocks_are_the_same(attributed, monkeypatch):
    _name, columns, _steps, _chains = attributed
    whole = _cells(step_cells_of_columns(columns))
    monkeypatch.setattr(column_cells, "BLOCK_ROWS", 97)  # many blocks, a step longer than one among them
    assert _cells(step_cells_of_columns(columns)) == whole


def _perturbed(columns: KernelColumns, rng: random.Random) -> KernelColumns:
    """A copy with a few rows changed the way a bad trace or a wrong attribution would change them."""
    out = pickle.loads(pickle.dumps(columns))
    steps = column_cells.step_bounds(out.step)
    for _ in range(rng.randint(1, 4)):
        first, end = steps[rng.randrange(len(steps))]
        i = rng.randrange(first, end)
        kind = rng.randrange(11)
        if kind == 0:  # a slow layer (or kernel, or an empty one): layer_time
            factor = rng.choice([20.0, 500.0, 0.0])
            if rng.random() < 0.5:
                out.busy_us[i] *= factor
            else:
                out.busy_us[first:end][out.layer[first:end] == out.layer[i]] *= factor
        elif kind == 1:  # another kernel's name: layer_kernel_sequence, attention cores
            early = [j for j in range(first, end) if 0 <= out.layer[j] <= 2]  # dense layers come first
            if early and rng.random() < 0.5:
                i = rng.choice(early)
            out.name[i] = rng.randrange(len(out.names))
        elif kind == 2:  # a kernel late or early: kernel_durations, far gaps, out of start order
            out.start_us[i] += rng.choice([1e5, 2e6, -50.0, 3e7])
        elif kind == 3:  # the rest of the step far away
            out.start_us[i:end] += 1.5e6
        elif kind == 4:  # another slot: another section, group or module
            out.slot[i] = rng.randrange(len(out.slots))
        elif kind == 5:
            out.layer[i] = rng.choice([0, 1, 70, int(out.layer[i]) + 1])
        elif kind == 6:  # the tail counted in the last layer: after_layers
            in_layer = [j for j in range(first, end) if out.slots[out.slot[j]][0] == "layer"]
            if in_layer:
                out.slot[in_layer[-1]:end] = out.slot[in_layer[-1]]
                out.layer[in_layer[-1]:end] = out.layer[in_layer[-1]]
        elif kind == 9:  # the last step's tail far away: a far gap, with no next step to run into
            first, end = steps[-1]
            out.start_us[rng.randrange(first + 1, end):end] += 1.5e6
        elif kind == 10:  # a step's last kernel ending just past the slack into the next step
            at = rng.randrange(len(steps) - 1)
            last, following = steps[at][1] - 1, steps[at + 1][0]
            slack = float(thresholds()["durations"]["slack_us"])
            out.busy_us[last] = max(0.0, out.start_us[following] + 1.5 * slack - out.start_us[last])
        elif kind == 7:  # a start that is not a number: the rank is read from its rows
            out.start_us[i] = float("nan")
        else:  # an MTP row outside the layers (the D4 table's draft time)
            section = rng.choice(["pre", "post"])
            out.slots = [*out.slots, (section, "mtp", "draft", "kernel", "structure", "", "", "")]
            out.slot[i] = len(out.slots) - 1
    return out


def test_the_checks_agree_on_perturbed_rows():
    failed = set().union(*map(_agree_on_perturbed_rows, ("deepep-ll-eager", "tbo-graph", "mtp", "tbo61-graph")))
    assert failed >= {"sequence_outliers", "time_outliers", "bad_durations", "empty_after_steps", "mtp"}


def _agree_on_perturbed_rows(trace: str) -> set[str]:
    """Both readings of the checks agree on 25 seeded perturbations of the trace; the checks that failed."""
    options = RankOptions(release_kernels=True)
    base, steps = attribute_rank_columns(load_trace(str(TRACES[trace])), load_signature("generic"), None, options)
    chains = {(base.rank, step): chain for step, chain in options.chains.items()}
    stage = main_stage(steps)
    rng = random.Random(7)
    failed = set()
    for _ in range(25):
        columns = _perturbed(base, rng)
        rows = columns.rows()
        for strict in (False, True):
            part = rank_checks(base.rank, steps, rows_by_step(rows), stage, strict, chains, thresholds())
            assert rank_checks_of_columns(base.rank, steps, columns, stage, strict, chains, thresholds()) == part
            failed |= {f for f in ("sequence_outliers", "time_outliers", "bad_durations", "empty_after_steps",
                                   "cores_outside") if getattr(part, f)}
        cells = step_cells(rows)
        failed |= {"mtp"} if any(c.mtp_us is not None for c in cells.values()) else set()
        # repr: a start made not a number is not equal to itself
        assert repr(_cells(step_cells_of_columns(columns))) == repr(_cells(cells))
        assert repr(rank_collectives_of_columns(base.rank, columns)) == repr(rank_collectives(base.rank, rows))
    return failed


@pytest.mark.parametrize("distinct", [1, 2, 255, 256, 257, 65536, 65537])
def test_coded_pages_are_the_list_writers_at_every_index_width(distinct):
    """SYNTHETIC columns: indices of 8, 16 and 32 bits (and none for one value), a dictionary in the
    order values first appear whatever their codes."""
    rng = np.random.default_rng(distinct)
    rows = max(3 * distinct, 10)
    codes = rng.permutation(np.resize(np.arange(distinct, dtype=np.int32), rows))
    table = [f"value {i} \u00e9" for i in rng.permutation(distinct)]
    assert coded_chunk("s", STRING, codes, table).pages == _Chunk("s", STRING, [table[c] for c in codes.tolist()]).pages
    numbers = rng.integers(-5, 5, size=rows) * (1 << 40) + codes  # a wide range: the sorted path
    assert int_chunk("n", INT64, numbers).pages == _Chunk("n", INT64, numbers.tolist()).pages
    assert int_chunk("m", INT64, codes - 3).pages == _Chunk("m", INT64, (codes - 3).tolist()).pages


def test_float_pages_keep_every_value():
    values = np.array([0.0, -0.0, 1.5, float("inf"), -float("inf"), float("nan"), 1e-310])
    assert float_chunk("f", values).pages == _Chunk("f", FLOAT64, values.tolist()).pages


def test_the_command_imports_numpy_only_once_a_trace_is_loaded():
    """numpy's import takes about 15 MB of resident memory: imported after the load, it reuses the
    memory the JSON's buffers left (the step cut imports it); with the command's modules, the load's
    peak grew by it, and a command that reads no trace (--help, validate) paid for it."""
    code = "import sys, harness.cli, analysis.pipeline; assert 'numpy' not in sys.modules, 'numpy imported early'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_written_kernel_table_reads_back_as_the_rows(attributed, tmp_path):
    _name, columns, _steps, _chains = attributed
    with open(tmp_path / "kernels_long.parquet", "wb") as fh:
        write_row_groups(fh, encode_kernel_columns(columns), COLUMNS, METADATA)
    assert read_kernel_rows(tmp_path / "kernels_long.parquet") == columns.rows()


@pytest.mark.parametrize("asked, threads", [(None, 1), ("2", 2)])
def test_numpy_loads_without_a_thread_pool_unless_asked(asked, threads):
    """analysis/numeric.py: no BLAS threads by default (the variable gone again after the import), and a
    user's own OPENBLAS_NUM_THREADS kept (a program doing its own linear algebra beside the analysis)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if asked is not None:
        env["OPENBLAS_NUM_THREADS"] = asked
    code = ("import os, analysis.numeric; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(asked), str(threads)]


def test_values_are_numbered_in_the_order_they_first_come():
    """distinct_codes' order is its callers' (a label's distinct values, of_rows' tables); _coded numbers
    only the values its table has not seen, in the order they come, a repeated one once."""
    assert distinct_codes(["b", "a", "b", "c", "a"]) == (["b", "a", "c"], [0, 1, 0, 2, 1])
    codes = {"a": 0}
    assert _coded(["c", "a", "b", "c", "d"], codes) == [1, 0, 2, 1, 3]
    assert codes == {"a": 0, "c": 1, "b": 2, "d": 3}
    assert _coded(["d", "a"], codes) == [3, 0] and len(codes) == 4


def test_the_columns_take_no_more_rows_than_they_were_sized_for():
    """ColumnsBuilder sizes each column once (kernel_columns.py): a row beyond is an error, never a
    column silently cut short or grown."""
    from analysis.attribution.kernel_columns import ColumnsBuilder
    from analysis.attribution.step_times import StepTimes
    from analysis.ingest.trace_model import Kernel

    kernels = [Kernel("k", 7, float(i), 1.0, i, "") for i in range(3)]
    labels = [("layer", "g", "m", "k", "structure", "role", "rule", "")] * 3
    builder = ColumnsBuilder("run", "rank0", 3)
    builder.add(0, "decode", kernels[:2], labels[:2], [0, 0], [0, 0], [1.0, 1.0], StepTimes.of(kernels[:2]))
    with pytest.raises(ValueError, match="more rows than the 3"):
        builder.add(1, "decode", kernels, labels, [0] * 3, [0] * 3, [1.0] * 3, StepTimes.of(kernels))
    builder.add(1, "decode", kernels[2:], labels[2:], [1], [0], [0.5], StepTimes.of(kernels[2:]))
    columns = builder.columns()
    assert columns.step.tolist() == [0, 0, 1] and columns.exposed_us.tolist() == [1.0, 1.0, 0.5]
    assert columns.start_us.tolist() == [0.0, 1.0, 2.0] and columns.layer.tolist() == [0, 0, 1]


def test_steps_that_repeat_the_last_ones_values_keep_their_own_values():
    """ColumnsBuilder codes a step again only where its slots, names or streams differ from the last
    rows of as many values (a decode replaying one graph repeats them; a plan's slots and interned
    names are the very same objects). SYNTHETIC steps, the answers being what was given: a step like
    the last (the same objects, and equal new ones), its side rows between, a few names, streams or
    labels changed (new values, and new objects of old values, before and after values first seen),
    most of them changed, steps of more lengths than the builder keeps, and back again; every row
    reads back as given."""
    from analysis.attribution.kernel_columns import _LAST_KEPT, ColumnsBuilder
    from analysis.attribution.step_times import StepTimes
    from analysis.ingest.trace_model import Kernel

    names = [f"k{i}" for i in range(32)]  # one object per name, as the loader interns them
    labels = [("layer", "g", f"m{i % 3}", f"k{i}", "structure", "role", "rule", "") for i in range(32)]

    def step(n: int, names_at: dict | None = None, streams_at: dict | None = None, labels_at: dict | None = None):
        names_at, streams_at, labels_at = names_at or {}, streams_at or {}, labels_at or {}
        kernels = [Kernel(names_at.get(i, names[i]), streams_at.get(i, 7 + i % 2), float(i), 1.0, i, "")
                   for i in range(n)]
        return kernels, [labels_at.get(i, labels[i]) for i in range(n)]

    def copy(label: tuple, **changed) -> tuple:
        fields = dict(zip(("section", "group", "module", "kernel", "source", "role", "rule", "path"), label))
        return tuple({**fields, **changed}.values())

    side = ([Kernel("copy", 3, 0.5, 0.1, 99, "")], [("side", "other", "copy", "copy", "side", "side", "side", "")])
    plan = [
        step(6), side, step(6), side,
        step(6, labels_at={i: copy(labels[i]) for i in range(6)}),  # equal labels, new objects
        step(6, names_at={2: "renamed", 4: "".join(["k", "4"])}),  # a new name, and an old one anew
        step(6, names_at={1: "other", 3: "renamed"}),  # a name first seen, before one seen a step ago
        step(6, streams_at={4: 9, 0: 11}),
        step(6, labels_at={1: copy(labels[1], module="mX"), 5: copy(labels[0])}),
        step(6, labels_at={i: copy(labels[i], rule=f"r{i}") for i in range(5)}),  # most changed
        step(6),
        *[step(n) for n in range(1, _LAST_KEPT + 3)],
        step(6), step(6, names_at={5: "last"}),
    ]
    builder = ColumnsBuilder("run", "rank0", sum(len(k) for k, _ in plan))
    for index, (kernels, step_labels) in enumerate(plan):
        n = len(kernels)
        builder.add(index, "decode", kernels, step_labels, [0] * n, [0] * n, [0.0] * n, StepTimes.of(kernels))
    rows = builder.columns().rows()
    given = [(index, k.name, k.stream, step_labels[i]) for index, (kernels, step_labels) in enumerate(plan)
             for i, k in enumerate(kernels)]
    assert [(r.step, r.kernel_name, r.stream, (r.section, r.group, r.module, r.kernel, r.source, r.role, r.rule,
                                                r.module_path)) for r in rows] == given
