"""Which python-function ranges and runtime calls the loader keeps beyond kernels and launches.

Why here: a with_stack trace holds far more python-function ranges than any analysis uses, so the
loader keeps only the ones matching the `functions` of the attribution's module map
(analysis/data/rules/module_map.yaml), and of the runtime calls besides launches only those that
may block the host (analysis/data/rules/host_syncs.yaml). The files are read, not imported, so
ingest never imports the attribution stage.
"""
from __future__ import annotations

import functools
import re


from analysis.rules import load_rules, rules_path
from analysis.rules_schema import HostSyncs, ModuleMapRules

MAP_FILE = rules_path("module_map.yaml")
SYNCS_FILE = rules_path("host_syncs.yaml")


@functools.lru_cache(maxsize=1)
def function_pattern() -> re.Pattern[str]:
    """One regex for the python-function ranges worth keeping while a trace loads."""
    entries = load_rules(MAP_FILE.name, ModuleMapRules).functions
    return re.compile("|".join(f"(?:{f.match})" for f in entries) or r"(?!)")


@functools.lru_cache(maxsize=1)
def host_sync_calls() -> frozenset[str]:
    """Runtime calls during which the host may wait for the GPU (host_syncs.yaml), kept with their
    durations so an idle gap can be told to begin while the host waited (analysis/attribution/idle.py)."""
    return frozenset(load_rules(SYNCS_FILE.name, HostSyncs).host_sync)
