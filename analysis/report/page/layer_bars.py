"""Per layer, a stacked bar of its time by D4 group; dense and MoE layers in panels of their own.

A bar's segment is the group's busy time in that layer, summed per (rank, step) and averaged over
the used steps and ranks that have the layer: the D4 cell's definition, per layer instead of per
row. A layer is MoE when it runs any moe or combine/share overlap kernel.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from analysis.attribution.rows import SECTION_LAYER, KernelRow
from analysis.report.annotated_trace import moe_layers
from analysis.report.page.style import Style
from analysis.report.page.svg import bilingual, el, esc, num, title
from analysis.tables.d4 import GROUP_ORDER, group_label

DENSE, MOE = "dense", "moe"
PANEL_H, TOP, BOTTOM, LEFT = 220, 14, 34, 52


@dataclass
class LayerBar:
    layer: int
    kind: str  # dense | moe
    group_us: dict[str, float]  # mean per used (rank, step)

    @property
    def total_us(self) -> float:
        return sum(self.group_us.values())


def layer_bars(rows: list[KernelRow], used: set[tuple[str, int]]) -> list[LayerBar]:
    moe = moe_layers(rows)
    sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    samples: dict[int, set[tuple[str, int]]] = defaultdict(set)
    kinds: dict[int, bool] = defaultdict(bool)
    for r in rows:
        if r.section != SECTION_LAYER or (r.rank, r.step) not in used:
            continue
        sums[r.layer][r.group] += r.busy_us
        samples[r.layer].add((r.rank, r.step))
        kinds[r.layer] |= (r.rank, r.step, r.layer) in moe
    return [LayerBar(layer, MOE if kinds[layer] else DENSE, {g: us / len(samples[layer]) for g, us in sums[layer].items()})
            for layer in sorted(sums)]


def ordered_groups(bars: list[LayerBar]) -> list[str]:
    present = {g for b in bars for g in b.group_us}
    known = [g for g in GROUP_ORDER if g in present]
    return known + sorted(present - set(known))


def _panel(bars: list[LayerBar], kind: str, groups: list[str], top_us: float, style: Style, x0: float,
           bar_w: float) -> tuple[str, float]:
    """One panel's SVG (at x0) and its width."""
    gap = max(2.0, bar_w * 0.25)
    width = len(bars) * (bar_w + gap) + gap
    scale = (PANEL_H - TOP - BOTTOM) / top_us if top_us else 0.0
    base_y = PANEL_H - BOTTOM
    words = "moe_layers" if kind == MOE else "dense_layers"
    parts = [el("text", bilingual(style, words, tag="tspan"), x=x0 + width / 2, y=10.0, class_="panel-title",
                text_anchor="middle")]
    parts.append(el("line", x1=x0, y1=base_y, x2=x0 + width, y2=base_y, class_="axis"))
    for i, bar in enumerate(bars):
        x = x0 + gap + i * (bar_w + gap)
        y = base_y
        segments = []
        for group in groups:
            us = bar.group_us.get(group, 0.0)
            if us <= 0:
                continue
            h = us * scale
            y -= h
            segments.append(el("rect", title(f"layer {bar.layer} ({kind}): {group} {us:.1f} us"), class_="segment",
                               data_group=group, x=x, y=y, width=bar_w, height=h, fill=style.group_colour(group)))
        label = el("text", f"L{bar.layer}", x=x + bar_w / 2, y=base_y + 13.0, class_="tick", text_anchor="middle")
        total = el("text", f"{bar.total_us:.0f}", x=x + bar_w / 2, y=y - 3.0, class_="value", text_anchor="middle")
        parts.append(el("g", "".join(segments) + label + (total if bar_w >= 18 else ""), class_="layer-bar",
                        data_layer=bar.layer, data_kind=kind, data_total_us=f"{bar.total_us:.3f}"))
    return "".join(parts), width


def layer_bars_svg(bars: list[LayerBar], style: Style) -> str:
    """Dense and MoE panels side by side on one y scale, with the groups' legend."""
    groups = ordered_groups(bars)
    top_us = max((b.total_us for b in bars), default=0.0) * 1.08
    bar_w = max(6.0, min(40.0, 640.0 / max(1, len(bars))))
    parts, x = [], float(LEFT)
    for tick in (0.0, 0.5, 1.0):
        y = PANEL_H - BOTTOM - tick * (PANEL_H - TOP - BOTTOM)
        parts.append(el("text", f"{tick * top_us:.0f}", x=LEFT - 6.0, y=y + 4.0, class_="tick", text_anchor="end"))
    parts.append(el("text", "us", x=LEFT - 6.0, y=PANEL_H - BOTTOM + 26.0, class_="tick", text_anchor="end"))
    for kind in (DENSE, MOE):
        members = [b for b in bars if b.kind == kind]
        if members:
            body, width = _panel(members, kind, groups, top_us, style, x, bar_w)
            parts.append(el("g", body, class_="panel", data_kind=kind))
            x += width + 30.0
    legend_y = PANEL_H + 6.0
    lx = float(LEFT)
    for group in groups:
        parts.append(el("rect", x=lx, y=legend_y, width=10.0, height=10.0, fill=style.group_colour(group)))
        parts.append(el("text", el("tspan", esc(group), class_="en") + el("tspan", esc(group_label(group, "zh")), class_="zh"),
                        x=lx + 14.0, y=legend_y + 9.0, class_="legend"))
        lx += 24.0 + 7.0 * len(group)
    width = max(x, lx) + 10.0
    height = PANEL_H + 24.0
    return el("svg", "".join(parts), class_="layer-bars", width=num(width), height=num(height),
              viewBox=f"0 0 {num(width)} {num(height)}", xmlns="http://www.w3.org/2000/svg")
