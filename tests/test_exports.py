"""CSV / Parquet exports of a run's tables: typed, versioned, documented, never overwritten."""
from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import synthetic_run
from harness.commands import export as export_command
from harness.exports.tables import SCHEMA_VERSION_COLUMN, export_run, load_schema
from harness.output_dir import OutputError
from harness.metrics.errors import RunDataError

REPO = Path(__file__).resolve().parent.parent


def _cell(value) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def _source_rows(path: Path) -> list[dict]:
    """A table's rows as text, as the csv module writes them (a Parquet table read with pyarrow)."""
    if path.suffix == ".parquet":
        return [{k: _cell(v) for k, v in row.items()} for row in pq.read_table(path).to_pylist()]
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("kernel_table", ["parquet", "csv"])
def test_csv_export_keeps_every_value_and_adds_schema_version(tmp_path, kernel_table):
    """From the Parquet kernel table, and from an older run's kernels_long.csv."""
    run_dir = synthetic_run.build(tmp_path, kernel_table=kernel_table)
    version, specs = load_schema()
    paths = export_run(run_dir, "csv")
    assert sorted(p.name for p in paths) == sorted(f"{name}.csv" for name in specs)
    for name, spec in specs.items():
        exported = _source_rows(run_dir / "exports" / f"{name}.csv")
        source = _source_rows(spec.source_in(run_dir))
        assert len(exported) == len(source) > 0
        assert list(exported[0]) == [SCHEMA_VERSION_COLUMN] + [c.name for c in spec.columns]
        for out_row, in_row in zip(exported, source):
            assert out_row[SCHEMA_VERSION_COLUMN] == str(version)
            for column in spec.columns:
                if column.base_type == "float64" and in_row[column.name] != "":  # empty: a nullable one left empty
                    assert float(out_row[column.name]) == float(in_row[column.name])
                else:
                    assert out_row[column.name] == in_row[column.name]


def test_parquet_export_has_typed_columns_and_version_metadata(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    version, specs = load_schema()
    export_run(run_dir, "parquet", out_dir=tmp_path / "pq")
    table = pq.read_table(tmp_path / "pq" / "kernels_long.parquet")
    assert table.schema.metadata[b"moe_harness_schema_version"] == str(version).encode()
    assert str(table.schema.field("busy_us").type) == "double"
    assert str(table.schema.field("layer").type) == "int64"
    source = _source_rows(run_dir / "analysis" / "kernels_long.parquet")
    assert table.num_rows == len(source)
    assert set(table.column(SCHEMA_VERSION_COLUMN).to_pylist()) == {version}
    assert sum(table.column("busy_us").to_pylist()) == pytest.approx(sum(float(r["busy_us"]) for r in source))
    steps = pq.read_table(tmp_path / "pq" / "steps.parquet")
    assert steps.column("batch_size").to_pylist() == [synthetic_run.BATCH_SIZE] * steps.num_rows


@pytest.mark.parametrize("kernel_table", ["parquet", "csv"])
def test_a_table_written_before_a_column_was_added_exports_its_default(tmp_path, kernel_table):
    """An analysis written before `module_path` existed: exported with the column empty, its other
    columns as they were; a column without a default missing is still an error."""
    from analysis.pipeline import KERNEL_TABLE
    from analysis.io.parquet_writer import encode_row_groups, write_row_groups
    from analysis.tables.kernel_table import COLUMNS

    run_dir = synthetic_run.build(tmp_path, kernel_table=kernel_table)
    rows = [{k: v for k, v in r.items() if k != "module_path"} for r in _source_rows(run_dir / "analysis" / (
        KERNEL_TABLE if kernel_table == "parquet" else "kernels_long.csv"))]
    if kernel_table == "csv":
        with open(run_dir / "analysis" / "kernels_long.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        from analysis.tables.kernel_table import read_kernel_rows

        older = [(name, kind) for name, kind in COLUMNS if name != "module_path"]
        kernel_rows = read_kernel_rows(run_dir / "analysis" / KERNEL_TABLE)
        with open(run_dir / "analysis" / KERNEL_TABLE, "wb") as handle:
            write_row_groups(handle, encode_row_groups(kernel_rows, older), older, {"table": "kernels_long"})
    synthetic_run.seal(run_dir)
    export_run(run_dir, "csv", tables=("kernels_long",))
    exported = _source_rows(run_dir / "exports" / "kernels_long.csv")
    assert len(exported) == len(rows) and {r["module_path"] for r in exported} == {""}
    assert [r["busy_us"] for r in exported] == [r["busy_us"] for r in rows]


def test_existing_export_is_not_overwritten_without_flag(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    export_run(run_dir, "csv", tables=("d4",))
    target = run_dir / "exports" / "d4.csv"
    first = target.read_text()
    with pytest.raises(OutputError, match="--overwrite"):
        export_run(run_dir, "csv")
    assert target.read_text() == first
    assert not (run_dir / "exports" / "kernels_long.csv").exists()  # refused before writing anything
    export_run(run_dir, "csv", overwrite=True)
    assert target.read_text() == first and (run_dir / "exports" / "kernels_long.csv").exists()
    export_run(run_dir, "csv", tables=("steps",), overwrite=True)  # one table again: the others stay
    assert (run_dir / "exports" / "kernels_long.csv").exists() and target.exists()
    target.write_text("kept\n")  # edited since the export wrote it: no longer its to replace
    with pytest.raises(OutputError, match="d4.csv, which `export` did not write .or which changed since"):
        export_run(run_dir, "csv", overwrite=True)
    assert target.read_text() == "kept\n"
    export_run(run_dir, "csv", tables=("steps",), overwrite=True)  # left alone beside the tables exported again
    assert target.read_text() == "kept\n"


def test_unknown_or_missing_columns_are_errors_naming_the_file(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    d4 = run_dir / "analysis" / "d4_detail.csv"
    d4.write_text(d4.read_text().replace("layers", "layer_count"))
    synthetic_run.seal(run_dir)  # written so by the run (a table cut or edited later is another error)
    with pytest.raises(RunDataError, match=r"d4_detail\.csv: columns differ .*missing \['layers'\].*unknown \['layer_count'\]"):
        export_run(run_dir, "csv", tables=("d4",))
    steps = run_dir / "analysis" / "steps.csv"
    steps.write_text(steps.read_text().replace(",8,", ",eight,", 1))
    synthetic_run.seal(run_dir)
    with pytest.raises(RunDataError, match=r"steps\.csv:2: column 'batch_size' must be int64"):
        export_run(run_dir, "parquet", tables=("steps",))


def test_export_command(tmp_path, capsys):
    run_dir = synthetic_run.build(tmp_path)
    parser = argparse.ArgumentParser()
    export_command.register(parser.add_subparsers())
    args = parser.parse_args(["export", str(run_dir), "--format", "parquet", "--table", "d4"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "exports" / "d4.parquet")
    args = parser.parse_args(["export", str(tmp_path / "nope")])
    assert args.func(args) == 1
    assert "run directory not found" in capsys.readouterr().err


def test_docs_list_every_column():
    text = (REPO / "docs/exports.md").read_text()
    version, specs = load_schema()
    for name, spec in specs.items():
        section = text.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        documented = re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M)
        assert documented == [SCHEMA_VERSION_COLUMN] + [c.name for c in spec.columns], name
        for column in spec.columns:
            assert column.meaning in section, (name, column.name)


def test_each_export_schema_is_its_writers_columns_in_order():
    """One schema per table: what the analysis writes (the kernel table and steps.csv: their row
    structs' fields; d4_detail.csv: its header, statistics from their file) is what columns.yaml
    exports and docs/exports.md documents (test_docs_list_every_column), in the same order; a field
    added to a row struct without its schema entry fails here, not in a user's export."""
    from analysis.attribution.rows import KernelRow, StepRow
    from analysis.tables.d4_detail import HEADER

    writers = {"kernels_long": list(KernelRow.__struct_fields__), "steps": list(StepRow.__struct_fields__), "d4": HEADER}
    _, specs = load_schema()
    assert set(specs) == set(writers)
    for name, spec in specs.items():
        assert [c.name for c in spec.columns] == writers[name], name
