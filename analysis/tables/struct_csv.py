"""Read a CSV the analysis wrote from msgspec structs (steps.csv, comm.csv) back into those structs.

Why: `view` and `compare` read a saved analysis folder; its CSVs were written by api._write_structs
(one column per field, None as an empty cell), so one reader undoes that for any such struct. A
cell that does not convert is an error naming the file, the line and the column.
"""
from __future__ import annotations

import csv
from pathlib import Path

import msgspec

from analysis.errors import AnalysisError
from analysis.io.input_files import TABLE_LIMIT_BYTES, open_input_text


def _nullable_fields(cls) -> set[str]:
    info = msgspec.inspect.type_info(cls)
    out = set()
    for field in info.fields:
        types = field.type.types if isinstance(field.type, msgspec.inspect.UnionType) else (field.type,)
        if any(isinstance(t, msgspec.inspect.NoneType) for t in types):
            out.add(field.name)
    return out


def read_struct_csv(path: str | Path, cls) -> list:
    path = Path(path)
    fields = cls.__struct_fields__
    nullable = _nullable_fields(cls)
    rows = []
    try:
        with open_input_text(path, TABLE_LIMIT_BYTES, "a table") as handle:
            reader = csv.DictReader(handle)
            present = set(reader.fieldnames or [])
            required = {f.name for f in msgspec.inspect.type_info(cls).fields if f.required}
            missing = sorted(required - present)
            if missing:
                raise AnalysisError(f"{path}: missing columns {', '.join(missing)}")
            for line_no, record in enumerate(reader, start=2):
                values = {name: (None if record[name] == "" and name in nullable else record[name])
                          for name in fields if name in present}
                try:
                    rows.append(msgspec.convert(values, cls, strict=False))
                except msgspec.ValidationError as exc:
                    raise AnalysisError(f"{path}: line {line_no}: {exc}") from None
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise AnalysisError(f"{path}: not UTF-8 text") from None
    return rows
