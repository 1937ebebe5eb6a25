"""The one nested-range search (analysis/ingest/range_tree.py), on hand-made ranges with known answers."""
from __future__ import annotations

from analysis.ingest.range_tree import RangeTree
from analysis.ingest.trace_model import Range

# thread 1: model [0, 100] > layer [10, 50] > attn [12, 20]; layer [60, 90]; thread 2: a lone call
MODEL, LAYER0, ATTN, LAYER1 = Range("model", 0, 100, 1), Range("layer0", 10, 40, 1), Range("attn", 12, 8, 1), \
    Range("layer1", 60, 30, 1)
OTHER = Range("other", 5, 10, 2)
LATER = Range("model", 120, 10, 1)


def _tree():
    return RangeTree([MODEL, OTHER, LAYER0, ATTN, LAYER1, LATER])


def test_innermost_and_enclosing_follow_the_nesting():
    tree = _tree()
    assert tree.ranges[tree.innermost(1, 15)] is ATTN
    assert tree.enclosing(1, 15) == [ATTN, LAYER0, MODEL]
    assert tree.enclosing(1, 55) == [MODEL]  # between the layers
    assert tree.enclosing(1, 110) == []  # between the model calls
    assert tree.enclosing(2, 15) == [OTHER] and tree.enclosing(3, 15) == []
    assert tree.enclosing(1, 20) == [ATTN, LAYER0, MODEL]  # ends count as inside


def test_roots_are_the_outermost_calls_in_the_order_given():
    tree = _tree()
    assert [tree.ranges[n] for n in tree.roots()] == [MODEL, OTHER, LATER]


def test_a_range_that_outlives_its_parent_is_not_reported_where_the_parent_has_ended():
    short, overlapping = Range("short", 0, 10, 1), Range("overlapping", 5, 20, 1)
    tree = RangeTree([short, overlapping])
    assert tree.parent == [-1, 0]  # the later one was opened inside the first
    assert tree.enclosing(1, 20) == [overlapping]  # its parent no longer holds t = 20
    assert [tree.ranges[n] for n in tree.ancestors(tree.innermost(1, 20))] == [overlapping, short]
