"""The per-kernel table as Parquet (analysis/tables/kernel_table.py): every reader gets the rows that
were written, other Parquet readers (pyarrow here) read it with its types, repeated strings are
stored once, older analyses' kernels_long.csv still read, and a damaged file is one line, never a
traceback."""
from __future__ import annotations

import io
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.pipeline import AnalysisError, AnalysisOptions, analyze, write_outputs

from analysis.tables.kernel_table import read_kernel_rows
from analysis.attribution.rows import KernelRow
from analysis.io import parquet_writer, thrift_compact as tc
from analysis.tables.kernel_table import COLUMNS, KERNEL_TABLE, write_kernel_table
from analysis.io.parquet_reader import ParquetError, read_parquet
from conftest import real_trace
from harness.cli import main
from kernel_tables import as_older_analysis, write_older_csv

DATA = Path(__file__).parent / "data"
CPU_DEMO = DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz"
QWEN = "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz"
_ARROW = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}


def _rows(n: int, names: int = 3) -> list[KernelRow]:
    return [KernelRow("run", f"TP{i % 2}", i // 7, "decode", "layer", i % 5 - 1, 0, "moe", "experts", "gemm",
                      f"void kernel<{i % names}>(é, 中)", i % 3, 1e12 + i * 0.125, i * 1.5, -0.0 if i % 2 else 2.25,
                      "structure", "experts", "kernel_classes.yaml:gemm") for i in range(n)]


def _bytes(rows: list[KernelRow]) -> bytes:
    out = io.BytesIO()
    write_kernel_table(out, rows)
    return out.getvalue()


def test_analyze_writes_the_parquet_table_and_every_reader_gets_the_rows_back(tmp_path):
    result = analyze([real_trace(QWEN)], options=AnalysisOptions(run="qwen"))
    files = write_outputs(result, tmp_path / "out")
    assert files[KERNEL_TABLE] == tmp_path / "out" / KERNEL_TABLE and not (tmp_path / "out" / "kernels_long.csv").exists()
    assert read_kernel_rows(tmp_path / "out" / KERNEL_TABLE) == result.kernel_rows
    table = pq.read_table(tmp_path / "out" / KERNEL_TABLE)  # another Parquet reader: the same rows, typed
    assert [(f.name, f.type) for f in table.schema] == [(name, _ARROW[kind]) for name, kind in COLUMNS]
    assert [KernelRow(**row) for row in table.to_pylist()] == result.kernel_rows


def test_repeated_strings_are_stored_once(tmp_path):
    """Each string column is dictionary-encoded: the file is far smaller than the kernel names alone."""
    result = analyze([real_trace(QWEN)], options=AnalysisOptions(run="qwen"))
    data = _bytes(result.kernel_rows)
    names = sum(len(r.kernel_name.encode()) for r in result.kernel_rows)
    assert len(data) * 10 < names
    meta = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    for index, (name, kind) in enumerate(COLUMNS):
        column = meta.column(index)
        assert column.has_dictionary_page == (kind != "float64"), name


def test_older_analyses_kernels_long_csv_is_still_read_by_report_view_and_compare(tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["analyze", str(CPU_DEMO), "--out", str(saved)]) == 0
    rows = read_kernel_rows(saved / KERNEL_TABLE)
    older = tmp_path / "older"
    saved.rename(older)
    (older / ".moe-harness-analyze.json").unlink()  # an older folder: its marker listed the CSV
    as_older_analysis(older)
    assert read_kernel_rows(older / "kernels_long.csv") == rows
    capsys.readouterr()
    assert main(["report", str(older), "--out", str(tmp_path / "rep")]) == 0
    assert f"Sources: `{older / 'kernels_long.csv'}`" in (tmp_path / "rep" / "kernel_report.md").read_text()
    assert main(["view", str(older), "--out", str(tmp_path / "view")]) == 0
    assert "kernels_long.csv" in (tmp_path / "view" / "view.html").read_text(encoding="utf-8")
    assert main(["compare", f"old={older}", f"new={CPU_DEMO}"]) == 0
    assert "no kernel table" not in capsys.readouterr().err


def test_a_damaged_table_is_one_line_naming_the_file(tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["analyze", str(CPU_DEMO), "--out", str(saved)]) == 0
    (saved / ".moe-harness-analyze.json").unlink()  # no record to check it against: the reader must say it
    (saved / KERNEL_TABLE).write_bytes((saved / KERNEL_TABLE).read_bytes()[:-40])
    capsys.readouterr()
    assert main(["report", str(saved), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{saved / KERNEL_TABLE}: not a table this version reads" in err[0], err


def test_every_damaged_byte_is_an_error_or_rows_never_a_crash():
    """Seeded: flipped, cut and inserted bytes give ParquetError or a table, nothing else."""
    data = _bytes(_rows(300))
    rng = random.Random(35)
    outcomes = {"error": 0, "read": 0}
    for _ in range(400):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(damaged))
            choice = rng.random()
            if choice < 0.6:
                damaged[at] = rng.randrange(256)
            elif choice < 0.8:
                del damaged[at:at + rng.randint(1, 30)]
            else:
                damaged[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 10)))
        try:
            read_parquet(bytes(damaged), 1 << 24)
            outcomes["read"] += 1
        except ParquetError:
            outcomes["error"] += 1
    assert outcomes["error"] > 100


@pytest.mark.parametrize("rows, distinct", [(0, 1), (5, 3), (700, 300), (70_000, 70_000)])
def test_pyarrow_reads_what_the_writer_writes(rows, distinct, monkeypatch):
    """Empty tables, several row groups, and dictionaries that need 8, 16 and 32-bit indices."""
    monkeypatch.setattr(parquet_writer, "ROW_GROUP_ROWS", 256 if rows < 1000 else 1 << 18)
    written = _rows(rows, names=distinct)
    data = _bytes(written)
    table = pq.read_table(io.BytesIO(data))
    assert table.num_rows == rows
    assert [KernelRow(**row) for row in table.to_pylist()] == written
    assert list(map(KernelRow, *read_parquet(data, 1 << 30).columns.values())) == written


@pytest.mark.parametrize("options", [{"compression": "none"}, {"compression": "gzip", "data_page_size": 512},
                                     {"compression": "none", "use_dictionary": False}])
def test_the_reader_reads_other_writers_flat_tables(options):
    """A table re-saved by pyarrow or pandas: optional columns with empty cells, several pages."""
    table = pa.table({"s": ["a", None, "bb", "a"] * 300, "i": pa.array([1, None, -3, 4] * 300, pa.int64()),
                      "d": [0.5, 1.5, None, -2.0] * 300, "n": pa.array([7, 8, 9, 10] * 300, pa.int32())})
    out = io.BytesIO()
    pq.write_table(table, out, **options)
    got = read_parquet(out.getvalue(), 1 << 30)
    assert got.columns == {name: table.column(name).to_pylist() for name in table.column_names}
    assert got.kinds == {"s": "string", "i": "int64", "d": "float64", "n": "int64"}


def test_what_the_reader_cannot_read_is_said():
    out = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2]}), out, compression="snappy")
    with pytest.raises(ParquetError, match="SNAPPY, which this reader does not read"):
        read_parquet(out.getvalue(), 1 << 30)
    with pytest.raises(ParquetError, match="not a Parquet file"):
        read_parquet(b"run,rank\n", 1 << 30)


def test_a_table_with_another_schema_is_refused_by_name(tmp_path):
    path = tmp_path / KERNEL_TABLE
    pq.write_table(pa.table({"run": ["r"], "rank": ["TP0"]}), path, compression="none")
    with pytest.raises(AnalysisError, match=r"not a kernel table: column step is missing, not int64"):
        read_kernel_rows(path)


def test_the_older_csv_and_the_parquet_table_hold_the_same_rows(tmp_path):
    rows = _rows(50)
    write_older_csv(tmp_path / "kernels_long.csv", rows)
    (tmp_path / KERNEL_TABLE).write_bytes(_bytes(rows))
    assert read_kernel_rows(tmp_path / "kernels_long.csv") == read_kernel_rows(tmp_path / KERNEL_TABLE) == rows


def test_thrift_structs_read_back_as_written():
    fields = [(1, tc.I32, -5), (2, tc.BINARY, "naïve"), (3, tc.BOOL, True), (4, tc.BOOL, False),
              (40, tc.I64, 1 << 40), (41, tc.LIST, (tc.I32, list(range(-20, 20)))),
              (60, tc.STRUCT, [(1, tc.LIST, (tc.STRUCT, [[(2, tc.I16, 7)]] * 3))])]
    data = tc.struct_bytes(fields)
    got, end = tc.read_struct(data)
    assert end == len(data)
    assert got == {1: -5, 2: "naïve".encode(), 3: True, 4: False, 40: 1 << 40, 41: list(range(-20, 20)),
                   60: {1: [{2: 7}] * 3}}
    with pytest.raises(tc.ThriftError):
        tc.read_struct(data[:-3])
