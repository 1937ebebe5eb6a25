"""Read an older analysis's kernels_long.csv (one KernelRow per line, columns in field order) back into rows.

Why kept: analyses written before the Parquet kernel table (analysis/tables/kernel_table.py) hold
this CSV, and `report`, `view`, `compare` and `export` still read them."""
from __future__ import annotations

import csv
from pathlib import Path

from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import TABLE_LIMIT_BYTES, InputFileError, open_input_text
from analysis.attribution.rows import KernelRow

_FIELDS = KernelRow.__struct_fields__
_INT_FIELDS = {"step", "layer", "micro_batch", "stream"}
_FLOAT_FIELDS = {"start_us", "busy_us", "exposed_us"}
_OPTIONAL_FIELDS = {"role", "rule", "module_path"}  # added later: a kernels_long.csv written before them still reads


class KernelCsvError(AnalysisError):
    def __init__(self, path: str, problem: str):
        super().__init__(f"{shown_path(path)}: {problem}")


def read_kernel_rows_csv(path: str | Path) -> list[KernelRow]:
    path = Path(path)
    rows: list[KernelRow] = []
    try:
        with open_input_text(path, TABLE_LIMIT_BYTES, "a kernels_long.csv") as handle:
            reader = csv.DictReader(handle)
            present = set(reader.fieldnames or [])
            missing = [f for f in _FIELDS if f not in present and f not in _OPTIONAL_FIELDS]
            if missing:
                raise KernelCsvError(str(path), f"not a kernels_long.csv: missing columns {', '.join(missing)}")
            for line_no, record in enumerate(reader, start=2):
                if None in record or None in record.values():
                    raise KernelCsvError(str(path), f"line {line_no}: not the {len(reader.fieldnames)} fields of the "
                                                    "header (a cut or edited file)")
                values = {}
                for field in _FIELDS:
                    if field not in present:
                        continue
                    text = record[field]
                    try:
                        if field in _INT_FIELDS:
                            values[field] = int(text)
                        elif field in _FLOAT_FIELDS:
                            values[field] = float(text)
                        else:
                            values[field] = text
                    except (TypeError, ValueError):
                        raise KernelCsvError(str(path), f"line {line_no}: column {field}: bad value {text!r}") from None
                rows.append(KernelRow(**values))
    except InputFileError as exc:
        raise KernelCsvError(str(path), exc.problem) from None
    except UnicodeDecodeError as exc:
        raise KernelCsvError(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start} of a block)") from None
    except (OSError, csv.Error) as exc:
        raise KernelCsvError(str(path), f"cannot read: {exc}") from None
    return rows
