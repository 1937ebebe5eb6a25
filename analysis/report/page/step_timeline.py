"""One step as a timeline: a lane per stream, each kernel a box coloured by its module, a line where
each layer starts, so the shared experts on their own stream show beside the combine / experts.

Two views of the step. scaled_timeline.py draws it to scale, the view a reader trusts for where the
step's time goes. This module draws the second, squeezed view and the parts both views share: a
decode step is mostly host gaps around its GPU work (the bundled 7 ms steps hold 1.4 ms of layers),
so to tell the kernels apart, idle stretches longer than GAP_US, when no stream runs a kernel, are
drawn GAP_PX wide and labelled with their length; everything else is to scale.
"""
from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from dataclasses import dataclass

from analysis.attribution.rows import SECTION_LAYER, KernelRow, StepRow
from analysis.errors import AnalysisError
from analysis.report.annotated_trace import moe_layers
from analysis.report.page.stream_coverage import IDLE, coverage
from analysis.report.page.style import Style
from analysis.report.page.svg import el, esc, num, title
from analysis.tables.d4 import GROUP_ORDER

GAP_US = 30.0
GAP_PX = 16
TARGET_PX = 1100.0  # fits a 1280-pixel window
LANE_H, LANE_GAP, LABEL_W, TOP = 22, 6, 92, 30
MIN_BOX_PX = 0.6  # a kernel shorter than this still shows
COVER_H = 14  # the exposed / overlap lane over the streams
LABEL_CHAR_PX = 6.0  # a layer label's width per character (10 px bold)


def pick_step(step_rows: list[StepRow], used: set[tuple[str, int]], rank: str | None = None,
              step: int | None = None) -> StepRow:
    """The step to draw: the one asked for, else on the first rank (or the one asked for) the used step
    whose wall time is the median, a typical step. A rank or step not there is an error naming the choices."""
    candidates = [s for s in step_rows if (s.rank, s.step) in used]
    ranks = sorted({s.rank for s in candidates})
    if not candidates:
        raise AnalysisError("no used step to draw")
    if rank is not None and rank not in ranks:
        raise AnalysisError(f"--rank {rank}: no such rank among {', '.join(ranks)}")
    mine = [s for s in candidates if s.rank == (rank or ranks[0])]
    if step is not None:
        hit = [s for s in mine if s.step == step]
        if not hit:
            raise AnalysisError(f"--step {step}: not a used step of rank {mine[0].rank} "
                                f"(used: {', '.join(str(s.step) for s in mine)})")
        return hit[0]
    middle = statistics.median_low([s.step_us for s in mine])
    return next(s for s in mine if s.step_us == middle)


@dataclass
class _Axis:
    """Time to x, with long idle gaps drawn GAP_PX wide."""

    starts: list[float]  # per block: first time
    ends: list[float]
    xs: list[float]  # per block: x of its start
    us_to_px: float
    width: float

    def x(self, t: float) -> float:
        i = max(0, bisect.bisect_right(self.starts, t) - 1)
        return self.xs[i] + (min(t, self.ends[i]) - self.starts[i]) * self.us_to_px


def _axis(rows: list[KernelRow], x0: float) -> tuple[_Axis, list[tuple[float, float, float]]]:
    """The axis and the gaps it compresses: (x, start_us, length_us)."""
    spans = sorted((r.start_us, r.start_us + r.busy_us) for r in rows)
    blocks: list[list[float]] = []
    for start, end in spans:
        if blocks and start - blocks[-1][1] <= GAP_US:
            blocks[-1][1] = max(blocks[-1][1], end)
        else:
            blocks.append([start, end])
    busy = sum(e - s for s, e in blocks) or 1.0
    us_to_px = min(10.0, max(0.05, (TARGET_PX - GAP_PX * (len(blocks) - 1)) / busy))
    xs, gaps, x = [], [], x0
    for i, (start, end) in enumerate(blocks):
        if i:
            gaps.append((x, blocks[i - 1][1], start - blocks[i - 1][1]))
            x += GAP_PX
        xs.append(x)
        x += (end - start) * us_to_px
    return _Axis([b[0] for b in blocks], [b[1] for b in blocks], xs, us_to_px, x), gaps


def lanes_of(rows: list[KernelRow]) -> list[int]:
    """The step's streams, busiest first (the main stream on top)."""
    busy: dict[int, float] = defaultdict(float)
    for r in rows:
        busy[r.stream] += r.busy_us
    return sorted(busy, key=lambda s: (-busy[s], s))


def kernel_lanes(rows: list[KernelRow], lane_y: dict[int, float], x_of, us_to_px: float, x_end: float,
                 style: Style) -> str:
    """A lane per stream (lane_y: its top), each kernel a box at x_of(start), us_to_px wide per us;
    the lane's backdrop runs from LABEL_W to x_end."""
    parts = []
    for stream, y in lane_y.items():
        boxes = [el("rect", title(f"{r.kernel_name[:160]}\n{r.group} / {r.module}, "
                                  + (f"layer {r.layer}" if r.section == SECTION_LAYER else f"{r.section} layers")
                                  + f", {r.busy_us:.1f} us"),
                    class_="kernel", data_group=r.group, data_module=r.module, data_layer=r.layer,
                    x=x_of(r.start_us), y=float(y), width=max(MIN_BOX_PX, r.busy_us * us_to_px), height=float(LANE_H),
                    fill=style.module_colour(r.group, r.module))
                 for r in rows if r.stream == stream]
        label = el("text", f"stream {stream}", x=4.0, y=y + LANE_H / 2 + 4, class_="lane-label")
        backdrop = el("rect", x=float(LABEL_W), y=float(y), width=x_end - LABEL_W, height=float(LANE_H),
                      class_="lane-bg")
        parts.append(el("g", backdrop + label + "".join(boxes), class_="lane", data_stream=stream))
    return "".join(parts)


def coverage_lane(pieces: list[tuple[float, float, str]], x_of, y: float, style: Style) -> str:
    """The lane over the streams: exposed time (one stream runs) and overlap (two or more), each of
    stream_coverage.coverage's pieces as wide as x_of says; idle time is left blank here."""
    parts = [el("text", "GPU", x=4.0, y=y + COVER_H - 3.0, class_="lane-label")]
    for start, end, kind in pieces:
        if kind != IDLE:
            parts.append(el("rect", title(f"{kind} {end - start:.1f} us"), class_="coverage", data_kind=kind,
                            x=x_of(start), y=y, width=x_of(end) - x_of(start), height=float(COVER_H),
                            fill=style.timeline_colour(kind)))
    return el("g", "".join(parts), class_="coverage-lane")


def layer_borders(rows: list[KernelRow], step: StepRow, x_of, top: float, bottom: float, label_y: float,
                  fit: bool = False) -> str:
    """A dashed line where each layer starts, labelled `L<n> dense|MoE`. `fit`: a label wider than the
    room before the next layer's line shortens to `L<n>`, or is left to the tooltip."""
    first: dict[int, float] = {}
    for r in rows:
        if r.section == SECTION_LAYER:
            first.setdefault(r.layer, r.start_us)
    moe = moe_layers(rows)
    starts = sorted(first.items())
    parts = []
    for i, (layer, start) in enumerate(starts):
        x = x_of(start)
        kind = "MoE" if (step.rank, step.step, layer) in moe else "dense"
        room = x_of(starts[i + 1][1]) - x if fit and i + 1 < len(starts) else float("inf")
        text = next((t for t in (f"L{layer} {kind}", f"L{layer}") if LABEL_CHAR_PX * len(t) + 4 <= room), "")
        label = el("text", text, x=x + 2, y=label_y, class_="layer-label") if text else ""
        parts.append(el("g", title(f"layer {layer}, {kind}") + el("line", x1=x, y1=top, x2=x, y2=bottom,
                                                                  class_="layer-line") + label,
                        class_="layer-border", data_layer=layer, data_kind=kind.lower()))
    return "".join(parts)


def timeline_svg(rows: list[KernelRow], step: StepRow, style: Style) -> str:
    """The squeezed view. rows: the kernel rows of `step` (one rank, one step)."""
    rows = sorted(rows, key=lambda r: r.start_us)
    if not rows:
        raise AnalysisError(f"rank {step.rank} step {step.step} has no kernels to draw")
    axis, gaps = _axis(rows, float(LABEL_W))
    lanes = lanes_of(rows)
    lanes_top = TOP + COVER_H + LANE_GAP
    lane_y = {stream: float(lanes_top + i * (LANE_H + LANE_GAP)) for i, stream in enumerate(lanes)}
    height = lanes_top + len(lanes) * (LANE_H + LANE_GAP) + 8
    parts = [coverage_lane(coverage(rows, step.start_us, step.end_us), axis.x, float(TOP), style),
             kernel_lanes(rows, lane_y, axis.x, axis.us_to_px, axis.width, style)]
    labelled_x = -1e9
    for x, start, length in gaps:
        label = ""
        if x - labelled_x >= 30:  # neighbouring gaps keep their length in the tooltip only
            label = el("text", f"{length:.0f}", x=x + GAP_PX / 2, y=float(height + 10), class_="gap-label",
                       text_anchor="middle")
            labelled_x = x
        parts.append(el("g", el("rect", title(f"idle {length:.0f} us"), x=x, y=float(TOP - 4), width=float(GAP_PX),
                                height=float(height - TOP), class_="gap") + label, class_="idle-gap"))
    parts.append(layer_borders(rows, step, axis.x, float(TOP - 12), float(height - 4), float(TOP - 16)))
    width, height = axis.width + 12, height + 14  # room for the gap lengths under the lanes
    return el("svg", "".join(parts), class_="timeline squeezed", width=num(width), height=num(float(height)),
              viewBox=f"0 0 {num(width)} {num(float(height))}", xmlns="http://www.w3.org/2000/svg")


def module_legend(rows: list[KernelRow], style: Style) -> str:
    """The modules the step runs, by group, each with its colour (HTML)."""
    seen = dict.fromkeys((r.group, r.module) for r in rows)
    order = {g: i for i, g in enumerate(GROUP_ORDER)}
    items = []
    for group, module in sorted(seen, key=lambda gm: (order.get(gm[0], len(order)), gm[0])):
        swatch = el("span", "", class_="swatch", style=f"background:{style.module_colour(group, module)}")
        items.append(el("span", swatch + esc(f"{group} / {module}"), class_="legend-item"))
    return el("div", "".join(items), class_="legend")
