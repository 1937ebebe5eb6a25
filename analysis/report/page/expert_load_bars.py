"""Expert load per MoE layer: the busiest expert's tokens against the mean per expert, as bars.

The numbers are the run's expert_load.json summary (analysis/ingest/expert_load.py), as the D4
table's `expert load` rows print them; 1 = perfectly even. Tokens per EP rank follow where the
placement is known.
"""
from __future__ import annotations

from analysis.ingest.expert_load import ExpertLoad
from analysis.report.page.style import Style
from analysis.report.page.svg import el, esc, num, title

ROW_H, LABEL_W, BAR_W = 22, 46, 420


def expert_load_svg(load: ExpertLoad, style: Style) -> str:
    top = max((row.imbalance for row in load.layers), default=1.0) or 1.0
    colour = style.group_colour("moe")
    parts = []
    for i, row in enumerate(load.layers):
        y = i * ROW_H + 4.0
        width = max(1.0, BAR_W * row.imbalance / top)
        text = (f"expert {row.busiest_expert}: {row.max_tokens} / {row.mean_tokens:.1f} tokens ({row.imbalance:.2f}x)"
                + (f"; per rank {' / '.join(str(t) for t in row.rank_tokens)}" if row.rank_tokens else ""))
        parts.append(el("g", el("text", f"L{row.layer}", x=LABEL_W - 6.0, y=y + 14, class_="tick", text_anchor="end")
                        + el("rect", title(text), x=float(LABEL_W), y=y, width=width, height=float(ROW_H - 6),
                             fill=colour)
                        + el("text", esc(text), x=LABEL_W + width + 6, y=y + 13, class_="value"),
                        class_="load-bar", data_layer=row.layer, data_imbalance=f"{row.imbalance:.4f}"))
    width = LABEL_W + BAR_W + 420
    height = len(load.layers) * ROW_H + 8.0
    return el("svg", "".join(parts), class_="expert-load", width=num(float(width)), height=num(height),
              viewBox=f"0 0 {num(float(width))} {num(height)}", xmlns="http://www.w3.org/2000/svg")
