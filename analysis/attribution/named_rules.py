"""The attributions' decisions by place, by name: what a row's rule says when no data entry decided.

Why a file: each decision structure.py makes about a kernel (the GEMMs after the attention core are
o_proj, an odd GEMM call of the routed experts is up/gate, ...) and each one module_roles.py makes
where no module-map key names the module (a kernel the MoE block launches itself) is a branch of
code; the row names the branch, and the file (structure_rules.yaml, module_rules.yaml) says what it
decides and why, so "why did this kernel get this module?" takes the row and that file. A name used
in code but missing from its file fails when the code names it (on import).
"""
from __future__ import annotations

import functools

from analysis.errors import AnalysisError
from analysis.rules import load_rules, rules_path
from analysis.rules_schema import NamedRules

STRUCTURE_RULES = "structure_rules.yaml"  # structure.py's positional rules
MODULE_RULES = "module_rules.yaml"  # module_roles.py's rules where no module-map key decided


@functools.lru_cache(maxsize=4)
def named_rules(file_name: str) -> NamedRules:
    return load_rules(file_name, NamedRules)


def rule(file_name: str, name: str) -> str:
    """KernelRow.rule of the named rule (`<file>:<name>`); a name the file lacks fails."""
    if name not in named_rules(file_name).rules:
        raise AnalysisError(f"{rules_path(file_name)}: no rule {name!r}")
    return f"{file_name}:{name}"
