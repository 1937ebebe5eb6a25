"""Signature files: which kernels make up a layer on one serving stack (see docs/signatures.md)."""
from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, field_validator, model_validator

from analysis.data_files import builtin_names, checked_regex, read_mapping, resolve, validation_problems
from analysis.errors import SignatureError

SIGNATURE_DIR = Path(__file__).resolve().parent.parent / "data" / "signatures"
UNVERIFIED = "unverified: no real trace"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_compiled = checked_regex  # every regex of a signature compiles at load (analysis/data_files.py)


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
    _rule: str = PrivateAttr(default="")  # where the entry is written, set by its Signature: sm90.yaml:layer[3]

    @property
    def rule(self) -> str:
        return self._rule

    @field_validator("in_layers")
    @classmethod
    def _layer_kind(cls, value: str) -> str:
        if value not in ("all", "dense", "moe"):
            raise ValueError(f"in_layers must be all, dense or moe, not {value!r}")
        return value

    @field_validator("match")
    @classmethod
    def _regex_compiles(cls, value: str) -> str:
        return _compiled(value, "match")

    @field_validator("weights")
    @classmethod
    def _weight_keys_compile(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            _compiled(key, "weights key")
        return value

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
    family: str
    group: str
    match: str
    _rule: str = PrivateAttr(default="")  # where the family is written, set by its Signature

    @property
    def rule(self) -> str:
        return self._rule

    _match_compiles = field_validator("match")(lambda cls, v: _compiled(v, "match"))

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.match)


class ModuleMapEntry(_Strict):
    match: str
    group: str
    module: str
    within: str | None = None  # only when an enclosing module's class matches this regex
    _rule: str = PrivateAttr(default="")  # where the entry is written, set by its Signature

    @property
    def rule(self) -> str:
        return self._rule

    _regexes_compile = field_validator("match", "within")(lambda cls, v, info: _compiled(v, info.field_name))

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.match)

    @cached_property
    def within_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.within) if self.within else None


class ModuleRanges(_Strict):
    layer: str
    map: list[ModuleMapEntry]
    _rule: str = PrivateAttr(default="")  # where `layer` is written, set by its Signature

    @property
    def rule(self) -> str:
        return self._rule

    _layer_compiles = field_validator("layer")(lambda cls, v: _compiled(v, "layer"))

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
    _family_by_name: dict[str, Family | None] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _entry_rules(self) -> "Signature":
        """Each entry and family knows where it is written (KernelRow.rule): file:section[index]."""
        path = Path(self.source) if self.source else None
        if path is None:
            where = f"signature {self.name}"
        elif path.parent.resolve() == SIGNATURE_DIR.resolve():
            where = f"signatures/{path.name}"
        else:
            where = str(path)
        for section in ("layer", "side", "pre", "post", "families"):
            for index, entry in enumerate(getattr(self, section)):
                entry._rule = f"{where}:{section}[{index}]"
        if self.module_ranges is not None:
            self.module_ranges._rule = f"{where}:module_ranges.layer"
            for index, entry in enumerate(self.module_ranges.map):
                entry._rule = f"{where}:module_ranges.map[{index}]"
        return self

    @model_validator(mode="after")
    def _one_anchor(self) -> "Signature":
        if self.generic:
            if not self.families:
                raise ValueError("a generic signature needs `families`")
            return self
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
        return self

    @property
    def unverified(self) -> bool:
        """No real trace confirms it: its rows are its own names, checked only on traces made from it."""
        return self.evidence.startswith(UNVERIFIED)

    @property
    def anchor_index(self) -> int:
        return next(i for i, e in enumerate(self.layer) if e.anchor)

    def family_of(self, kernel_name: str) -> Family | None:
        """Cached per name: a trace has few distinct kernel names but many kernels."""
        cache = self._family_by_name
        if kernel_name in cache:
            return cache[kernel_name]
        found = next((family for family in self.families if family.regex.search(kernel_name)), None)
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


def load_signature(name_or_path: str) -> Signature:
    """A built-in signature by name, or a YAML file by path."""
    path = resolve(name_or_path, SIGNATURE_DIR, "signature", SignatureError)
    data = read_mapping(path, SignatureError)
    try:
        return Signature(**data, source=str(path))
    except ValidationError as exc:
        raise SignatureError(str(path), validation_problems(exc)) from None
