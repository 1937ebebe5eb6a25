"""`moe-harness view` keeps what the CLI and the trace say: measured in a real browser (headless
Chromium, tests/browser.py) on the bundled real two-node DeepEP run (four ranks, 11 ms decode steps
holding under 1 ms of layers).

- The step timeline is to scale: the layers' span, the longest idle gap and the GPU's busy time are
  as wide on screen as their times say (from the trace's kernels), within PX_TOLERANCE.
- Its top lane marks exposed time (one stream runs) and overlap (two or more) where the kernels say.
- The per-rank step breakdown and the stragglers table are the ones `moe-harness analyze` prints.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.attribution.overlap import merge_intervals
from analysis.pipeline import AnalysisOptions, analyze
from browser import Browser, missing_chromium
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
TWO_NODE = ROOT / "tests/data/sglang-real/ray-run/sglang_dsv3_4l_2x2_deepep-20261126-124934"
RANK, STEP = "TP0-EP0", 2  # the page draws the first rank's step; this one asked for, so the test knows it
PX_TOLERANCE = 2.0  # SVG coordinates are kept to 0.01 px; a kernel box is at least 0.6 px wide


@pytest.fixture(scope="module")
def step_kernels():
    """The drawn step's kernels and its step row, from the traces (not from the page's code)."""
    analysis = analyze([str(p) for p in sorted((TWO_NODE / "traces").glob("*.trace.json.gz"))],
                       options=AnalysisOptions(jobs=1))
    kernels = sorted((r for r in analysis.kernel_rows if (r.rank, r.step) == (RANK, STEP)), key=lambda r: r.start_us)
    step = next(s for s in analysis.step_rows if (s.rank, s.step) == (RANK, STEP))
    return kernels, step


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    why = missing_chromium()
    if why:
        pytest.fail(why)
    out = tmp_path_factory.mktemp("view-scale") / "view"
    assert main(["view", str(TWO_NODE), "--out", str(out), "--step", str(STEP), "--no-annotated-trace"]) == 0
    with Browser() as browser:
        loaded = browser.load((out / "view.html").as_uri())
        assert loaded.console_errors == []
        yield browser


def _boxes(page: Browser, selector: str) -> list[dict]:
    """left / width and data-* of each element the selector finds in the page's first timeline."""
    return page.evaluate(f"""[...document.querySelector('svg.timeline').querySelectorAll({selector!r})].map(e => {{
        const b = e.getBoundingClientRect(); return {{left: b.left, width: b.width, ...e.dataset}}; }})""")


def _streams_running(kernels, t: float) -> int:
    return len({k.stream for k in kernels if k.start_us <= t < k.start_us + k.busy_us})


def test_the_step_timeline_is_drawn_to_scale(page, step_kernels):
    kernels, step = step_kernels
    frame = _boxes(page, "rect.lane-bg")[0]  # a lane's backdrop spans the drawn time axis
    px_per_us = frame["width"] / step.step_us
    assert frame["width"] > 800  # the picture is big enough to read

    def x_of(t_us: float) -> float:
        return frame["left"] + (t_us - step.start_us) * px_per_us

    layer = [k for k in kernels if k.section == "layer"]
    layers_start, layers_end = layer[0].start_us, max(k.start_us + k.busy_us for k in layer)
    drawn = [b for b in _boxes(page, "rect.kernel") if int(b["layer"]) >= 0]
    left, right = min(b["left"] for b in drawn), max(b["left"] + b["width"] for b in drawn)
    assert right - left == pytest.approx((layers_end - layers_start) * px_per_us, abs=PX_TOLERANCE), \
        f"the layers' {layers_end - layers_start:.0f} us of a {step.step_us:.0f} us step drawn {right - left:.0f} px " \
        f"of {frame['width']:.0f}"
    assert left == pytest.approx(x_of(layers_start), abs=PX_TOLERANCE)

    busy = merge_intervals((k.start_us, k.start_us + k.busy_us) for k in kernels)
    gap_us, gap_start = max((b[0] - a[1], a[1]) for a, b in zip(busy, busy[1:]))
    widest = max(_boxes(page, "g.idle-gap rect"), key=lambda b: b["width"])
    assert gap_us > 1000 and widest["width"] == pytest.approx(gap_us * px_per_us, abs=PX_TOLERANCE), \
        f"an idle gap of {gap_us:.0f} us drawn {widest['width']:.0f} px"
    assert widest["left"] == pytest.approx(x_of(gap_start), abs=PX_TOLERANCE)


def test_the_top_lane_marks_exposed_and_overlapped_time_where_the_kernels_run(page, step_kernels):
    kernels, step = step_kernels
    frame = _boxes(page, "rect.lane-bg")[0]
    px_per_us = frame["width"] / step.step_us
    pieces = _boxes(page, "rect.coverage")
    busy_any_us = sum(b - a for a, b in merge_intervals((k.start_us, k.start_us + k.busy_us) for k in kernels))
    assert sum(p["width"] for p in pieces) == pytest.approx(busy_any_us * px_per_us, abs=PX_TOLERANCE)
    assert busy_any_us == pytest.approx(step.busy_any_us, abs=0.01)  # the GPU-busy figure steps.csv has
    kinds = {p["kind"] for p in pieces}
    assert kinds == {"exposed", "overlap"}
    wide = [p for p in pieces if p["width"] >= 0.2]  # over 2 us: its middle is clear of the 0.01 px rounding
    assert {p["kind"] for p in wide} == {"exposed", "overlap"}
    for p in wide:  # the middle of each piece: one stream running if exposed, several if overlap
        t_us = step.start_us + (p["left"] + p["width"] / 2 - frame["left"]) / px_per_us
        running = _streams_running(kernels, t_us)
        assert (running == 1) if p["kind"] == "exposed" else (running >= 2), (p, running)


def _cli_table(markdown: str, heading_start: str) -> list[list[str]]:
    """The Markdown table printed under the line starting with heading_start: header, then rows."""
    lines = markdown.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(heading_start))
    table = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            table.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return table


@pytest.mark.parametrize("heading_start, css", [("Where each rank's step goes", "rank-steps"),
                                                ("Stragglers (", "stragglers")])
def test_the_page_shows_the_table_the_cli_prints(page, heading_start, css, capsys):
    assert main(["analyze", str(TWO_NODE)]) == 0
    printed = _cli_table(capsys.readouterr().out, heading_start)
    assert len(printed) >= 5  # the header and at least four ranks / stragglers
    for lang in ("en", "zh"):
        shown = page.evaluate(f"""[...document.querySelectorAll('table.{css}.{lang} tr')].map(tr =>
            [...tr.cells].map(c => c.textContent))""")
        if lang == "en":
            assert shown == printed
        else:  # the headings in Chinese, the figures as printed
            assert shown[1:] == printed[1:] and len(shown[0]) == len(printed[0])
