"""Every figure the docs quote from bundled data agrees with what this checkout computes from it.

Why: docs/gpu-runs.md said the TP4 EP4 eager decode's dispatch receive waits 200-560 us while the
table of those bundled traces prints about 1580 us per layer; nothing tied the words to the data.
docs/figures.yaml names each figure, its input and its tolerance (tests/doc_figures.py reads it); a
mismatch names the doc, the words and both numbers, and `python benchmarks/update_doc_figures.py`
writes the computed ones back.
"""
from __future__ import annotations

import pytest

from tests import doc_figures as F

DATA = F.load()
FIGURES = DATA["figures"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Each named command run once for the whole module: several figures read one command."""
    return F.Outputs(DATA.get("commands") or {}, tmp_path_factory.mktemp("doc-figures"))


def _label(index: int) -> str:
    fig = FIGURES[index]
    return f"{index}-{fig['doc'].split('/')[-1]}-{(fig.get('text') or fig['table_after'])[:32]}"


@pytest.mark.parametrize("index", range(len(FIGURES)), ids=_label)
def test_the_doc_quotes_what_the_bundled_data_gives(index, outputs):
    quote, = F.quotes(outputs, FIGURES, [index])
    assert quote.quoted, f"{quote.where}: nothing quoted"
    assert not quote.differences(), f"{quote.where}: {'; '.join(quote.differences())} -- write it back with `{F.UPDATE}`"


def test_a_figure_off_by_more_than_its_tolerance_fails_and_is_written_back(outputs):
    """Not vacuous: the doc's receive wait replaced by the old words' range (a synthetic edit of a
    copy in memory) fails with both numbers named, and the rewrite puts the computed figure back."""
    index = next(i for i, f in enumerate(FIGURES) if f.get("text", "").startswith("the dispatch's receive half waits"))
    fig = FIGURES[index]
    doc = (F.REPO_ROOT / fig["doc"]).read_text(encoding="utf-8")
    (start, end), = F.quote_of(fig, doc, outputs, index).spans
    broken = doc[:start] + "200-560" + doc[end:]
    quote = F.quote_of(fig, broken, outputs, index)
    computed = quote.formatted[0]
    assert float(computed) > 1000, f"the receive wait of the TP4 EP4 eager table is {computed} us, not above 1 ms"
    assert quote.differences() == [f"quoted 200-560, computed {computed} (tolerance 0.5)"]
    assert F.rewritten(broken, [quote]) == doc[:start] + computed + doc[end:]


def test_a_figure_within_its_tolerance_passes(outputs):
    """The tolerance is the stated one: a quote moved by less passes, by more fails (synthetic edit)."""
    index = next(i for i, f in enumerate(FIGURES) if f.get("text", "").startswith("The same traces with this checkout"))
    fig = FIGURES[index]
    doc = (F.REPO_ROOT / fig["doc"]).read_text(encoding="utf-8")
    quote = F.quote_of(fig, doc, outputs, index)
    (start, end) = quote.spans[0]
    computed = quote.computed[0]
    for moved, ok in ((computed + 0.04, True), (computed + 0.2, False)):
        edited = doc[:start] + f"{moved:.2f}" + doc[end:]
        assert (not F.quote_of(fig, edited, outputs, index).differences()) is ok, f"{moved:.2f} against {computed}"


def test_every_record_names_a_doc_and_its_kind():
    """Figures not recomputed are listed with their kind; a record naming no doc is stale."""
    for record in DATA.get("records") or []:
        assert (F.REPO_ROOT / record["doc"]).is_file(), f"docs/figures.yaml: a record names missing {record['doc']}"
        assert record.get("kind") and record.get("what"), f"docs/figures.yaml: a record for {record['doc']} says no kind or what"
