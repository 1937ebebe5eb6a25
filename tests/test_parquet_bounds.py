"""The Parquet reader's bounds: what a kernels_long.parquet declares never becomes memory on its say-so.

The hostile files are synthetic, built byte by byte (tests/fuzz/parquet_cases.py). Reads that could
build gigabytes of lists (as the reader did before these bounds: a 144-byte file declaring 2**31
values) run in a child process whose address space may grow by CHILD_MEMORY_BYTES only, so a
regression fails its test with a MemoryError in the child instead of taking the machine.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.attribution.rows import KernelRow
from analysis.tables.kernel_table import COLUMNS, KERNEL_TABLE, write_kernel_table
from analysis.io.parquet_reader import ParquetError, read_parquet
from fuzz.parquet_cases import (DECLARED_SHAPES, DICTIONARY_FLAWS, MOST_NESTING, NESTINGS, declared_values,
                                deep_footer, dictionary_flaw, empty_pages, hostile_cases, inflating_pages,
                                long_footer_list, rows_unlike_values, understated_page)

ROOT = Path(__file__).resolve().parent.parent
CHILD_MEMORY_BYTES = 1 << 30  # what a child may allocate beyond its imports: a quarter of the 4.7 GB seen
CHILD_TIMEOUT_S = 300  # a hang, not a slow machine

# Run in the child, in the tree under test: bound the address space, then the rest of argv.
_BOUNDED = """
import os, resource, sys
with open("/proc/self/statm", "rb") as fh:
    limit = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
"""
_READS = _BOUNDED + """
import json
from analysis.io.parquet_reader import read_parquet
for path, limit_bytes in zip(sys.argv[2::2], sys.argv[3::2]):
    try:
        with open(path, "rb") as fh:
            print(json.dumps(["read", f"{read_parquet(fh.read(), int(limit_bytes)).rows} rows"]), flush=True)
    except BaseException as exc:
        print(json.dumps([type(exc).__name__, str(exc)]), flush=True)
"""
_COMMAND = _BOUNDED + """
from harness.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _child(code: str, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, str(CHILD_MEMORY_BYTES), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def _read_in_child(cases, folder: Path) -> list[tuple[str, str]]:
    """(exception type or "read", message) per case, each read with its limit in a bounded child."""
    args = []
    for index, case in enumerate(cases):
        path = folder / f"case{index}.parquet"
        path.write_bytes(case.data)
        args += [str(path), str(case.limit_bytes)]
    done = _child(_READS, args)
    outcomes = [tuple(json.loads(line)) for line in done.stdout.splitlines()]
    assert len(outcomes) == len(cases), done.stderr[-2000:]
    return outcomes


def _assert_refused(case, outcome: tuple[str, str]) -> None:
    kind, message = outcome
    assert kind == "ParquetError" and re.search(case.refusal, message), f"{case.name}: {kind}: {message}"


@pytest.mark.parametrize("shape", DECLARED_SHAPES)
def test_declared_value_counts_are_refused_before_memory_grows(shape, tmp_path):
    """Two billion values declared in about 140 bytes: refused from the footer, or where a page or a
    run claims more than its column chunk or page has left, within the child's 1 GiB."""
    case = declared_values(1 << 31, shape)
    assert len(case.data) < 200
    _assert_refused(case, _read_in_child([case], tmp_path)[0])


def test_report_on_the_hostile_table_is_one_line_not_a_memory_blow_up(tmp_path):
    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / KERNEL_TABLE).write_bytes(declared_values(1 << 31, "rle_run").data)
    done = _child(_COMMAND, ["report", str(folder), "--out", str(tmp_path / "report")])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"moe-harness report: {folder / KERNEL_TABLE}: not a table this version reads: "
                               "2147483648 rows of 1 columns, more than the 134217728 values this reads"), lines


@pytest.mark.parametrize("nesting", NESTINGS)
def test_a_footer_nests_at_most_the_bound_deep(nesting):
    """Containers in an unknown footer field (a reader skips them): as deep as the bound reads, one
    level more is refused, and so is the stack-exhausting depth of 100,000."""
    assert read_parquet(deep_footer(MOST_NESTING - 1, nesting).data, 1 << 20).columns == {"value": [5]}
    for depth in (MOST_NESTING, 100_000):
        case = deep_footer(depth, nesting)
        with pytest.raises(ParquetError, match=case.refusal):
            read_parquet(case.data, 1 << 20)


@pytest.mark.parametrize("container", ["list", "map"])
def test_a_footer_list_or_map_longer_than_its_bytes_is_refused_by_its_length(container):
    case = long_footer_list(1 << 60, container)
    with pytest.raises(ParquetError, match=f"{case.refusal} [0-9]+ bytes"):
        read_parquet(case.data, 1 << 20)


@pytest.mark.parametrize("flaw", [flaw for flaw in DICTIONARY_FLAWS if flaw != "index_past_end"])
def test_empty_and_inconsistent_dictionary_pages_are_refused(flaw):
    """An empty dictionary indexed (before: an IndexError), a second one or one after the data (before:
    read, the data's meaning changing mid-column), a negative count, no bit width for the indices."""
    case = dictionary_flaw(flaw, 16)
    with pytest.raises(ParquetError, match=case.refusal):
        read_parquet(case.data, 1 << 20)


def test_an_all_empty_optional_column_with_an_empty_dictionary_still_reads():
    """What pyarrow writes for a column of empty cells: a dictionary page of no values, no indices."""
    out = io.BytesIO()
    pq.write_table(pa.table({"s": pa.array([None] * 40, pa.string()), "n": list(range(40))}), out, compression="none")
    assert read_parquet(out.getvalue(), 1 << 20).columns == {"s": [None] * 40, "n": list(range(40))}
    with pytest.raises(ParquetError, match="into an empty dictionary"):  # the same page, indexed
        read_parquet(dictionary_flaw("empty_with_indices", 16).data, 1 << 20)


@pytest.mark.parametrize("stated_bytes", [0, 16])
def test_a_page_inflates_no_further_than_its_header_says(stated_bytes):
    """A 32 MiB page whose header says 0 bytes (before: inflated whole, max_length 0 meaning no limit)
    or 16 (before: read from its first 16 bytes): refused having inflated a few bytes, not 32 MiB."""
    case = understated_page(32 << 20, stated_bytes)
    tracemalloc.start()
    try:
        with pytest.raises(ParquetError, match=case.refusal):
            read_parquet(case.data, 1 << 30)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 4 << 20


def test_all_pages_together_inflate_within_the_limit():
    """Six pages of 64 KiB each, each within the limit: all of them read at 384 KiB, not at one less."""
    assert read_parquet(inflating_pages(6, 64 << 10, 6 * (64 << 10)).data, 6 * (64 << 10)).rows == 6
    case = inflating_pages(6, 64 << 10, 6 * (64 << 10) - 1)
    with pytest.raises(ParquetError, match=case.refusal):
        read_parquet(case.data, case.limit_bytes)


@pytest.mark.parametrize("where", ["footer", "group"])
def test_row_counts_of_footer_row_group_and_column_chunk_agree(where):
    case = rows_unlike_values(1000, 40, where)
    with pytest.raises(ParquetError, match=case.refusal):
        read_parquet(case.data, 1 << 20)


def test_a_data_page_holds_one_value_at_least():
    """So the pages read are never more than the values: pages of none cost no budget, and several
    column chunks could point at the same run of them."""
    case = empty_pages(500)
    with pytest.raises(ParquetError, match=case.refusal):
        read_parquet(case.data, 1 << 20)


def _kernel_table(rows: int) -> tuple[bytes, list[KernelRow], int]:
    """The synthetic rows as the project writes them (one row group), and the values its dictionaries hold."""
    written = [KernelRow("run", f"TP{i % 2}", i // 7, "decode", "layer", i % 5, 0, "moe", "experts", "gemm",
                         f"void kernel<{i % 3}>()", i % 3, 1e12 + i, i * 1.5, 0.25, "structure") for i in range(rows)]
    out = io.BytesIO()
    write_kernel_table(out, written)
    distinct = sum(len({getattr(row, name) for row in written}) for name, kind in COLUMNS if kind != "float64")
    return out.getvalue(), written, distinct


def _pyarrow_table(rows: int) -> tuple[bytes, dict[str, list], int]:
    """Another writer's table: a constant column and mostly empty cells (long RLE runs), small pages."""
    columns = {"same": ["x"] * rows, "sparse": [i if i % 97 == 0 else None for i in range(rows)],
               "d": [i / 4 for i in range(rows)]}
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out, compression="gzip", data_page_size=256)
    distinct = sum(len({v for v in values if v is not None}) for values in columns.values())  # all dictionary-encoded
    return out.getvalue(), columns, distinct


@pytest.mark.parametrize("writer", ["project", "pyarrow"])
def test_a_table_reads_at_its_values_bound_and_not_one_value_past_it(writer):
    """Round trip at the bound: rows times columns plus the dictionaries' values, a VALUE_SLOT_BYTES each;
    a limit one value smaller is refused, and one below rows times columns from the footer alone."""
    rows = 600
    data, expected, dictionary_values = _kernel_table(rows) if writer == "project" else _pyarrow_table(rows)
    width = len(COLUMNS) if writer == "project" else len(expected)
    most_values = rows * width + dictionary_values
    table = read_parquet(data, most_values * 8)
    if writer == "project":
        assert list(map(KernelRow, *table.columns.values())) == expected
    else:
        assert table.columns == expected
    with pytest.raises(ParquetError, match=f"more than the {most_values - 1} values this reads"):
        read_parquet(data, (most_values - 1) * 8)
    with pytest.raises(ParquetError, match=f"{rows} rows of {width} columns, more than the {rows * width - 1} values"):
        read_parquet(data, (rows * width - 1) * 8)


def test_hostile_cases_are_seeded_and_every_one_is_refused(tmp_path):
    """The fuzz generator: the same seed, the same bytes; another seed, other sizes; and each case
    refused as it says, read with its limit in a bounded child."""
    cases = hostile_cases(7)
    assert [c.data for c in cases] == [c.data for c in hostile_cases(7)]
    assert [c.name for c in cases] != [c.name for c in hostile_cases(8)]
    for case, outcome in zip(cases, _read_in_child(cases, tmp_path)):
        _assert_refused(case, outcome)
