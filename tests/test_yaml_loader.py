"""One reader for every YAML data file of analysis/ (analysis/io/data_files.py read_yaml_file): rule files,
thresholds and settings beside the code, page style, signatures, models, hardware, SOL maps. It reads
within a bound, and every problem is one line naming the file (and, for a schema, the key)."""
from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

from analysis.io.data_files import read_yaml_file
from analysis.errors import AnalysisError

ROOT = Path(__file__).resolve().parents[1]
YAML_CALLS = {"load_yaml", "safe_load", "load", "full_load", "unsafe_load"}


def test_no_module_but_the_loader_parses_yaml():
    found = []
    for path in sorted((ROOT / "analysis").rglob("*.py")):
        if path.name == "data_files.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                owner = node.func.value.id if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) else ""
                if name == "load_yaml" or (owner == "yaml" and name in YAML_CALLS):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "read YAML through analysis.io.data_files.read_yaml_file:\n" + "\n".join(found)


class _Limits(msgspec.Struct, forbid_unknown_fields=True):
    margin_pct: float


@pytest.mark.parametrize("text,says", [
    ("margin_pct: [\n", "not valid YAML"),
    ("margin_pct: fast\n", "margin_pct"),
    ("margin_pct: 1\ntypo: 2\n", "typo"),
    ("x" * 100, "more than the 64 bytes"),
    ("margin_pct: 1\nmargin_pct: 2\n", "key 'margin_pct' given twice (lines 1 and 2)"),  # PyYAML kept 2
    ("{margin_pct: 1, margin_pct: 1}\n", "given twice (lines 1 and 1)"),
])
def test_a_bad_file_is_one_line_naming_it_and_the_key(tmp_path, text, says):
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    with pytest.raises(AnalysisError) as err:
        read_yaml_file(path, _Limits, limit_bytes=64)
    message = str(err.value)
    assert str(path) in message and says in message and "\n" not in message.strip(), message


def test_a_good_file_reads_as_its_schema(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("margin_pct: 2.5\n")
    assert read_yaml_file(path, _Limits) == _Limits(2.5) and read_yaml_file(path) == {"margin_pct": 2.5}


def test_keys_a_merge_brings_in_may_be_overridden(tmp_path):
    """A merge's keys are defaults, not a second giving: the mapping's own value wins, as YAML means."""
    path = tmp_path / "limits.yaml"
    path.write_text("base: &b {margin_pct: 1.0}\nover: {<<: *b, margin_pct: 2.0}\n")
    assert read_yaml_file(path)["over"] == {"margin_pct": 2.0}
