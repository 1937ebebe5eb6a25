"""Signature files: which kernels make up a layer on one serving stack (see docs/signatures.md)."""
from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

import msgspec

from analysis.io.data_files import (
    builtin_names,
    check_field_regexes,
    check_regexes,
    convert,
    field_problem,
    read_mapping,
    resolve,
    validation_problems,
)
from analysis.ingest.kernel_classes import matches_class
from analysis.errors import SignatureError, shown_path

SIGNATURE_DIR = Path(__file__).resolve().parent.parent / "data" / "signatures"
UNVERIFIED = "unverified: no real trace"


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True, dict=True):
    """Typed, read-only once loaded; a __dict__ holds what is computed from the fields on first use
    (compiled regexes, per-name caches) and where the entry is written (`rule`)."""

    @property
    def rule(self) -> str:
        """Where the entry is written (KernelRow.rule), set by its Signature: sm90.yaml:layer[3]."""
        return self.__dict__.get("_rule", "")


class Entry(_Strict):
    """One kernel slot of a template."""

    group: str
    module: str
    kernel: str
    match: str
    anchor: bool = False
    optional: bool = False
    repeat: bool = False
    example: str | None = None  # a real kernel name for this slot (documentation; synthetic fixtures)
    in_layers: str = "all"  # all | dense | moe: which layers launch it (documentation; synthetic fixtures)
    weights: dict[str, float] | None = None  # per name regex (full match): how characteristic of this slot (learned)

    def __post_init__(self) -> None:
        if self.in_layers not in ("all", "dense", "moe"):
            raise field_problem("in_layers", f"must be all, dense or moe, not {self.in_layers!r}")
        check_regexes(self, "match")
        check_field_regexes("weights", self.weights or (), "key")

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.match)

    @cached_property
    def _seen(self) -> dict[str, bool]:
        return {}

    def matches(self, kernel_name: str) -> bool:
        hit = self._seen.get(kernel_name)
        if hit is None:
            hit = self._seen[kernel_name] = self.regex.search(kernel_name) is not None
        return hit

    @cached_property
    def _weight_rules(self) -> list[tuple[re.Pattern[str], float]]:
        return [(re.compile(key), w) for key, w in (self.weights or {}).items()]

    @cached_property
    def _weight_seen(self) -> dict[str, float]:
        return {}

    def weight_of(self, kernel_name: str) -> float:
        if self.weights is None:
            return 1.0
        hit = self._weight_seen.get(kernel_name)
        if hit is None:
            hit = next((w for rule, w in self._weight_rules if rule.fullmatch(kernel_name)), 0.05)
            self._weight_seen[kernel_name] = hit
        return hit


class Family(_Strict):
    """A kernel family: the names its `match` regex is found in, and those an entry of one of
    kernel_classes.yaml's `classes` is found in (so a family of expert GEMMs takes the class's regex
    from its one home instead of a copy); at least one of the two."""
    family: str
    group: str
    match: str = ""
    classes: list[str] = []

    def __post_init__(self) -> None:
        if not self.match and not self.classes:
            raise ValueError(f"family {self.family}: needs `match` or `classes`")
        check_regexes(self, "match")

    @cached_property
    def regex(self) -> re.Pattern[str] | None:
        return re.compile(self.match) if self.match else None

    def holds(self, kernel_name: str) -> bool:
        """Is the kernel of this family: an entry of one of `classes`, or `match`, found in its name."""
        if any(matches_class(kernel_name, cls) for cls in self.classes):
            return True
        return self.regex is not None and self.regex.search(kernel_name) is not None


class ModuleMapEntry(_Strict):
    match: str
    group: str
    module: str
    within: str | None = None  # only when an enclosing module's class matches this regex

    def __post_init__(self) -> None:
        check_regexes(self, "match", "within")

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.match)

    @cached_property
    def within_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.within) if self.within else None


class ModuleRanges(_Strict):
    layer: str
    map: list[ModuleMapEntry]

    def __post_init__(self) -> None:
        check_regexes(self, "layer")

    @cached_property
    def layer_regex(self) -> re.Pattern[str]:
        return re.compile(self.layer)


class Signature(_Strict):
    name: str
    description: str
    layer: list[Entry] = []
    side: list[Entry] = []
    pre: list[Entry] = []
    post: list[Entry] = []
    families: list[Family] = []
    generic: bool = False
    module_ranges: ModuleRanges | None = None
    # What real traces confirm it: "unverified: no real trace" where none does (written from kernel
    # lists; only synthetic traces made from the signature itself exercise it), else the traces
    evidence: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        self._one_anchor()
        self._entry_rules()

    def _entry_rules(self) -> None:
        """Each entry and family knows where it is written (KernelRow.rule): file:section[index]."""
        path = Path(self.source) if self.source else None
        if path is None:
            where = f"signature {self.name}"
        elif path.parent.resolve() == SIGNATURE_DIR.resolve():
            where = f"signatures/{path.name}"
        else:
            where = shown_path(path)
        for section in ("layer", "side", "pre", "post", "families"):
            for index, entry in enumerate(getattr(self, section)):
                entry.__dict__["_rule"] = f"{where}:{section}[{index}]"
        if self.module_ranges is not None:
            self.module_ranges.__dict__["_rule"] = f"{where}:module_ranges.layer"
            for index, entry in enumerate(self.module_ranges.map):
                entry.__dict__["_rule"] = f"{where}:module_ranges.map[{index}]"

    def _one_anchor(self) -> None:
        if self.generic:
            if not self.families:
                raise ValueError("a generic signature needs `families`")
            return
        if not self.layer:
            raise ValueError("`layer` is required unless `generic: true`")
        anchors = [i for i, e in enumerate(self.layer) if e.anchor]
        if len(anchors) != 1:
            raise ValueError(f"`layer` needs exactly one entry with `anchor: true`, found {len(anchors)}")
        if self.layer[anchors[0]].optional:
            raise ValueError("the anchor entry cannot be optional")
        for key in ("side", "pre", "post"):
            if any(e.anchor for e in getattr(self, key)):
                raise ValueError(f"`anchor` is only allowed in `layer`, not in `{key}`")

    @property
    def anchor_index(self) -> int:
        return next(i for i, e in enumerate(self.layer) if e.anchor)

    @cached_property
    def _family_by_name(self) -> dict[str, Family | None]:
        return {}

    def family_of(self, kernel_name: str) -> Family | None:
        """Cached per name: a trace has few distinct kernel names but many kernels."""
        cache = self._family_by_name
        if kernel_name in cache:
            return cache[kernel_name]
        found = next((family for family in self.families if family.holds(kernel_name)), None)
        cache[kernel_name] = found
        return found

    def template_order(self) -> list[tuple[str, str, str]]:
        """(group, module, kernel) keys in the order the D4 table prints them."""
        seen: dict[tuple[str, str, str], None] = {}
        for entry in [*self.layer, *self.side]:
            seen.setdefault((entry.group, entry.module, entry.kernel), None)
        return list(seen)


def builtin_signatures() -> list[str]:
    return builtin_names(SIGNATURE_DIR)


def signature_from(data: dict, source: str = "") -> Signature:
    """A signature from a mapping (a YAML file's, or a learned one), checked against the schema.
    Raises msgspec.ValidationError (data_files.validation_problems says which key)."""
    return convert(data, Signature, source=source)


def load_signature(name_or_path: str) -> Signature:
    """A built-in signature by name, or a YAML file by path."""
    path = resolve(name_or_path, SIGNATURE_DIR, "signature", SignatureError)
    data = read_mapping(path, SignatureError)
    try:
        return signature_from(data, source=str(path))
    except msgspec.ValidationError as exc:
        raise SignatureError(str(path), validation_problems(exc)) from None
