"""One step drawn to scale: x proportional to time from the step's first kernel to its last.

Why: the squeezed view (step_timeline.py) makes the layers look like most of a decode step when
they take a tenth of it; here an idle stretch is as wide as its time, so the host gaps that make up
most of the step look it. A top lane says, moment by moment, whether the GPU is idle, runs one
stream (exposed: that work adds to the step) or several (overlap: all but one hidden under the
others; stream_coverage.py); a bracket gives the layers' span against the whole step.
"""
from __future__ import annotations

from analysis.attribution.rows import SECTION_LAYER, KernelRow, StepRow
from analysis.errors import AnalysisError
from analysis.report.page.step_timeline import (COVER_H, GAP_US, LABEL_W, LANE_GAP, LANE_H, TARGET_PX,
                                                coverage_lane, kernel_lanes, layer_borders, lanes_of)
from analysis.report.page.stream_coverage import IDLE, coverage
from analysis.report.page.style import Style
from analysis.report.page.svg import bilingual_text, el, num, title

TOP = 54  # the layers' bracket and the layer labels above the lanes
TICK_COUNTS = (1, 2, 5)  # tick spacing: 1, 2 or 5 times a power of ten us
MAX_TICKS = 12
IDLE_LABEL_PX = 64  # an idle stretch at least this wide says its length; narrower ones in the tooltip


def _tick_us(span_us: float) -> float:
    """The smallest 1 / 2 / 5 x 10^n us spacing giving at most MAX_TICKS ticks over span_us."""
    power = 1.0
    while True:
        for count in TICK_COUNTS:
            if span_us / (count * power) <= MAX_TICKS:
                return count * power
        power *= 10


def scaled_timeline_svg(rows: list[KernelRow], step: StepRow, style: Style) -> str:
    """rows: the kernel rows of `step` (one rank, one step)."""
    rows = sorted(rows, key=lambda r: r.start_us)
    if not rows or step.step_us <= 0:
        raise AnalysisError(f"rank {step.rank} step {step.step} has no kernels to draw")
    us_to_px = TARGET_PX / step.step_us
    x0, x_end = float(LABEL_W), LABEL_W + TARGET_PX

    def x_of(t: float) -> float:
        return x0 + (t - step.start_us) * us_to_px

    lanes = lanes_of(rows)
    lanes_top = TOP + COVER_H + LANE_GAP
    lane_y = {stream: float(lanes_top + i * (LANE_H + LANE_GAP)) for i, stream in enumerate(lanes)}
    bottom = lanes_top + len(lanes) * (LANE_H + LANE_GAP)
    pieces = coverage(rows, step.start_us, step.end_us)

    parts = [coverage_lane(pieces, x_of, float(TOP), style),
             kernel_lanes(rows, lane_y, x_of, us_to_px, x_end, style)]
    for start, end, kind in pieces:  # drawn over the lanes' backdrop: no kernel runs there
        if kind == IDLE and end - start > GAP_US:
            width = (end - start) * us_to_px
            label = (bilingual_text(style, "idle_us", {"us": end - start}, x=x_of(start) + width / 2,
                                    y=float(bottom + 12), class_="gap-label", text_anchor="middle")
                     if width >= IDLE_LABEL_PX else "")
            parts.append(el("g", el("rect", title(f"idle {end - start:.0f} us"), x=x_of(start), y=float(TOP),
                                    width=width, height=float(bottom - TOP), class_="gap scaled-gap",
                                    fill=style.timeline_colour(IDLE)) + label,
                            class_="idle-gap", data_us=f"{end - start:.1f}"))
    parts.append(_layers_span(rows, step, x_of, style))
    parts.append(layer_borders(rows, step, x_of, float(TOP - 12), float(bottom - 4), float(TOP - 16), fit=True))
    parts.append(_axis(step, x_of, float(bottom + 18)))
    width, height = x_end + 12, bottom + 44
    return el("svg", "".join(parts), class_="timeline to-scale", width=num(width), height=num(float(height)),
              viewBox=f"0 0 {num(width)} {num(float(height))}", xmlns="http://www.w3.org/2000/svg",
              data_us_per_px=f"{1 / us_to_px:.3f}")


def _layers_span(rows: list[KernelRow], step: StepRow, x_of, style: Style) -> str:
    """A bracket from the first layer kernel's start to the last one's end, with its share of the step."""
    layer_rows = [r for r in rows if r.section == SECTION_LAYER]
    if not layer_rows:
        return ""
    start = layer_rows[0].start_us
    end = max(r.start_us + r.busy_us for r in layer_rows)
    left, right = x_of(start), x_of(end)
    text_x = min(left, x_of(step.end_us) - 330)  # keep the words inside the picture
    label = bilingual_text(style, "layers_span", {"layers_us": end - start, "step_us": step.step_us,
                                                  "share_pct": 100 * (end - start) / step.step_us},
                           x=max(float(LABEL_W), text_x), y=12.0, class_="layers-span-label")
    return el("g", el("rect", title(f"layers {end - start:.0f} us"), x=left, y=17.0, width=right - left, height=4.0,
                      class_="layers-span") + label, class_="layers-bracket", data_us=f"{end - start:.1f}")


def _axis(step: StepRow, x_of, y: float) -> str:
    tick = _tick_us(step.step_us)
    parts = [el("line", x1=x_of(step.start_us), y1=y, x2=x_of(step.end_us), y2=y, class_="axis")]
    for i in range(int(step.step_us // tick) + 1):
        x = x_of(step.start_us + i * tick)
        parts.append(el("line", x1=x, y1=y, x2=x, y2=y + 4, class_="axis")
                     + el("text", f"{i * tick / 1000:g} ms", x=x, y=y + 15, class_="tick", text_anchor="middle"))
    return el("g", "".join(parts), class_="time-axis")
