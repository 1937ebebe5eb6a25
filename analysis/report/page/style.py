"""Colours and words of the page, read from style.yaml (knowledge kept out of the drawing code)."""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import msgspec

from analysis.io.data_files import read_packaged_struct

STYLE_FILE = Path(__file__).with_name("style.yaml")
LANGS = ("en", "zh")
_COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")


class Heat(msgspec.Struct, forbid_unknown_fields=True):
    low: str
    high: str
    straggler_outline: str


class Timeline(msgspec.Struct, forbid_unknown_fields=True):
    """The to-scale timeline's top lane and idle stretches (stream_coverage.py's kinds)."""
    exposed: str
    overlap: str
    idle: str


class Style(msgspec.Struct, forbid_unknown_fields=True):
    groups: dict[str, str]
    other_group_colour: str
    modules: dict[str, dict[str, str]]
    heat: Heat
    timeline: Timeline
    words: dict[str, dict[str, str]]
    headings_zh: dict[str, str]  # the CLI tables' English column headings, in Chinese (the rest stay English)

    def __post_init__(self):
        colours = [*self.groups.values(), self.other_group_colour, self.heat.low, self.heat.high,
                   self.heat.straggler_outline, self.timeline.exposed, self.timeline.overlap, self.timeline.idle,
                   *(c for m in self.modules.values() for c in m.values())]
        bad = [c for c in colours if not _COLOUR.match(c)]
        if bad:
            raise ValueError(f"colours must be #rrggbb, not {', '.join(bad)}")
        if set(self.words) != set(LANGS) or set(self.words["en"]) != set(self.words["zh"]):
            raise ValueError("words: en and zh must name the same keys")

    def group_colour(self, group: str) -> str:
        return self.groups.get(group, self.other_group_colour)

    def module_colour(self, group: str, module: str) -> str:
        return self.modules.get(group, {}).get(module, self.group_colour(group))

    def timeline_colour(self, kind: str) -> str:
        return getattr(self.timeline, kind)

    def heading(self, lang: str, text: str) -> str:
        return self.headings_zh.get(text, text) if lang == "zh" else text

    def word(self, lang: str, key: str, **values) -> str:
        return self.words[lang][key].format(**values)


@cache
def load_style(path: Path = STYLE_FILE) -> Style:
    return read_packaged_struct(path, Style)


def heat_colour(style: Style, share: float) -> str:
    """The colour between heat.low (0) and heat.high (1)."""
    share = min(1.0, max(0.0, share))
    low, high = style.heat.low, style.heat.high
    mixed = [round(int(low[i:i + 2], 16) + share * (int(high[i:i + 2], 16) - int(low[i:i + 2], 16))) for i in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in mixed)
