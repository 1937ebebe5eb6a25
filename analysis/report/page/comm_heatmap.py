"""Per MoE layer and rank, each collective's wait against its transfer, as a heat map.

A cell is one rank's copies of one layer's collective (dispatch, combine, all-to-all...), over the
used steps: wait and transfer us per step (analysis/attribution/comm_split.py defines the split),
coloured by the wait (darker = waited longer, the scale shared by the whole map). In each layer's
row the straggler, the rank that arrived last most often, is marked: the others wait for it.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from analysis.attribution.comm_split import CommRow
from analysis.report.page.style import Style, heat_colour
from analysis.report.page.svg import el, esc, num, title

CELL_W, CELL_H, LABEL_W, HEAD_H, BLOCK_GAP = 96, 26, 46, 34, 28
MODULE_ORDER = ("dispatch", "combine")


@dataclass
class HeatCell:
    module: str
    layer: int
    rank: str
    wait_us: float  # per step
    transfer_us: float
    straggler: bool  # this rank arrived last most often at this layer's collective


def heat_cells(comm_rows: list[CommRow], used: set[tuple[str, int]], stage: str) -> list[HeatCell]:
    split = [c for c in comm_rows if c.wait_us is not None and c.stage == stage and (c.rank, c.step) in used]
    sums: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    steps: dict[tuple[str, int, str], set[int]] = defaultdict(set)
    lasts: dict[tuple[str, int], Counter] = defaultdict(Counter)
    for c in split:
        key = (c.module, c.layer, c.rank)
        sums[key][0] += c.wait_us
        sums[key][1] += c.transfer_us
        steps[key].add(c.step)
        if c.last_rank == c.rank:
            lasts[(c.module, c.layer)][c.rank] += 1
    cells = []
    for (module, layer, rank), (wait, transfer) in sums.items():
        count = lasts[(module, layer)]
        top = max(sorted(count), key=count.__getitem__) if count else None
        n = len(steps[(module, layer, rank)])
        cells.append(HeatCell(module, layer, rank, wait / n, transfer / n, rank == top))
    order = {m: i for i, m in enumerate(MODULE_ORDER)}
    return sorted(cells, key=lambda c: (order.get(c.module, len(order)), c.module, c.layer, c.rank))


def heatmap_svg(cells: list[HeatCell], style: Style) -> str:
    modules = list(dict.fromkeys(c.module for c in cells))
    ranks = sorted({c.rank for c in cells})
    top_wait = max((c.wait_us for c in cells), default=0.0) or 1.0
    parts, y = [], 0.0
    for module in modules:
        mine = [c for c in cells if c.module == module]
        layers = sorted({c.layer for c in mine})
        parts.append(el("text", esc(module), x=0.0, y=y + 14, class_="heat-title"))
        for j, rank in enumerate(ranks):
            parts.append(el("text", esc(rank), x=LABEL_W + j * CELL_W + CELL_W / 2, y=y + HEAD_H - 6,
                            class_="tick", text_anchor="middle"))
        for i, layer in enumerate(layers):
            row_y = y + HEAD_H + i * CELL_H
            parts.append(el("text", f"L{layer}", x=LABEL_W - 6.0, y=row_y + CELL_H / 2 + 4, class_="tick",
                            text_anchor="end"))
            for j, rank in enumerate(ranks):
                cell = next((c for c in mine if c.layer == layer and c.rank == rank), None)
                if cell is None:
                    continue
                x = LABEL_W + j * CELL_W
                share = cell.wait_us / top_wait
                mark = "★ " if cell.straggler else ""
                box = el("rect", title(f"{module}, layer {layer}, {rank}: wait {cell.wait_us:.1f} us, transfer "
                                       f"{cell.transfer_us:.1f} us per step"
                                       + (" (the rank the others wait for)" if cell.straggler else "")),
                         class_="heat-cell straggler" if cell.straggler else "heat-cell", data_module=module,
                         data_layer=layer, data_rank=rank, data_wait_us=f"{cell.wait_us:.3f}",
                         x=float(x), y=row_y, width=float(CELL_W - 2), height=float(CELL_H - 2),
                         fill=heat_colour(style, share),
                         stroke=style.heat.straggler_outline if cell.straggler else None,
                         stroke_width="2" if cell.straggler else None)
                text = el("text", f"{mark}{cell.wait_us:.1f} / {cell.transfer_us:.1f}", x=x + CELL_W / 2 - 1,
                          y=row_y + CELL_H / 2 + 3, class_="heat-text dark" if share > 0.55 else "heat-text",
                          text_anchor="middle")
                parts.append(box + text)
        y += HEAD_H + len(layers) * CELL_H + BLOCK_GAP
    width = LABEL_W + len(ranks) * CELL_W + 8
    return el("svg", "".join(parts), class_="heatmap", width=num(float(width)), height=num(y),
              viewBox=f"0 0 {num(float(width))} {num(y)}", xmlns="http://www.w3.org/2000/svg")
