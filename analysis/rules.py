"""The naming rules' data (analysis/data/rules/*.yaml), read through one typed loader.

Why one: every rule file (kernel classes, the module map, roles, step labels, kernel families,
name keys) is read the same way: YAML in, checked against its schema (rules_schema.py), a file
that does not fit fails naming the file and the key, never a KeyError deep inside a namer.
Each file is read once per process."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TypeVar

import msgspec
import yaml

from analysis.data_files import convert, load_yaml, read_yaml_text, validation_problems
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


class _RulesReadError(Exception):
    def __init__(self, path: str, problem: str):
        super().__init__(problem)


@functools.lru_cache(maxsize=32)
def _load(path: str, schema: type[Schema]) -> Schema:
    try:
        data = load_yaml(read_yaml_text(Path(path), _RulesReadError))
    except (_RulesReadError, yaml.YAMLError) as exc:
        raise AnalysisError(f"rules {path}: cannot read: {' '.join(str(exc).split())}") from None
    try:
        return convert(data, schema)
    except msgspec.ValidationError as exc:
        raise AnalysisError(f"rules {path}: {validation_problems(exc)}") from None
