"""One Parquet writer (analysis/io/parquet_writer.py) for the analysis and `export`, read back by the
project's own reader and by pyarrow alike.

Why: `export --format parquet` wrote through pyarrow (an extra the README's install left out, 0.47 s
and about 117 MiB more to write a 57k-row kernel table against the own writer's 0.11 s:
benchmarks/parquet_writers_bench.py), while the analysis wrote kernels_long.parquet with its own: two
writers of one format. The export's columns may be missing (nullable) and its version is an INT32.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import synthetic_run
from analysis.io.parquet_reader import read_parquet_file
from analysis.io.parquet_writer import write_columns

REPO = Path(__file__).resolve().parent.parent

# Synthetic columns with known values: missing cells at the start, the end, a whole group of eight,
# a column with no value at all and one with every value (11 rows: not a multiple of 8).
COLUMNS = [("version", "int32"), ("name", "string?"), ("tokens", "int64?"), ("share", "float64?"),
           ("never", "string?"), ("always", "float64?"), ("id", "int64")]
VALUES = {
    "version": [3] * 11,
    "name": [None, "a", "b", "a", None, None, None, None, None, None, "c"],
    "tokens": [1, None, 2, 3, 4, 5, 6, 7, 8, 9, None],
    "share": [0.5, 1.5, None, None, None, None, None, None, None, None, -2.25],
    "never": [None] * 11,
    "always": [float(i) for i in range(11)],
    "id": list(range(100, 111)),
}


def _written(tmp_path: Path) -> Path:
    path = tmp_path / "synthetic-nullable.parquet"
    with open(path, "wb") as out:
        write_columns(out, VALUES, COLUMNS, {"table": "synthetic"})
    return path


def test_nullable_and_int32_columns_read_back_by_pyarrow(tmp_path):
    table = pq.read_table(_written(tmp_path))
    assert {name: table.column(name).to_pylist() for name, _ in COLUMNS} == VALUES
    assert str(table.schema.field("version").type) == "int32" and not table.schema.field("version").nullable
    assert table.schema.field("name").nullable and not table.schema.field("id").nullable


def test_nullable_columns_read_back_by_the_own_reader(tmp_path):
    table = read_parquet_file(_written(tmp_path), 1 << 20)
    assert table.columns == VALUES
    assert table.kinds["share"] == "float64" and table.kinds["version"] == "int64"


def test_parquet_export_needs_no_pyarrow(tmp_path):
    """The export writes with the analysis's writer: with pyarrow unimportable it still writes every
    table, and pyarrow reads what it wrote."""
    run_dir = synthetic_run.build(tmp_path)
    script = ("import sys; sys.modules['pyarrow'] = None\n"
              "from harness.exports.tables import export_run\n"
              f"export_run({str(run_dir)!r}, 'parquet', out_dir={str(tmp_path / 'pq')!r})\n"
              "assert 'pyarrow' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    kernels = pq.read_table(tmp_path / "pq" / "kernels_long.parquet")
    own = read_parquet_file(tmp_path / "pq" / "kernels_long.parquet", 1 << 30)
    assert kernels.num_rows == own.rows > 0
    assert math.fsum(kernels.column("busy_us").to_pylist()) == math.fsum(own.columns["busy_us"])
    assert str(kernels.schema.field("schema_version").type) == "int32"
