"""Which python-function ranges the loader keeps: those the module map names a role for.

Why here: a with_stack trace holds far more python-function ranges than any analysis uses, so the
loader keeps only the ones matching the `functions` of the attribution's module map
(analysis/attribution/module_map.yaml). The file is read, not imported, so ingest never imports the
attribution stage.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

from analysis.errors import AnalysisError

MAP_FILE = Path(__file__).resolve().parent.parent / "attribution" / "module_map.yaml"


@functools.lru_cache(maxsize=1)
def function_pattern() -> re.Pattern[str]:
    """One regex for the python-function ranges worth keeping while a trace loads."""
    try:
        entries = yaml.safe_load(MAP_FILE.read_text()).get("functions") or []
        return re.compile("|".join(f"(?:{f['match']})" for f in entries) or r"(?!)")
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, re.error) as exc:
        raise AnalysisError(f"module map {MAP_FILE}: {exc}") from exc
