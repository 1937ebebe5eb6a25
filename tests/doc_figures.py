"""Figures the docs quote from data bundled in this repository, recomputed from that data.

Why: a doc that quotes a number the checkout no longer prints misleads the reader who runs the
command beside it (docs/gpu-runs.md once said the TP4 EP4 eager decode's dispatch receive waits
200-560 us; the table prints 1581 us per layer). docs/figures.yaml says where each such figure sits
(the doc, the words around it), which command over which bundled input computes it and which cell or
column of that command's output it is, and within what tolerance it must agree. This module is the
one reading of that file, shared by the check (tests/test_doc_figures.py) and the command that writes
the figures back (benchmarks/update_doc_figures.py).
"""
from __future__ import annotations

import contextlib
import csv
import glob
import io
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURES_FILE = REPO_ROOT / "docs" / "figures.yaml"
UPDATE = "python benchmarks/update_doc_figures.py"
# a number as docs write it; a range ("200-560") is taken whole, so that it reads as a mismatch
NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:-\d[\d,]*(?:\.\d+)?)?"
AGGREGATES = {"value", "sum", "mean", "min", "max", "count", "median"}
READ_KEYS = {"command", "file", "where", "column", "aggregate", "ratio_of", "scale", "pattern", "key",
             "accuracy", "side", "row", "group", "format", "tolerance"}


class FiguresError(ValueError):
    """docs/figures.yaml, or a doc or output it points at, does not hold what it should (one line)."""


@dataclass
class Quote:
    """One figure as the doc has it and as the bundled data gives it now."""
    where: str            # "docs/x.md: 'words around it'" for messages
    doc: str              # repository-relative path of the doc
    spans: list           # (start, end) of each quoted number in the doc's text
    quoted: list          # the doc's text of each number
    computed: list        # each number as this checkout computes it
    formatted: list       # each computed number as the doc writes it
    tolerances: list      # absolute, in the figure's own unit
    table_body: str | None = None  # a table's rows as computed now (table figures only)

    def differences(self) -> list[str]:
        """Each quoted number outside its tolerance, as 'quoted X, computed Y (tolerance T)'."""
        out = []
        for quoted, computed, formatted, tol in zip(self.quoted, self.computed, self.formatted, self.tolerances):
            if not _close(quoted, computed, tol):
                out.append(f"quoted {quoted}, computed {formatted} (tolerance {tol})")
        return out


def _close(quoted: str, computed, tolerance: float) -> bool:
    if isinstance(computed, str):
        return quoted == computed
    try:
        return abs(_number(quoted) - computed) <= tolerance + 1e-9
    except ValueError:
        return False


def _number(text: str) -> float:
    """A doc's or a table cell's number: '1,580.8', '7.87ms', '41%', '32.00x' -> float."""
    cleaned = text.strip().replace(",", "")
    cleaned = re.sub(r"(ms|us|%|x)$", "", cleaned)
    return float(cleaned)


def load() -> dict:
    """docs/figures.yaml, checked for the keys this module reads."""
    try:
        data = yaml.safe_load(FIGURES_FILE.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise FiguresError(f"{_rel(FIGURES_FILE)}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("figures"), list):
        raise FiguresError(f"{_rel(FIGURES_FILE)}: expected a mapping with a `figures` list")
    commands = data.get("commands") or {}
    for i, fig in enumerate(data["figures"]):
        here = f"{_rel(FIGURES_FILE)}: figures[{i}]"
        if not isinstance(fig, dict) or "doc" not in fig or ("text" in fig) == ("table_after" in fig):
            raise FiguresError(f"{here}: needs `doc` and exactly one of `text` or `table_after`")
        if fig.get("kind") != "bundled":
            raise FiguresError(f"{here}: kind {fig.get('kind')!r}; only `bundled` figures are recomputed "
                               "(GPU records and timings go under `records`)")
        if "tolerance" not in fig:
            raise FiguresError(f"{here}: states no `tolerance`")
        if "table_after" in fig and fig.get("command") not in commands:
            raise FiguresError(f"{here}: command {fig.get('command')!r} is not under `commands`")
        for j, value in enumerate(fig.get("values") or []):
            unknown = set(value) - READ_KEYS
            if unknown:
                raise FiguresError(f"{here}.values[{j}]: unknown key(s) {sorted(unknown)}")
            if "command" in value and value["command"] not in commands:
                raise FiguresError(f"{here}.values[{j}]: command {value['command']!r} is not under `commands`")
        if "text" in fig and fig["text"].count("{}") != len(fig.get("values") or []):
            raise FiguresError(f"{here}: text has {fig['text'].count('{}')} '{{}}' for {len(fig.get('values') or [])} values")
    return data


def _rel(path: Path) -> str:
    return path.resolve().relative_to(REPO_ROOT).as_posix()


class Outputs:
    """Each named command of docs/figures.yaml run once, through the CLI's own entry, from the
    repository root, into its own folder: later reads of the same command reuse that folder."""

    def __init__(self, commands: dict, work_dir: Path):
        self.commands, self.work_dir, self.done = commands, Path(work_dir), {}

    def folder(self, name: str) -> Path:
        if name not in self.done:
            from harness.cli import main
            args = []
            for arg in self.commands[name]:
                matches = sorted(glob.glob(str(REPO_ROOT / arg))) if any(c in str(arg) for c in "*?[") else []
                args += [str(Path(m).relative_to(REPO_ROOT)) for m in matches] if matches else [str(arg)]
            out = self.work_dir / name
            printed, said = io.StringIO(), io.StringIO()
            with contextlib.chdir(REPO_ROOT), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
                code = main([*args, "--out", str(out.resolve())])
            if code != 0:
                raise FiguresError(f"command {name!r} (moe-harness {' '.join(args)}) exited {code}: "
                                   f"{said.getvalue().strip().splitlines()[-1:]}")
            self.done[name] = out
        return self.done[name]


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _matches(row: dict, where: dict) -> bool:
    for column, wanted in (where or {}).items():
        cell = "" if row.get(column) is None else str(row.get(column))
        if isinstance(wanted, str) and wanted.startswith("~"):
            if not re.search(wanted[1:], cell):
                return False
        elif cell != str(wanted):
            return False
    return True


def _aggregate(rows: list[dict], column, how: str, here: str) -> float:
    if how == "count":
        return float(len(rows))
    if not rows:
        raise FiguresError(f"{here}: no row matches")
    names = list(rows[0])
    name = names[column] if isinstance(column, int) else column
    if name not in rows[0]:
        raise FiguresError(f"{here}: no column {name!r} (has {names})")
    numbers = [_number(str(r[name])) if isinstance(r[name], str) else float(r[name]) for r in rows]
    if how == "value":
        if len(numbers) != 1:
            raise FiguresError(f"{here}: {len(numbers)} rows match where one should")
        return numbers[0]
    return {"sum": sum, "mean": statistics.fmean, "min": min, "max": max, "median": statistics.median}[how](numbers)


def compute(value: dict, outputs: Outputs, here: str) -> float:
    """One figure's number from its read (see docs/figures.yaml's header for the kinds of read)."""
    scale = float(value.get("scale", 1.0))
    if "accuracy" in value:
        return _accuracy(value, here) * scale
    if "command" in value:
        path = outputs.folder(value["command"]) / value["file"]
    else:
        path = REPO_ROOT / value["file"]
    if not path.is_file():
        raise FiguresError(f"{here}: no file {path.name} ({'output of ' + value['command'] if 'command' in value else 'in the repository'})")
    if "pattern" in value:
        found = re.findall(value["pattern"], path.read_text(encoding="utf-8"))
        if len(found) != 1:
            raise FiguresError(f"{here}: pattern {value['pattern']!r} matches {len(found)} times in {path.name}")
        return _number(found[0]) * scale
    if "key" in value:
        node = json.loads(path.read_text(encoding="utf-8"))
        for part in value["key"].split("."):
            node = node[part]
        return float(node) * scale
    how = value.get("aggregate", "value")
    if how not in AGGREGATES:
        raise FiguresError(f"{here}: aggregate {how!r} is not one of {sorted(AGGREGATES)}")
    rows = _rows(path)
    column = value.get("column", -1)
    number = _aggregate([r for r in rows if _matches(r, value.get("where"))], column, how, here)
    if "ratio_of" in value:
        number /= _aggregate([r for r in rows if _matches(r, value["ratio_of"])], column, how, here)
    return number * scale


def _accuracy(value: dict, here: str) -> float:
    """A D4 group's or compared row's share of step busy time (%), by the truth or the tool, for one
    case of the accuracy suite (benchmarks/accuracy/suite_cases.py, tests/accuracy)."""
    import sys
    if str(REPO_ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "tests"))
    from accuracy import table as T
    from accuracy.judge import judge_case
    from benchmarks.accuracy.suite_cases import bundled_cases, corpus_cases, ep_cases

    cases = {c.name: c for c in corpus_cases() + bundled_cases() + ep_cases()}
    if value["accuracy"] not in cases:
        raise FiguresError(f"{here}: no accuracy case {value['accuracy']!r}")
    judged = judge_case(cases[value["accuracy"]])
    side = value.get("side", "found")
    if side not in ("truth", "found", "gap"):
        raise FiguresError(f"{here}: side {side!r} is not truth, found or gap")
    if "group" in value:
        truth, found = judged.truth_groups.get(value["group"], 0.0), judged.found_groups.get(value["group"], 0.0)
    else:
        keys = T.COMPARED_ROWS[value["row"]]
        truth = sum(judged.truth_rows.get(k, 0.0) for k in keys)
        found = sum(judged.found_rows.get(k, 0.0) for k in keys)
    return {"truth": truth, "found": found, "gap": found - truth}[side]


def _pattern(text: str) -> str:
    """The words of a figure as a regex: whitespace runs match any whitespace (docs wrap lines),
    each {} a number, captured."""
    parts = []
    for piece in re.split(r"(\{\}|\s+)", text):
        if piece == "{}":
            parts.append(f"({NUMBER})")
        elif piece and piece.isspace():
            parts.append(r"\s+")
        elif piece:
            parts.append(re.escape(piece))
    return "".join(parts)


def _start_after(doc_text: str, anchor: str | None, here: str) -> int:
    if not anchor:
        return 0
    found = re.search(_pattern(anchor), doc_text)
    if not found:
        raise FiguresError(f"{here}: anchor {anchor!r} not found")
    return found.end()


def text_quote(fig: dict, doc_text: str, outputs: Outputs, here: str) -> Quote:
    start = _start_after(doc_text, fig.get("after"), here)
    found = list(re.finditer(_pattern(fig["text"]), doc_text[start:]))
    if len(found) != 1:
        raise FiguresError(f"{here}: the words {fig['text']!r} occur {len(found)} times"
                           f"{' after the anchor' if fig.get('after') else ''}; the doc should hold them once "
                           f"(edit the doc or the entry)")
    match = found[0]
    spans = [(start + match.start(g), start + match.end(g)) for g in range(1, match.re.groups + 1)]
    values = fig["values"]
    computed = [compute(v, outputs, f"{here}.values[{j}]") for j, v in enumerate(values)]
    formatted = [v.get("format", fig.get("format", "{:.1f}")).format(c) for v, c in zip(values, computed)]
    tolerances = [float(v.get("tolerance", fig["tolerance"])) for v in values]
    return Quote(here, fig["doc"], spans, [doc_text[a:b] for a, b in spans], computed, formatted, tolerances)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_quote(fig: dict, doc_text: str, outputs: Outputs, here: str) -> Quote:
    """A D4 table the doc prints: its rows against the command's table (rows up to `after layers`),
    row by row (group and module must agree, the kernel column is the doc's own), each value cell
    within the tolerance. The quote spans the table's body: a rewrite puts the command's rows there."""
    start = _start_after(doc_text, fig["table_after"], here)
    lines = doc_text[start:].split("\n")
    first = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if first is None:
        raise FiguresError(f"{here}: no table after the anchor")
    end = first
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    body_start = start + sum(len(line) + 1 for line in lines[:first + 2])
    body_end = start + sum(len(line) + 1 for line in lines[:end]) - 1
    doc_rows = [_cells(line) for line in lines[first + 2:end]]
    table_file = outputs.folder(fig["command"]) / fig.get("file", "d4.md")
    out_lines = [line for line in table_file.read_text(encoding="utf-8").split("\n") if line.startswith("|")][2:]
    last = next((i for i, line in enumerate(out_lines) if _cells(line)[0] == fig.get("last_row", "after layers (ms)")), None)
    if last is None:
        raise FiguresError(f"{here}: {table_file.name} of {fig['command']!r} has no row {fig.get('last_row', 'after layers (ms)')!r}")
    out_lines = [line for line in out_lines[:last + 1] if _kept(_cells(line), fig.get("rows", "all"))]
    out_rows = [_cells(line) for line in out_lines]
    quoted, computed, formatted, tolerances = [], [], [], []
    if [r[:2] for r in doc_rows] != [r[:2] for r in out_rows]:
        doc_keys = [" / ".join(r[:2]) for r in doc_rows]
        out_keys = [" / ".join(r[:2]) for r in out_rows]
        first_diff = next((k for k, (a, b) in enumerate(zip(doc_keys, out_keys)) if a != b), min(len(doc_keys), len(out_keys)))
        quoted.append(f"row {first_diff + 1} {doc_keys[first_diff] if first_diff < len(doc_keys) else '(none)'}")
        computed.append(f"row {first_diff + 1} {out_keys[first_diff] if first_diff < len(out_keys) else '(none)'}")
        formatted.append(computed[0])
        tolerances.append(0.0)
    else:
        for doc_row, out_row in zip(doc_rows, out_rows):
            for doc_cell, out_cell in zip(doc_row[3:], out_row[3:]):
                quoted.append(doc_cell)
                try:
                    computed.append(_number(out_cell))
                except ValueError:
                    computed.append(out_cell)
                formatted.append(out_cell)
                tolerances.append(float(fig["tolerance"]))
    return Quote(here, fig["doc"], [(body_start, body_end)], quoted, computed, formatted, tolerances,
                 "\n".join(out_lines))


def _kept(cells: list[str], rows: str) -> bool:
    """`rows: sums` keeps a D4 table's totals (the rows in ms) and its group sums; `all` every row."""
    return rows == "all" or cells[0].endswith("(ms)") or cells[0].endswith("(ms/step)") or cells[1] == "sum"


def quote_of(fig: dict, doc_text: str, outputs: Outputs, index: int) -> Quote:
    """One figure of docs/figures.yaml (figures[index]) in `doc_text`, as quoted and as computed now."""
    label = fig.get("text") or f"table after {fig['table_after']!r}"
    here = f"{fig['doc']}: {label!r} (docs/figures.yaml figures[{index}])"
    maker = text_quote if "text" in fig else table_quote
    return maker(fig, doc_text, outputs, here)


def quotes(outputs: Outputs, figures: list[dict], indices=None) -> list[Quote]:
    """The figures (all, or those at `indices`) in their docs as they are on disk."""
    result = []
    for index in (range(len(figures)) if indices is None else indices):
        fig = figures[index]
        doc_path = REPO_ROOT / fig["doc"]
        if not doc_path.is_file():
            raise FiguresError(f"docs/figures.yaml figures[{index}]: no doc {fig['doc']}")
        result.append(quote_of(fig, doc_path.read_text(encoding="utf-8"), outputs, index))
    return result


def rewritten(doc_text: str, doc_quotes: list[Quote]) -> str:
    """The doc with every quoted figure written as computed now (tables: their body rows)."""
    edits = []
    for quote in doc_quotes:
        if quote.table_body is not None:
            edits.append((*quote.spans[0], quote.table_body))
        else:
            edits += [(a, b, text) for (a, b), text in zip(quote.spans, quote.formatted)]
    for start, end, text in sorted(edits, reverse=True):
        doc_text = doc_text[:start] + text + doc_text[end:]
    return doc_text
