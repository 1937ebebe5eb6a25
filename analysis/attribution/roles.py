"""The role vocabulary (roles.yaml): which D4 row each role of a kernel in a layer is shown as."""
from __future__ import annotations

import functools
from dataclasses import dataclass


from analysis.errors import AnalysisError
from analysis.rules import load_rules, rules_path
from analysis.rules_schema import Roles

ROLES_FILE = rules_path("roles.yaml")
MOE_GROUPS = frozenset({"gate", "moe", "combine/share overlap"})


@dataclass(frozen=True)
class Row:
    group: str
    module: str


@dataclass(frozen=True)
class _Role:
    row: Row
    dense: Row


@functools.lru_cache(maxsize=1)
def _roles() -> dict[str, _Role]:
    out = {}
    for name, spec in load_rules(ROLES_FILE.name, Roles).roles.items():
        row = Row(spec.group, spec.module)
        dense = spec.dense
        out[name] = _Role(row, Row(dense.group or row.group, dense.module or row.module) if dense else row)
    return out


def row_of(role: str, moe_layer: bool = True) -> Row:
    """The D4 row of a role; `moe_layer` False picks the dense-layer row where one is given."""
    try:
        spec = _roles()[role]
    except KeyError:
        raise AnalysisError(f"unknown role {role!r}: not in {ROLES_FILE}") from None
    return spec.row if moe_layer else spec.dense


def is_moe_role(role: str) -> bool:
    """Roles only a MoE layer has (what makes a layer a MoE layer)."""
    return row_of(role).group in MOE_GROUPS and role != "post_attention_layernorm"
