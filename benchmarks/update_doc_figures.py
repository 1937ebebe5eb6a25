"""Write the figures the docs quote from bundled data back into the docs, as this checkout computes them.

Why: tests/test_doc_figures.py fails when a doc's figure (docs/figures.yaml) is further from the
bundled data's than its tolerance; after a deliberate change of the analysis this puts the computed
figures in place (tables: their rows), through the same reading the check uses
(tests/doc_figures.py), and lists each figure it changed, so the doc diff under review is the
change's effect on what the docs say. Every figure is computed before any doc is written (a figure
that cannot be computed writes nothing). The words around each figure are left alone: a figure whose
words the doc no longer holds is an error naming it (edit the doc or docs/figures.yaml).

Usage:
    python benchmarks/update_doc_figures.py [--check]
--check: write nothing, list what would change, exit 1 if anything would.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.doc_figures import REPO_ROOT, FiguresError, Outputs, load, quotes, rewritten  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a doc would change")
    args = parser.parse_args(argv)
    try:
        data = load()
        with tempfile.TemporaryDirectory(prefix="doc-figures-") as work:
            found = quotes(Outputs(data.get("commands") or {}, Path(work)), data["figures"])
    except FiguresError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    by_doc = defaultdict(list)
    for quote in found:
        changed = [(q, f) for q, f in zip(quote.quoted, quote.formatted) if q != f]
        if quote.table_body is not None and changed:
            print(f"{quote.where}: the table's rows as computed now ({len(changed)} cell(s) or rows differ)")
        else:
            for old, new in changed:
                print(f"{quote.where}: {old} -> {new}")
        if changed:
            by_doc[quote.doc].append(quote)
    if not by_doc:
        print("every figure agrees with the bundled data")
        return 0
    if args.check:
        return 1
    for doc, doc_quotes in by_doc.items():
        path = REPO_ROOT / doc
        path.write_text(rewritten(path.read_text(encoding="utf-8"), doc_quotes), encoding="utf-8")
        print(f"wrote {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
