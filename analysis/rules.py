"""The naming rules' data (analysis/data/rules/*.yaml), read through one typed loader.

Why one: every rule file (kernel classes, the module map, roles, step labels, kernel families,
name keys) is read the same way: YAML in, checked against its schema (rules_schema.py), a file
that does not fit fails naming the file and the key, never a KeyError deep inside a namer.
Each file is read once per process."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TypeVar

from analysis.io.data_files import read_yaml_file
from analysis.errors import AnalysisError

RULES_DIR = Path(__file__).resolve().parent / "data" / "rules"
Schema = TypeVar("Schema")


def rules_path(file_name: str) -> Path:
    return RULES_DIR / file_name


def load_rules(file_name: str, schema: type[Schema]) -> Schema:
    """A built-in rule file of analysis/data/rules, checked against its schema (cached)."""
    return _load(str(rules_path(file_name)), schema)


def load_rules_file(path: str | Path, schema: type[Schema]) -> Schema:
    """A rule file by path (a user's own kernel families), checked against its schema (cached)."""
    return _load(str(path), schema)


def _rules_error(path: str, problem: str) -> AnalysisError:
    return AnalysisError(f"rules {path}: {problem}")


@functools.lru_cache(maxsize=32)
def _load(path: str, schema: type[Schema]) -> Schema:
    return read_yaml_file(Path(path), schema, _rules_error)
