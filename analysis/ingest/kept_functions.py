"""Which python-function ranges the loader keeps: those the module map names a role for.

Why here: a with_stack trace holds far more python-function ranges than any analysis uses, so the
loader keeps only the ones matching the `functions` of the attribution's module map
(analysis/data/rules/module_map.yaml). The file is read, not imported, so ingest never imports the
attribution stage.
"""
from __future__ import annotations

import functools
import re


from analysis.rules import load_rules, rules_path
from analysis.rules_schema import ModuleMapRules

MAP_FILE = rules_path("module_map.yaml")


@functools.lru_cache(maxsize=1)
def function_pattern() -> re.Pattern[str]:
    """One regex for the python-function ranges worth keeping while a trace loads."""
    entries = load_rules(MAP_FILE.name, ModuleMapRules).functions
    return re.compile("|".join(f"(?:{f.match})" for f in entries) or r"(?!)")
