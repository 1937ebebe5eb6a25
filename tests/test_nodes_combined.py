"""A run's nodes analysed apart and combined give the table `analyze` gives on all their ranks at once.

The real two-node DeepEP job (tests/data/sglang-real/ray-run/...2x2_deepep...): node 0 holds TP-0 and
TP-1, node 1 TP-2 and TP-3, as on the lent machine. Before the node path and the command shared one
tail, the node's own analysis applied the run's rank policy to its own ranks (a policy naming node 1's
rank failed node 0), and the combined table skipped the rank-policy check and the "no usable step" error."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.pipeline import AnalysisError, AnalysisOptions, analyze
from analysis.tables.d4 import render_markdown
from harness.node.node_analysis import analyze_node, combine

RUN = Path(__file__).parent / "data" / "sglang-real" / "ray-run" / "sglang_dsv3_4l_2x2_deepep-20261126-124934"
TRACES = sorted(str(p) for p in (RUN / "traces").glob("*.trace.json.gz"))


def _options(policy: str) -> dict:
    return {"run": "run", "signature": "generic", "model": None, "rank_policy": policy, "tbo": False, "jobs": 1,
            "capture_traces": []}


def _nodes(policy: str):
    parts = [analyze_node(TRACES[:2], _options(policy) | {"node": 0}),
             analyze_node(TRACES[2:], _options(policy) | {"node": 1})]
    return combine(parts, _options(policy))


@pytest.mark.parametrize("policy", ["mean", "max", "rank:TP3-EP3"])
def test_nodes_combined_equal_one_analysis_of_every_rank(policy):
    assert len(TRACES) == 4
    combined = _nodes(policy)
    direct = analyze(TRACES, options=AnalysisOptions(run="run", rank_policy=policy, jobs=1))
    assert render_markdown([combined.d4]) == render_markdown([direct.d4])
    assert [c.verdict for c in combined.checks] == [c.verdict for c in direct.checks]


def test_a_rank_policy_naming_no_rank_of_any_node_is_refused():
    with pytest.raises(AnalysisError, match="names a rank that is not among the analysed ones"):
        _nodes("rank:TP7-EP7")


def test_a_rank_that_failed_on_a_node_is_named_under_the_combined_table(tmp_path):
    """A node with one rank file that cannot be read: the combined table names it (as the run
    directory keeps it, traces/NAME), as `analyze` names a failed file under its own table."""
    import shutil

    good = tmp_path / Path(TRACES[1]).name
    shutil.copy(TRACES[1], good)
    broken = tmp_path / Path(TRACES[0]).name
    broken.write_bytes(b"not gzip at all")
    parts = [analyze_node([str(broken), str(good)], _options("mean") | {"node": 0}),
             analyze_node(TRACES[2:], _options("mean") | {"node": 1})]
    combined = combine(parts, _options("mean"))
    assert len(combined.d4.failed_files) == 1
    assert combined.d4.failed_files[0].startswith(f"traces/{broken.name}: "), combined.d4.failed_files
    assert str(tmp_path) not in render_markdown([combined.d4])


def test_the_head_combines_the_nodes_digests_without_making_a_kernel_row():
    """Each node digests its ranks where it attributed them; the head merges the digests node after
    node and makes no KernelRow (a node's rows crossed as KernelRows before: the head then walked
    every rank's rows again, docs/performance.md). The tables are those the rows give: the same node
    results with their digests taken away are combined from the rows, the old way."""
    import msgspec

    parts = [analyze_node(TRACES[:2], _options("mean") | {"node": 0}),
             analyze_node(TRACES[2:], _options("mean") | {"node": 1})]
    assert all(part["digest"] is not None for part in parts)
    combined = combine(parts, _options("mean"))
    assert combined.digest is not None and combined.digest_of_rows is combined.digest
    assert not combined.kernel_rows.made, "the head read the kernel rows"
    assert len(combined.kernel_rows) == sum(len(part["kernel_rows"]) for part in parts)
    from_rows = combine([{k: v for k, v in part.items() if k != "digest"} for part in parts], _options("mean"))
    assert from_rows.digest is None
    assert render_markdown([combined.d4]) == render_markdown([from_rows.d4])
    assert msgspec.to_builtins(combined.checks) == msgspec.to_builtins(from_rows.checks)
    assert msgspec.to_builtins(combined.comm_rows) == msgspec.to_builtins(from_rows.comm_rows)
    assert combined.streams == from_rows.streams
    assert list(combined.kernel_rows) == list(from_rows.kernel_rows)  # node 0's ranks, then node 1's


def test_a_node_result_crosses_as_its_encoded_kernel_table_not_as_rows():
    """What a node hands the head (pickled, as Ray sends it) holds its rows as the digests' encoded
    kernel table, made into KernelRows on the head only when read: a small fraction of the rows
    pickled, and the same rows."""
    import pickle

    part = analyze_node(TRACES[:2], _options("mean") | {"node": 0})
    rows = list(part["kernel_rows"])  # made here, on a copy's side below
    sent = analyze_node(TRACES[:2], _options("mean") | {"node": 0})
    blob = pickle.dumps(sent)
    assert not sent["kernel_rows"].made, "pickling made the rows"
    back = pickle.loads(blob)
    assert not back["kernel_rows"].made and len(back["kernel_rows"]) == len(rows)
    assert list(back["kernel_rows"]) == rows
    table, as_rows = len(pickle.dumps(sent["kernel_rows"])), len(pickle.dumps(rows))
    assert table < as_rows / 3, (table, as_rows)
