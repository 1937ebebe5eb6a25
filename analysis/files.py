"""The project's file input and output, for analysis and the harness alike: every file read within a
bound (input_files.py), every file written aside and moved in (atomic_files.py), YAML parsed one way
(data_files.py), a path shown whatever its bytes (errors.shown_path).

Why a door of its own: these are no step of the analysis; the harness reads its own run files
(manifests, load records, scenarios) through them as analysis reads traces. harness/ imports
analysis/ through analysis.api (what it asks analysis for) and this module (how it reads and writes),
nothing else (tests/test_layout.py).
"""
from __future__ import annotations

from analysis.atomic_files import write_atomically, written_aside
from analysis.data_files import load_yaml
from analysis.errors import shown_path
from analysis.input_files import (
    CONFIG_LIMIT_BYTES,
    DOCUMENT_LIMIT_BYTES,
    TABLE_LIMIT_BYTES,
    InputFileError,
    JsonLineError,
    input_sha256,
    open_input_text,
    parsed_json,
    read_input,
    read_input_range,
    read_input_text,
    read_json,
    read_json_lines,
)

__all__ = ["CONFIG_LIMIT_BYTES", "DOCUMENT_LIMIT_BYTES", "TABLE_LIMIT_BYTES", "InputFileError", "JsonLineError",
           "input_sha256", "load_yaml", "open_input_text", "parsed_json", "read_input", "read_input_range", "read_input_text",
           "read_json", "read_json_lines", "shown_path", "write_atomically", "written_aside"]
