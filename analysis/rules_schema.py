"""The schema of each naming-rule file in analysis/data/rules (one class per file).

Regexes compile at load, so a bad one fails naming its file and key."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

from analysis.data_files import checked_regex as _compiles


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class KernelClass(_Rule):
    cls: str = Field(alias="class")
    match: str
    _match_compiles = field_validator("match")(lambda cls, v: _compiles(v))


class KernelClasses(_Rule):
    """kernel_classes.yaml: what a kernel computes, from its name (first match wins)."""
    classes: list[KernelClass]


class MapFunction(_Rule):
    match: str
    role: str
    core: bool = False
    _match_compiles = field_validator("match")(lambda cls, v: _compiles(v))


class ModuleMapRules(_Rule):
    """module_map.yaml: nn.Module class names (regexes) to the roles of a decoder layer."""
    model: str
    layer: str
    attention: str
    norm: str
    linear: str
    rotary: str
    activation: str
    experts: str
    router: str
    shared: str
    dispatch: str
    combine: str
    functions: list[MapFunction] = []
    _regexes_compile = field_validator("model", "layer", "attention", "norm", "linear", "rotary", "activation",
                                       "experts", "router", "shared", "dispatch", "combine")(lambda cls, v: _compiles(v))


class RowRule(_Rule):
    group: str
    module: str


class DenseRow(_Rule):
    group: str | None = None
    module: str | None = None


class RoleRule(RowRule):
    dense: DenseRow | None = None  # the row in a dense layer, where it differs


class Roles(_Rule):
    """roles.yaml: each role's D4 row (group, module), and its row in a dense layer."""
    roles: dict[str, RoleRule]


class StepLabels(_Rule):
    """step_labels.yaml: SGLang's forward-mode labels to stages."""
    labels: dict[str, str]
    after_verify: dict[str, str] = {}


class KernelFamily(_Rule):
    family: str
    match: str
    whole_name_only: bool = False
    _match_compiles = field_validator("match")(lambda cls, v: _compiles(v))


class KernelFamilies(_Rule):
    """kernel_families.yaml: kernel families and the wrappers around mangled names."""
    families: list[KernelFamily]
    wrappers: list[str] = []


class NameKey(_Rule):
    pattern: str
    key: str
    _pattern_compiles = field_validator("pattern")(lambda cls, v: _compiles(v))


class NameKeys(RootModel[list[NameKey]]):
    """name_keys.yaml: kernel names a learned template matches by family (tile shapes vary)."""
