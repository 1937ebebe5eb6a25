"""What a kernel does (GEMM, attention, norm, top-k, expert GEMM, dispatch...), from its name.

Why a class and not a family: the structural attribution needs to know that a CUTLASS grouped
GEMM, a DeepGEMM masked GEMM, a Triton fused_moe kernel and ATen's _grouped_mm all compute
experts, whatever library wrote them. The rules are data (kernel_classes.yaml).
"""
from __future__ import annotations

import functools
import re

from analysis.rules import load_rules, rules_path
from analysis.rules_schema import KernelClasses
from analysis.ingest.kernel_names import unmangle_prefix
from analysis.ingest.trace_model import Kernel

CLASSES_FILE = rules_path("kernel_classes.yaml")
DEFAULT_CLASS = "elementwise"

# Groupings the structural attribution uses.
GEMM_LIKE = frozenset({"gemm", "expert_gemm", "router_gemm"})
ATTENTION_CORE = frozenset({"attn_core", "attn_aux"})
COMMUNICATION = frozenset({"allreduce", "a2a", "dispatch", "combine"})
EXPERT_PATH = frozenset({"expert_gemm", "moe_prep", "moe_finalize", "dispatch", "combine", "a2a"})
ROUTING = frozenset({"topk", "router_gemm"})
MINOR = frozenset({"elementwise", "memory", "quant", "view"})


# A rule's escapes that a lowered name cannot change the meaning of: a class of characters (digits,
# word characters, whitespace, a word edge, the text's ends) or a punctuation mark.
_CASELESS_ESCAPE = re.compile(r"\\[dDwWsSbBAZ]|\\[^0-9A-Za-z]")


class _Rule:
    """An entry's class and regex. A case-insensitive one ('(?i)...') is also kept lowered (`folded`) for
    names of ASCII characters, lowered too: on ASCII text a rule's letter matches a name's letter whatever
    their cases exactly when the lowered letters are equal, so the lowered rule finds the lowered name
    where the rule finds the name, 3 to 7 times faster (a case-insensitive search tries both cases at every
    position of a long templated name). Only where nothing else could differ: an ASCII rule without a
    character set, a group flag or an escape other than _CASELESS_ESCAPE (an escaped code of a letter)."""

    __slots__ = ("cls", "pattern", "folded")

    def __init__(self, cls: str, source: str):
        self.cls, self.pattern, self.folded = cls, re.compile(source), None
        body = source[4:] if source.startswith("(?i)") else ""
        if body and body.isascii() and "[" not in body and not re.search(r"\(\?(?!:)", body):
            pieces = re.split(r"(\\.)", body, flags=re.S)  # the escapes at odd places
            if all(_CASELESS_ESCAPE.fullmatch(escape) for escape in pieces[1::2]):
                self.folded = re.compile("".join(p if i % 2 else p.lower() for i, p in enumerate(pieces)))

    def finds(self, text: str, lowered: str | None) -> bool:
        """Does the regex find `text`; `lowered`: text.lower() where text is all ASCII, else None."""
        if self.folded is not None and lowered is not None:
            return self.folded.search(lowered) is not None
        return self.pattern.search(text) is not None


@functools.lru_cache(maxsize=1)
def _rules() -> list[_Rule]:
    return [_Rule(entry.cls, entry.match) for entry in load_rules(CLASSES_FILE.name, KernelClasses).classes]


def _forms(name: str) -> list[tuple[str, str | None]]:
    """The texts a name is classed by (the name, and a mangled one's plain prefix), each with its lowered
    form where it is all ASCII."""
    text = name.strip()
    texts = [text, unmangle_prefix(text)] if text.startswith("_Z") else [text]
    return [(t, t.lower() if t.isascii() else None) for t in texts]


@functools.lru_cache(maxsize=100_000)
def _matching_class(name: str) -> str | None:
    """The class of the first entry whose regex the name matches, or None (cached: both the class
    and the rule of a name read it)."""
    forms = _forms(name)
    return next((rule.cls for rule in _rules() if any(rule.finds(*form) for form in forms)), None)


@functools.lru_cache(maxsize=100_000)
def matches_class(name: str, cls: str) -> bool:
    """Is an entry of class `cls` found in the name (whichever class the name's first matching entry
    gives it): a kernel family that takes a class's regex from here tests this (cached)."""
    forms = _forms(name)
    return any(rule.cls == cls and any(rule.finds(*form) for form in forms) for rule in _rules())


@functools.lru_cache(maxsize=100_000)
def class_of_name(name: str) -> str:
    """The class of a kernel or operator name (cached: traces repeat few names many times)."""
    return _matching_class(name) or DEFAULT_CLASS


@functools.lru_cache(maxsize=1)
def _collective_rules() -> list[tuple[str, re.Pattern[str]]]:
    return [(entry.role, re.compile(entry.match))
            for entry in load_rules(CLASSES_FILE.name, KernelClasses).collectives]


@functools.lru_cache(maxsize=10_000)
def collective_role(name: str) -> str:
    """Which collective a communication kernel runs (kernel_classes.yaml `collectives`): all_reduce
    unless its name says reduce_scatter or all_gather. Tensor parallelism over expert parallelism
    reduce-scatters after attention and all-gathers before the next one; the table shows them apart."""
    return next((role for role, pattern in _collective_rules() if pattern.search(name)), "all_reduce")


@functools.lru_cache(maxsize=1)
def _two_phase_rules() -> list[tuple[re.Pattern[str], tuple[str, ...]]]:
    return [(re.compile(entry.match), tuple(entry.phases))
            for entry in load_rules(CLASSES_FILE.name, KernelClasses).two_phase]


@functools.lru_cache(maxsize=10_000)
def phases_of(name: str) -> tuple[str, ...] | None:
    """The phases of a kernel launched once per phase in a layer (kernel_classes.yaml `two_phase`:
    DeepEP's low-latency send and receive), or None."""
    return next((phases for pattern, phases in _two_phase_rules() if pattern.search(name)), None)


@functools.lru_cache(maxsize=100_000)
def class_rule_of_name(name: str) -> str:
    """Which entry of kernel_classes.yaml classed the name (KernelRow.rule): `kernel_classes.yaml:<class>`,
    or `kernel_classes.yaml:none` when no entry matched (the default class)."""
    return f"{CLASSES_FILE.name}:{_matching_class(name) or 'none'}"


class _ClassTest(dict):
    """name -> is its class one of `classes`; each name tested once (a missing key tests it)."""

    def __init__(self, classes: frozenset[str]):
        super().__init__()
        self.classes = classes

    def __missing__(self, name: str) -> bool:
        hit = self[name] = class_of_name(name) in self.classes
        return hit


@functools.lru_cache(maxsize=None)
def class_test(classes: frozenset[str]) -> dict[str, bool]:
    """A mapping name -> "is the name's class one of `classes`", shared per set of classes. Hot
    loops index it for every kernel: a dict lookup, cheaper than a call to class_of_name."""
    return _ClassTest(classes)


def kernel_class_rule(kernel: Kernel) -> str:
    return class_rule_of_name(kernel.root or kernel.name)


def kernel_class(kernel: Kernel) -> str:
    """CPU operators are classified by the outermost operator around them (aten::linear > aten::mm)."""
    return class_of_name(kernel.root or kernel.name)
