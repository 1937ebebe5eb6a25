"""A tiny document model rendered both as Markdown and as self-contained HTML.

Why: the kernel report is written twice (markdown for review, HTML with plots embedded); building
it once as blocks keeps the two in step.

Headings and paragraphs are the report's own markup: `code` and **bold**, a backslash keeping the
next character as it is; text from the user's files (kernel names, file names, labels) enters it
through `literal` or `code`. Table cells are plain text (or Code). Both renderers escape every piece
of text (Markdown through analysis.markdown_text, HTML through html.escape), so no string from a
trace becomes a tag, a link or a table cell of its own.
"""
from __future__ import annotations

import base64
import html
import re

import msgspec

from analysis.markdown_text import markdown_code, markdown_text


class Heading(msgspec.Struct, frozen=True):
    level: int
    text: str  # markup


class Para(msgspec.Struct, frozen=True):
    text: str  # markup


class Code(msgspec.Struct, frozen=True):
    """A table cell shown as code (a full kernel signature)."""

    text: str


class Table(msgspec.Struct, frozen=True):
    headers: list[str]
    rows: list[list[str | Code]]  # plain text, not markup


class Image(msgspec.Struct, frozen=True):
    name: str  # file name, e.g. roofline_physical.png
    alt: str
    png: bytes


Block = Heading | Para | Table | Image


_MARKUP_CHARS = re.compile(r"[\\`*]")
_MARKUP = re.compile(r"\\(.)|`|\*\*", re.S)


def literal(text: object) -> str:
    """Text put into a heading or paragraph as written: the markup does not apply to it."""
    return _MARKUP_CHARS.sub(lambda m: "\\" + m.group(), str(text))


def code(text: object) -> str:
    """Text put into a heading or paragraph as code, as written."""
    return "`" + literal(text) + "`"


def _runs(markup: str) -> list[tuple[str, bool, bool]]:
    """The markup as (text, is code, is bold) runs; `**` inside code is text."""
    runs: list[tuple[str, bool, bool]] = []
    text: list[str] = []
    in_code = in_bold = False
    pos = 0
    for match in _MARKUP.finditer(markup):
        text.append(markup[pos:match.start()])
        pos = match.end()
        token = match.group()
        if match.group(1) is not None or (token == "**" and in_code):
            text.append(match.group(1) if match.group(1) is not None else token)
            continue
        runs.append(("".join(text), in_code, in_bold))
        text = []
        if token == "`":
            in_code = not in_code
        else:
            in_bold = not in_bold
    runs.append(("".join(text) + markup[pos:], in_code, in_bold))
    return [run for run in runs if run[0]]


def _md_inline(markup: str) -> str:
    out: list[str] = []
    bold = False
    for text, is_code, is_bold in _runs(markup):
        if is_bold != bold:
            out.append("**")
            bold = is_bold
        out.append(markdown_code(text) if is_code else markdown_text(text))
    return "".join(out) + ("**" if bold else "")


def _md_cell(cell: str | Code) -> str:
    return markdown_code(cell.text) if isinstance(cell, Code) else markdown_text(cell)


def to_markdown(blocks: list[Block], image_dir: str) -> str:
    """Images are referenced as image_dir/name (the caller writes the PNG files there)."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {_md_inline(block.text)}\n")
        elif isinstance(block, Para):
            out.append(_md_inline(block.text) + "\n")
        elif isinstance(block, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            out.append("|" + "|".join("---" for _ in block.headers) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows)
            out.append("")
        elif isinstance(block, Image):
            out.append(f"![{markdown_text(block.alt)}]({image_dir}/{block.name})\n")
    return "\n".join(out)


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;"
    "text-align:left;vertical-align:top}th{background:#f3f3f3}code{font-size:12px;word-break:break-all}"
    "img{max-width:100%;margin:0.5em 0}"
)


def to_html(blocks: list[Block], title: str) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{_inline(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            parts.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
            body = "".join("<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>" for row in block.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.png).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(block.alt)}' data-name='{html.escape(block.name)}' "
                         f"src='data:image/png;base64,{data}'><figcaption>{html.escape(block.alt)}</figcaption></figure>")
    parts.append("</body></html>")
    return "".join(parts)


def _inline(markup: str) -> str:
    """The markup's runs escaped, `code` and **bold** as tags."""
    out: list[str] = []
    bold = False
    for text, is_code, is_bold in _runs(markup):
        if is_bold != bold:
            out.append("<b>" if is_bold else "</b>")
            bold = is_bold
        out.append(f"<code>{html.escape(text)}</code>" if is_code else html.escape(text))
    return "".join(out) + ("</b>" if bold else "")


def _html_cell(cell: str | Code) -> str:
    return f"<code>{html.escape(cell.text)}</code>" if isinstance(cell, Code) else html.escape(str(cell))
