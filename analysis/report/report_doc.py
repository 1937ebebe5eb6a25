"""A tiny document model rendered both as Markdown and as self-contained HTML.

Why: the kernel report is written twice (markdown for review, HTML with plots embedded); building
it once as blocks keeps the two in step.
"""
from __future__ import annotations

import base64
import html

import msgspec


class Heading(msgspec.Struct, frozen=True):
    level: int
    text: str


class Para(msgspec.Struct, frozen=True):
    text: str


class Table(msgspec.Struct, frozen=True):
    headers: list[str]
    rows: list[list[str]]


class Image(msgspec.Struct, frozen=True):
    name: str  # file name, e.g. roofline_physical.png
    alt: str
    png: bytes


Block = Heading | Para | Table | Image


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], image_dir: str) -> str:
    """Images are referenced as image_dir/name (the caller writes the PNG files there)."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}\n")
        elif isinstance(block, Para):
            out.append(block.text + "\n")
        elif isinstance(block, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            out.append("|" + "|".join("---" for _ in block.headers) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows)
            out.append("")
        elif isinstance(block, Image):
            out.append(f"![{block.alt}]({image_dir}/{block.name})\n")
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
            parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            parts.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
            body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.png).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(block.alt)}' data-name='{html.escape(block.name)}' "
                         f"src='data:image/png;base64,{data}'><figcaption>{html.escape(block.alt)}</figcaption></figure>")
    parts.append("</body></html>")
    return "".join(parts)


def _inline(text: str) -> str:
    """Escape, then turn `code` spans and **bold** into tags (the only markup the report uses)."""
    escaped = html.escape(str(text))
    pieces = escaped.split("`")
    for i in range(1, len(pieces), 2):
        pieces[i] = f"<code>{pieces[i]}</code>"
    joined = "".join(pieces)
    bold = joined.split("**")
    for i in range(1, len(bold), 2):
        bold[i] = f"<b>{bold[i]}</b>"
    return "".join(bold)
