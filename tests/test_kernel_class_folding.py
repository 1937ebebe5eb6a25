"""A case-insensitive class rule searched as a lowered rule in a lowered name finds exactly what the rule
finds (analysis/ingest/kernel_classes.py `_Rule`), and a rule where that could differ is searched as written.

Evidence: every kernel, copy and launch name of bundled real traces and a seeded set of SYNTHETIC names
built from the rules' own words with letters of both cases, against every shipped class rule and against
rules written to break the lowering (a character range across cases, an escaped letter code, a group that
turns case-insensitivity off, a named character): each rule's fast search and its plain search agree on
every name.
"""
from __future__ import annotations

import functools
import random
import re
from pathlib import Path

import pytest

from analysis.ingest import kernel_classes
from analysis.ingest.kernel_classes import _Rule
from analysis.ingest.trace_loader import load_trace

DATA = Path(__file__).parent / "data"
TRACES = (DATA / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz",
          DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz",
          DATA / "sglang-real" / "ep" / "sglang-0.5.17-dsv3-4l-fp8-h100x2-deepep-ll-eager-TP-0-EP-0-decode.trace.json.gz")
# rules whose lowered form would find other names than they do: each must be searched as written
UNFOLDABLE = (r"(?i)[A-z]", r"(?i)x[A-Z_]y", r"(?i)\x41b", r"(?i)(?-i:A)b", r"(?i)\N{LATIN CAPITAL LETTER A}b",
              r"(?i)ſ", r"(?i)k\101")


@functools.lru_cache(maxsize=1)
def _names() -> list[str]:
    rng = random.Random(20261129)
    words = sorted({w for rule in kernel_classes._rules() for w in re.findall(r"[A-Za-z_:]{2,}", rule.pattern.pattern)})
    made = []
    for _ in range(4000):
        parts = [rng.choice([rng.choice(words), rng.choice("_:<>(),. 0123456789\\[]^`"), "K", "ſ"])
                 for _ in range(rng.randint(1, 6))]
        made.append("".join(c.upper() if rng.random() < 0.3 else c for c in "".join(parts)))
    real = set()
    for path in TRACES:
        trace = load_trace(str(path))
        real |= {k.name for k in trace.kernels} | {launch.kernel_name or launch.name for launch in trace.launches}
    return sorted(real) + made



def _fast_and_plain_agree(rule: _Rule) -> list[str]:
    return [n for n in _names() if rule.finds(n, n.lower() if n.isascii() else None) != (rule.pattern.search(n) is not None)]


def test_every_shipped_case_insensitive_class_rule_is_searched_lowered_and_finds_the_same_names():
    rules = kernel_classes._rules()
    insensitive = [r for r in rules if r.pattern.pattern.startswith("(?i)")]
    assert len(insensitive) >= 10 and all(r.folded is not None for r in insensitive)
    assert all(r.folded is None for r in rules if r not in insensitive)
    for rule in rules:
        assert not _fast_and_plain_agree(rule), rule.cls


@pytest.mark.parametrize("source", UNFOLDABLE)
def test_a_rule_whose_lowered_form_could_differ_is_searched_as_written(source):
    rule = _Rule("x", source)
    assert rule.folded is None
    assert not _fast_and_plain_agree(rule)


def test_the_lowered_rule_keeps_its_escapes():
    assert _Rule("x", r"(?i)Aiter::\S*(ATTN|mla)\.\d+").folded.pattern == r"aiter::\S*(attn|mla)\.\d+"


def test_a_name_that_is_not_ascii_is_searched_as_written():
    """'ſ' (long s) is an 's' to a case-insensitive search and stays 'ſ' lowered: such a name is not lowered."""
    rule = _Rule("x", r"(?i)cast")
    assert rule.folded is not None and not rule.folded.search("caſt".lower())
    assert kernel_classes._forms("caſt") == [("caſt", None)] and rule.finds("caſt", None)
