"""The schema of each naming-rule file in analysis/data/rules (one class per file).

Typed structs read with msgspec.convert (analysis/rules.py): an unknown key, a missing one or a
value of the wrong type fails naming the file and the key; regexes compile at load."""
from __future__ import annotations

import msgspec

from analysis.io.data_files import check_regexes


class _Rule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class KernelClass(_Rule):
    cls: str = msgspec.field(name="class")
    match: str

    def __post_init__(self) -> None:
        check_regexes(self, "match")


class CollectiveRole(_Rule):
    role: str
    match: str

    def __post_init__(self) -> None:
        check_regexes(self, "match")


class TwoPhase(_Rule):
    match: str
    phases: list[str]

    def __post_init__(self) -> None:
        check_regexes(self, "match")


class KernelClasses(_Rule):
    """kernel_classes.yaml: what a kernel computes, from its name (first match wins), and which
    collective a communication kernel runs."""
    classes: list[KernelClass]
    collectives: list[CollectiveRole] = []
    two_phase: list[TwoPhase] = []


class MapFunction(_Rule):
    match: str
    role: str
    core: bool = False

    def __post_init__(self) -> None:
        check_regexes(self, "match")


_MODULE_MAP_REGEXES = ("model", "layer", "attention", "norm", "linear", "rotary", "activation", "experts", "router",
                       "shared", "dispatch", "combine")


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

    def __post_init__(self) -> None:
        check_regexes(self, *_MODULE_MAP_REGEXES)


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
    """step_labels.yaml: SGLang's forward-mode labels to stages, and the label's aggregates."""
    labels: dict[str, str]
    after_verify: dict[str, str] = {}
    aggregates: dict[str, list[str]] = {}
    aggregate_fallbacks: dict[str, list[str]] = {}


class HostSyncs(_Rule):
    """host_syncs.yaml: runtime calls during which the host may wait for the GPU."""
    host_sync: list[str]


class KernelFamily(_Rule):
    family: str
    match: str
    whole_name_only: bool = False

    def __post_init__(self) -> None:
        check_regexes(self, "match")


class KernelFamilies(_Rule):
    """kernel_families.yaml: kernel families and the wrappers around mangled names."""
    families: list[KernelFamily]
    wrappers: list[str] = []


class NameKey(_Rule):
    pattern: str
    key: str

    def __post_init__(self) -> None:
        check_regexes(self, "pattern")


NameKeys = list[NameKey]  # name_keys.yaml: kernel names a learned template matches by family (tile shapes vary)


class NamedRule(_Rule):
    section: str  # layer | pre | post: where the kernels it names sit
    roles: list[str]  # the roles it can give (roles.yaml)
    says: str  # what it decides, and why


class NamedRules(_Rule):
    """structure_rules.yaml, module_rules.yaml: an attribution's decisions that no data entry makes
    (a kernel's place decides), by name (KernelRow.rule)."""
    rules: dict[str, NamedRule]
