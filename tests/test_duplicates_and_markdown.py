"""Nothing doubled, nothing run: a real trace with every kernel given twice (a trailing space in its
name, or copied onto another stream) is refused instead of doubling every row, a name's whitespace
does not make another kernel, and the Markdown outputs (d4.md, kernel_report.md) show a trace's
`<script>`, links and `|` as text, the tables keeping their columns.

The traces are synthetic variants of the real bundled SGLang trace, made in each test."""
from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pytest

from markdown_it import MarkdownIt

from harness.cli import main

DATA = Path(__file__).parent / "data" / "sglang-real"
FUSED = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
KERNEL = "void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, unsigned long, int*, bool, " \
    "bool, int, int)"  # one kernel of each MoE layer, renamed by the hostile variant
# the D4 kernel column keeps a name that starts with "<" up to its first "(": it holds the tag
HOSTILE_KERNEL = "<script src=data:,alert%281%29></script>|[x](javascript:alert(1)) " + KERNEL
HOSTILE_RUN = "run|<img src=x onerror=alert(1)>\n[x](javascript:alert(1)) **b** `c` \\"
# a renderer that passes HTML (CommonMark with GitHub's tables)
RENDERER = MarkdownIt("commonmark", {"html": True}).enable("table")
UNESCAPED_PIPE = re.compile(r"(?<!\\)(?:\\\\)*\|")


def _events() -> dict:
    return json.loads(gzip.decompress(FUSED.read_bytes()))


def _synthetic(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / f"synthetic-{name}-TP-0-DECODE.trace.json"
    path.write_text(json.dumps(doc))
    return path


def _kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _one_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_every_kernel_repeated_with_a_trailing_space_is_refused(tmp_path, capsys):
    """Each kernel beside a copy named "name " passed every check: every D4 row doubled, exit 0."""
    doc = _events()
    copies = [{**e, "name": e["name"] + " "} for e in _kernels(doc)]
    doc["traceEvents"] += copies
    trace = _synthetic(tmp_path, "trailing-space", doc)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "out")]) == 2
    line = _one_error(capsys)
    assert str(trace) in line and "one event given twice" in line
    assert f"({len(copies)} kernel events repeat another's name, start and duration)" in line
    assert not (tmp_path / "out" / "d4.md").exists()


def test_every_kernel_copied_onto_another_stream_is_refused(tmp_path, capsys):
    """Each kernel beside a copy on a stream of its own passed every check: every D4 row doubled."""
    doc = _events()
    copies = [{**e, "args": {**e["args"], "stream": e["args"]["stream"] + 1000}} for e in _kernels(doc)]
    doc["traceEvents"] += copies
    trace = _synthetic(tmp_path, "other-stream", doc)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "out")]) == 2
    line = _one_error(capsys)
    assert str(trace) in line and "one event copied onto another stream" in line
    streams = re.search(r"on stream (\d+) and on stream (\d+) at once", line)
    assert streams and int(streams.group(2)) == int(streams.group(1)) + 1000, line
    assert f"({len(copies)} kernel events repeat another's name, start and duration)" in line


def _d4_csv(folder: Path) -> list[list[str]]:
    with open(folder / "d4.csv", newline="") as handle:
        return list(csv.reader(handle))


def test_a_kernel_name_with_other_whitespace_is_the_same_kernel(tmp_path, capsys):
    """" fused_moe_kernel\\t" was another kernel: its own D4 rows, the whitespace in the table."""
    doc = _events()
    for event in _kernels(doc):
        event["name"] = "\t " + event["name"].replace(" ", "  \n") + " \u00a0"
    spaced = _synthetic(tmp_path, "whitespace", doc)
    assert main(["analyze", str(FUSED), "--out", str(tmp_path / "real"), "--name", "run"]) == 0
    assert main(["analyze", str(spaced), "--out", str(tmp_path / "spaced"), "--name", "run"]) == 0, \
        capsys.readouterr().err
    assert _d4_csv(tmp_path / "spaced") == _d4_csv(tmp_path / "real")


def _table_lines(markdown: str, header_start: str) -> list[str]:
    """The lines of the table whose header line starts with header_start."""
    lines = markdown.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def _cells(line: str) -> int:
    return len(UNESCAPED_PIPE.findall(line)) - 1


def _assert_shown_not_run(markdown: str) -> str:
    """No raw tag from the trace in the file, none in what a renderer that passes HTML makes of it."""
    assert "<script" not in markdown.lower() and "<img" not in markdown.lower()
    html = RENDERER.render(markdown)
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "javascript:" not in "".join(re.findall(r"href=\"[^\"]*\"", html))
    return html


def test_trace_strings_in_d4_md_and_kernel_report_md_are_text(tmp_path, capsys):
    """d4.md carried the run name raw in its header (a `|` added a column) and a kernel's `<script>` in
    its rows; kernel_report.md carried the full kernel name raw."""
    doc = _events()
    renamed = 0
    for event in _kernels(doc):
        if event["name"] == KERNEL:
            event["name"] = HOSTILE_KERNEL
            renamed += 1
    assert renamed  # the kernel is in the trace
    trace = _synthetic(tmp_path, "hostile-names", doc)
    out = tmp_path / "out"
    assert main(["analyze", str(trace), "--out", str(out), "--name", HOSTILE_RUN]) == 0, capsys.readouterr().err

    d4 = (out / "d4.md").read_text()
    html = _assert_shown_not_run(d4)
    table = _table_lines(d4, "| group |")
    assert len(table) > 10 and {_cells(line) for line in table} == {4}, table[:2]
    shown_run = HOSTILE_RUN.replace("\n", " ")
    header = re.search(r"<thead>\s*<tr>(.*?)</tr>", html, re.S).group(1)
    assert [_text(cell) for cell in re.findall(r"<th>(.*?)</th>", header)] == ["group", "module", "kernel", shown_run]
    kernel_cells = {_text(cell) for cell in re.findall(r"<td>(.*?)</td>", html)}
    assert HOSTILE_KERNEL.split("(")[0] + "…" in kernel_cells  # shown as the trace wrote it (its short form)

    report = tmp_path / "report"
    assert main(["report", str(out), "--out", str(report), "--top", "100"]) == 0, capsys.readouterr().err
    markdown = (report / "kernel_report.md").read_text()
    html = _assert_shown_not_run(markdown)
    appendix = _table_lines(markdown, "| Readable name |")
    assert {_cells(line) for line in appendix} == {4}, appendix[:2]
    assert HOSTILE_KERNEL in {_text(cell) for cell in re.findall(r"<td>(.*?)</td>", html)}


def _text(cell_html: str) -> str:
    """A rendered cell's text as a reader sees it."""
    from html import unescape

    return unescape(re.sub(r"<[^>]+>", "", cell_html)).strip()


@pytest.mark.parametrize("text, shown", [
    ("\\xff\\xfe-TP-0-DECODE", "\\xff\\xfe-TP-0-DECODE"),  # a backslash before a letter escapes nothing
    ("a\\|b", "a\\\\\\|b"),  # before punctuation it would escape the bar: both escaped
    ("ends\\", "ends\\\\"),  # at the end of a line it would be a line break
])
def test_a_backslash_is_escaped_only_where_markdown_would_read_it(text, shown):
    from analysis.markdown_text import markdown_text

    assert markdown_text(text) == shown


def test_generated_hostile_cells_render_as_written():
    """Seeded generated strings (underscore runs inside and at the edges of words, every character
    that opens Markdown, entities, tags, line breaks, non-ASCII letters and digits) each put in a
    table row by markdown_row: a CommonMark renderer with tables shows each cell's text as written
    (line breaks as spaces), without a tag or emphasis of its own. The renderer is the truth; it
    shares no code with the escaping."""
    import random
    from html import unescape

    from analysis.markdown_text import markdown_row

    renderer = MarkdownIt("commonmark").enable("table")
    pieces = [*"ab_1é<>&#;\\`*[]~|\n\r .:/!?xZ9٣", "__", "_x_", "&amp;", "&#35;", "<a", "<script>", "\\_", "**"]
    rnd = random.Random(48)
    checked = 0
    for _ in range(3000):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 12)))
        rendered = renderer.render("| h |\n|---|\n" + markdown_row([text]) + "\n")
        cells = re.findall(r"<td>(.*?)</td>", rendered, re.S)
        assert len(cells) == 1, (text, rendered)
        assert "<" not in cells[0].replace("&lt;", ""), (text, cells[0])  # no tag: no <em>, <code>, <a>
        assert unescape(cells[0]).strip() == re.sub(r"[\n\r]+", " ", text).strip(), (text, cells[0])
        checked += 1
    assert checked == 3000
