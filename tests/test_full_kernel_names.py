"""The kernel column keeps each kernel apart: whole names in the tables, a short form only where shown.

Why: the column held the name cut at its first `<` or `(` and at 48 characters, so on a real SGLang
trace seven different `at::native::vectorized_elementwise_kernel<...>` kernels of the MoE experts
summed into one D4 row, and `at::native::(anonymous namespace)::...` kernels into a row called
`at::native::`. Real traces: tests/data/sglang-real (SGLang 0.5.17 on an H200, CUDA graphs and eager).
"""
from __future__ import annotations

import contextlib
import csv
import io
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.tables.kernel_table import read_kernel_rows
from harness.cli import main

DATA = Path(__file__).resolve().parent / "data" / "sglang-real"
GRAPH_TRACE = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"  # named by structure
EAGER_TRACE = DATA / "eager" / "sglang-0.5.17-dsv3-4l-fp8-h200-eager-deepgemm-moe-TP-0-decode.trace.json.gz"  # by module ranges
ELEMENTWISE = "at::native::vectorized_elementwise_kernel<"


def _analysed(trace: Path, out: Path) -> Path:
    said = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        code = main(["analyze", str(trace), "--out", str(out), "--jobs", "1"])
    assert code == 0, said.getvalue()
    return out


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory) -> Path:
    return _analysed(GRAPH_TRACE, tmp_path_factory.mktemp("graph"))


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory) -> Path:
    return _analysed(EAGER_TRACE, tmp_path_factory.mktemp("eager"))


def _d4_rows(run: Path) -> list[list[str]]:
    with open(run / "d4.csv", newline="") as fh:
        return list(csv.reader(fh))


def _markdown_kernel_cells(run: Path, group: str, module: str) -> list[str]:
    """The kernel cells of d4.md's rows of one group / module (cells split on unescaped pipes)."""
    cells = []
    for line in (run / "d4.md").read_text().splitlines():
        parts = [p.strip() for p in line.replace("\\|", "\0").strip("|").split("|")]
        if len(parts) > 3 and parts[0] == group and parts[1] == module:
            cells.append(parts[2].replace("\0", "|"))
    return cells


@pytest.mark.parametrize("run_name", ["graph_run", "eager_run"])
def test_each_label_in_the_layers_names_one_kernel(run_name, request):
    """Every (group, module, kernel) row of the layers sums launches of one kernel name only."""
    rows = read_kernel_rows(request.getfixturevalue(run_name) / "kernels_long.parquet")
    names = defaultdict(set)
    for r in rows:
        if r.section == "layer":
            names[(r.group, r.module, r.kernel)].add(r.kernel_name)
    merged = {key: sorted(found) for key, found in names.items() if len(found) > 1}
    assert merged == {}
    assert len(names) > 20  # the trace's layers were named, kernel by kernel


def test_d4_table_keeps_the_experts_elementwise_kernels_apart(graph_run):
    """The MoE experts launch seven different vectorized elementwise kernels: a D4 row each, by its whole name."""
    rows = read_kernel_rows(graph_run / "kernels_long.parquet")
    launched = {r.kernel_name for r in rows
                if (r.group, r.module, r.section) == ("moe", "experts", "layer") and ELEMENTWISE in r.kernel_name}
    assert len(launched) >= 4
    d4_labels = [row[2] for row in _d4_rows(graph_run) if row[:2] == ["moe", "experts"] and row[2].startswith(ELEMENTWISE)]
    assert sorted(d4_labels) == sorted(name.removeprefix("void ") for name in launched)


def test_anonymous_namespace_kernels_are_not_one_row_named_at_native(eager_run):
    """The cut at `(` named every `at::native::(anonymous namespace)::...` kernel `at::native::`."""
    labels = [row[2] for row in _d4_rows(eager_run)]
    assert "at::native::" not in labels
    assert any(label.startswith("at::native::(anonymous namespace)::") for label in labels)


def test_markdown_table_shows_kernels_short_and_apart(graph_run):
    """d4.md shows the experts' elementwise kernels as different short texts, not one, not whole."""
    shown = [cell for cell in _markdown_kernel_cells(graph_run, "moe", "experts") if cell.startswith(ELEMENTWISE[:-1])]
    assert len(shown) >= 4
    assert len(set(shown)) == len(shown)
    assert all(len(cell) < 120 for cell in shown)  # shortened for display (the whole names run to 200+)


def test_shown_names_never_give_two_names_one_text(graph_run):
    """On every kernel name of the real trace (and the same with a phase after it): one text per name,
    names up to SHORT_CHARS shown as they are."""
    from analysis.tables.shown_names import SHORT_CHARS, shown_names  # here: the other tests run without it

    rows = read_kernel_rows(graph_run / "kernels_long.parquet")
    whole = sorted({r.kernel_name.removeprefix("void ") for r in rows})
    names = whole + [f"{name} (send)" for name in whole] + [f"{name} (recv)" for name in whole]
    shown = shown_names(names)
    assert len(set(shown.values())) == len(names)
    assert all(shown[name] == name for name in names if len(name) <= SHORT_CHARS)
    assert shown_names(["experts", "router"]) == {"experts": "experts", "router": "router"}  # signature labels stay
