"""Export a run's analysis tables as CSV or Parquet with a schema_version column.

The column list, types, units and meanings live in columns.yaml (documented in docs/exports.md).
Reading checks the analysis table (a CSV, or the Parquet kernel table) against it, so an export
never silently drops or invents a column. Files are written to a temporary name and renamed; existing exports are not overwritten
unless asked.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from harness.metrics.errors import RunDataError

COLUMNS_FILE = Path(__file__).with_name("columns.yaml")
SCHEMA_VERSION_COLUMN = "schema_version"
FORMATS = ("csv", "parquet")
_CONVERT = {"string": str, "int64": int, "float64": float}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # string | int64 | float64, with "?" when empty means missing
    unit: str
    meaning: str
    default: str | None = None  # a column added later: what a table written before it holds instead

    @property
    def nullable(self) -> bool:
        return self.type.endswith("?")

    @property
    def base_type(self) -> str:
        return self.type.rstrip("?")


@dataclass(frozen=True)
class TableSpec:
    name: str
    source: str
    description: str
    columns: tuple[Column, ...]
    older_source: str | None = None  # where an analysis written before `source` keeps the table

    def source_in(self, run_dir: Path) -> Path:
        """The table's file in a run: `source`, else the older analysis's file where only that exists."""
        path = Path(run_dir) / self.source
        if not path.is_file() and self.older_source and (Path(run_dir) / self.older_source).is_file():
            return Path(run_dir) / self.older_source
        return path


@lru_cache(maxsize=1)
def load_schema() -> tuple[int, dict[str, TableSpec]]:
    raw = yaml.safe_load(COLUMNS_FILE.read_text(encoding="utf-8"))
    tables = {}
    for name, table in raw["tables"].items():
        columns = tuple(column for c in table["columns"] for column in _columns_of(c))
        for column in columns:
            if column.base_type not in _CONVERT:
                raise RunDataError(COLUMNS_FILE, f"table {name} column {column.name}: unknown type {column.type!r}")
        tables[name] = TableSpec(name, table["source"], table["description"], columns, table.get("older_source"))
    return int(raw["schema_version"]), tables


def _columns_of(entry: dict) -> list[Column]:
    """A schema entry's columns: itself, or for `step_statistics: true` one per statistic the D4
    rows keep beside value_us (analysis's statistics file says which, and what each means)."""
    if not entry.get("step_statistics"):
        return [Column(**entry)]
    from analysis.api import list_builtins

    return [Column(f"{name}_us", "float64", "microseconds", meaning)
            for name, meaning in list_builtins("statistic").items() if meaning]


def _convert(column: Column, text: str, where: str):
    if text == "" and column.nullable:
        return None
    try:
        return _CONVERT[column.base_type](text)
    except ValueError:
        raise RunDataError(where, f"column {column.name!r} must be {column.base_type}, got {text!r}") from None


def read_table(run_dir: Path, table: str) -> list[dict]:
    """Rows of one analysis table, typed per columns.yaml, with schema_version prepended."""
    version, specs = load_schema()
    spec = specs[table]
    from analysis.api import InputFileError, TABLE_LIMIT_BYTES, open_input_text
    from harness.recorded_files import RecordError, check_as_written

    path = spec.source_in(run_dir)
    if not path.is_file():
        raise RunDataError(path, f"not found: the run has no {table} table (was the analysis run?)")
    try:
        check_as_written(path, need_record=True)  # a cut or edited table is an error, never fewer rows
        if path.suffix == ".parquet":
            return _parquet_rows(path, spec, version)
        with open_input_text(path, TABLE_LIMIT_BYTES, "a table") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            expected = [c.name for c in spec.columns]
            missing = [c.name for c in spec.columns if c.name not in header and c.default is None]
            unknown = [c for c in header if c not in expected]
            if missing or unknown:
                raise RunDataError(path, f"columns differ from export schema v{version}: missing {missing}, "
                                         f"unknown {unknown}")
            rows = []
            for line, raw in enumerate(reader, 2):
                if None in raw or None in raw.values():
                    raise RunDataError(f"{path}:{line}", f"not the {len(header)} fields of the header (a cut or "
                                                         "edited file)")
                row = {SCHEMA_VERSION_COLUMN: version}
                for column in spec.columns:
                    row[column.name] = _convert(column, raw.get(column.name, column.default), f"{path}:{line}")
                rows.append(row)
    except RecordError as exc:
        raise RunDataError(path, str(exc).removeprefix(f"{path}: ")) from None
    except InputFileError as exc:
        raise RunDataError(path, exc.problem) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RunDataError(path, f"unreadable: {exc}") from None
    return rows


def _parquet_rows(path: Path, spec: TableSpec, version: int) -> list[dict]:
    """Rows of a Parquet analysis table (the kernel table), its columns checked against the schema."""
    from analysis.api import TABLE_LIMIT_BYTES
    from analysis.api import AnalysisError, read_parquet_table

    try:
        table = read_parquet_table(path, TABLE_LIMIT_BYTES)
    except AnalysisError as exc:
        raise RunDataError(path, str(exc).removeprefix(f"{path}: ")) from None
    expected = [c.name for c in spec.columns]
    missing = [c.name for c in spec.columns if c.name not in table.columns and c.default is None]
    unknown = [c for c in table.columns if c not in expected]
    wrong = [c.name for c in spec.columns if c.name in table.kinds and table.kinds[c.name] != c.base_type]
    if missing or unknown or wrong:
        raise RunDataError(path, f"columns differ from export schema v{version}: missing {missing}, unknown {unknown}, "
                                 f"of another type {wrong}")
    columns = {c.name: table.columns[c.name] if c.name in table.columns else [_convert(c, c.default, str(path))] * table.rows
               for c in spec.columns}  # a column added later: a table written before it holds its default
    for column in spec.columns:
        if not column.nullable and table.rows and None in columns[column.name]:
            raise RunDataError(path, f"column {column.name!r} has empty cells")
    return [{SCHEMA_VERSION_COLUMN: version, **dict(zip(expected, values))}
            for values in zip(*(columns[name] for name in expected))]


def write_csv(rows: list[dict], columns: list[str], path: Path) -> Path:
    from analysis.api import write_atomically

    def write(handle) -> None:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)

    return write_atomically(path, write, binary=False)


def write_parquet(rows: list[dict], spec: TableSpec, path: Path) -> Path:
    """The rows as Parquet through the analysis's own writer (the one that writes kernels_long.parquet):
    the schema version an INT32 column, each column of columns.yaml typed as declared, "?" nullable."""
    from analysis.api import write_parquet_columns, written_aside

    version, _ = load_schema()
    columns = [(SCHEMA_VERSION_COLUMN, "int32")] + [(c.name, c.type) for c in spec.columns]
    values = {name: [row[name] for row in rows] for name, _ in columns}
    with written_aside(path) as temp, open(temp, "wb") as out:
        write_parquet_columns(out, values, columns, {"moe_harness_schema_version": str(version), "table": spec.name})
    return path


def missing_sources(run_dir: str | Path, tables: tuple[str, ...] | None = None) -> list[Path]:
    """The analysis files the tables are read from (all tables when None) that the run lacks."""
    _, specs = load_schema()
    return [Path(run_dir) / specs[n].source for n in (tables or tuple(specs))
            if n in specs and not specs[n].source_in(run_dir).is_file()]


def export_run(run_dir: str | Path, fmt: str, out_dir: str | Path | None = None,
               tables: tuple[str, ...] | None = None, overwrite: bool = False, fresh: bool = False) -> list[Path]:
    """Write each table as <out_dir>/<table>.<fmt>; default out_dir is RUN/exports.

    The folder may hold other files (left alone); an export file is replaced only with `overwrite`
    and only while it is the one this command wrote (harness/output_dir.py): a user's file, or an
    export edited since, is never replaced. Everything is refused before any table is read. `fresh`: the
    tables were written just now by this process (a run analysed again into a temporary folder), so
    there is no run record to check them against."""
    from harness.output_dir import prepare_output

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDataError(run_dir, "run directory not found")
    _, specs = load_schema()
    names = tables or tuple(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise ValueError(f"unknown table(s) {unknown}; expected some of {', '.join(specs)}")
    from harness.recorded_files import RecordError, run_record

    try:
        if not fresh:
            run_record(run_dir)  # the tables are checked against it: a run without a manifest is refused
    except RecordError as exc:
        raise RunDataError(run_dir, str(exc).removeprefix(f"{run_dir}: ")) from None
    out = Path(out_dir) if out_dir else run_dir / "exports"
    files = [f"{name}.{fmt}" for name in names]
    prepared = prepare_output(out, "export", overwrite, beside=None, prune=False)
    prepared.check_names(files)  # refused before writing anything, so an export is never half replaced
    loaded = {name: read_table(run_dir, name) for name in names}

    def fill(folder: Path) -> None:
        for name, rows in loaded.items():
            spec = specs[name]
            if fmt == "csv":
                write_csv(rows, [SCHEMA_VERSION_COLUMN] + [c.name for c in spec.columns], folder / f"{name}.{fmt}")
            else:
                write_parquet(rows, spec, folder / f"{name}.{fmt}")

    prepared.write(fill)
    return [out / f for f in files]
