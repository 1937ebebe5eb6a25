"""Text the project did not write (kernel names, labels, file names, run names) put into Markdown so
that it reads as written and does nothing else.

Why: a trace's strings reach d4.md, compare.md and kernel_report.md. Raw, `<script>` in a kernel name
runs in a renderer that passes HTML, `[x](javascript:...)` becomes a link, and a `|` or a line break
splits the table row it sits in. The HTML page escapes everything it shows (html.escape); the
Markdown outputs escape with this one module. A `<` that would open a tag, a comment or an autolink
(one before a letter, `/`, `!` or `?`: CommonMark's only ways in) and an `&` that would start an
entity become entities (every renderer shows them as the characters; `<=` stays as written); the
other characters that open Markdown (a `\\` before punctuation or at the end: elsewhere it is shown as
written, so a file name's `\\xff` stays readable; a backtick, `*`, `[`, `]`, `~`, `|`, and underscores at
a word's edge where two such runs could pair into emphasis: `_fwd_kernel` stays as written) get a
backslash; line breaks become spaces. A C++ template still renders as written: `foo<int>`.
"""
from __future__ import annotations

import re

# A backslash that escapes (before ASCII punctuation, or ending the text: a line break), a character
# that opens Markdown, a "<" that opens a tag or an autolink, an "&" that starts an entity, or a run of
# line breaks (every character str.splitlines breaks at). Underscores are the second pass's.
_SPECIAL = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)|[`*\[\]~|]|<(?=[A-Za-z/!?])|&(?=#?\w+;)"
                      r"|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]+")
_ENTITIES = {"<": "&lt;", "&": "&amp;"}
# What a code span cannot hold as written: a backtick ends it, `|` and line breaks break a table, and a
# tag's `<` would be raw in the file (a code span shows an entity as written, not as the character).
_NOT_IN_CODE_SPAN = re.compile(r"[`|\n\r\v\f\x1c-\x1e\x85\u2028\u2029]|<[A-Za-z/!?]")
# Underscore runs: every run, a run inside a word (a letter or digit on both sides: [^\W_] is what
# str.isalnum takes, code point for code point), a run at a word's edge (the whole run: a run's first
# underscore follows no word character, or its last precedes none).
_RUNS = re.compile(r"_+")
_RUNS_INSIDE_WORDS = re.compile(r"(?<=[^\W_])_+(?=[^\W_])")
_RUNS_AT_EDGES = re.compile(r"(?<!\w)_+|_+(?!\w)")


def _escaped(match: re.Match) -> str:
    first = match.group()[0]
    if first in _ENTITIES:
        return _ENTITIES[first]
    if first in "\\`*[]~|":
        return "\\" + first
    return " "  # line breaks


def _escaped_run(match: re.Match) -> str:
    return "\\_" * len(match.group())


def markdown_text(text: object) -> str:
    """The text as Markdown that shows it as written: no tag, link, image, code span, emphasis, table
    cell boundary or line break of its own."""
    text = str(text)
    shown = _SPECIAL.sub(_escaped, text)
    # emphasis takes two runs at word edges (one opens, one closes): one alone stays as written. What
    # the first pass put beside a run is no letter or digit, as what it replaced was not.
    if "_" in text and len(_RUNS.findall(text)) - len(_RUNS_INSIDE_WORDS.findall(text)) > 1:
        shown = _RUNS_AT_EDGES.sub(_escaped_run, shown)
    return shown


def markdown_code(text: object) -> str:
    """The text shown as code: a code span where one holds it as written, else the text escaped inside
    <code> tags (a name with `<`, `|` or a backtick)."""
    text = str(text)
    if text and not _NOT_IN_CODE_SPAN.search(text) and text.strip(" ") == text:
        return f"`{text}`"
    return f"<code>{markdown_text(text)}</code>"


def markdown_row(cells: list[object]) -> str:
    """One table row, each cell escaped as markdown_text."""
    return "| " + " | ".join(markdown_text(cell) for cell in cells) + " |"
