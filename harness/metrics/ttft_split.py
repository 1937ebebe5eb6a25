"""A prefill/decode pair's time to first token, split into the parts SGLang times itself.

Why: with prefill and decode on separate servers a request's TTFT is the prefill side's queue and
compute, the KV cache's transfer and the decode side's wait, and each has a different remedy (more
prefill nodes, a faster transfer backend, a larger decode batch). SGLang exports each part per request
as a histogram on each server's /metrics (harness/sglang/ttft_parts.yaml says which and what it means).
Given one scrape per role the means cover everything since the servers started (warm-up included);
given two (before and after a window) they cover the window: the difference of sums over the
difference of counts. Every rank exports its own series: the mean is over all of them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pathlib import Path

from analysis.api import CONFIG_LIMIT_BYTES, DOCUMENT_LIMIT_BYTES, load_yaml, read_input_text

PARTS_FILE = Path(__file__).resolve().parents[1] / "sglang" / "ttft_parts.yaml"
TTFT_PART = "time to first token"
_SERIES = re.compile(r"^sglang:(?P<metric>\w+?)_(?P<kind>sum|count)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class TtftSplitError(Exception):
    """Scrapes that cannot be split: says what is missing."""


@dataclass
class Part:
    name: str
    role: str
    mean_ms: float | None  # None: no request observed in the window
    requests: float
    means: str
    context: bool = False  # a figure beside the parts, not one of them (it overlaps them)


RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "dp_rank")  # which scheduler exported a series


def histogram_totals(text: str) -> dict[tuple[str, str], list]:
    """(metric, stage or "") -> [sum, count, ranks] over every series of one scrape's text; ranks: the
    schedulers that exported it (their rank labels). Series of one rank that differ in other labels
    (the TTFT histogram's is_streaming) split its requests between them; each rank sees every request."""
    out: dict[tuple[str, str], list] = {}
    for line in text.splitlines():
        m = _SERIES.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        try:
            value = float(m["value"])
        except ValueError:
            continue
        totals = out.setdefault((m["metric"], labels.get("stage", "")), [0.0, 0.0, set()])
        if m["kind"] == "sum":
            totals[0] += value
        else:
            totals[1] += value
            totals[2].add(tuple(labels.get(k, "") for k in RANK_LABELS))
    return out


def _window(after: dict, before: dict | None, key: tuple[str, str]) -> tuple[float, float, int] | None:
    """(seconds, observations, series) in the window: after - before where both scrapes have the key."""
    if key not in after:
        return None
    total, count, ranks = after[key]
    if before is not None and key in before:
        total, count = total - before[key][0], count - before[key][1]
    return total, count, len(ranks)


def split(scrapes: dict[str, list[str]]) -> list[Part]:
    """`scrapes`: role ("prefill", "decode") -> one or two /metrics texts (the window's start, end)."""
    spec = load_yaml(read_input_text(PARTS_FILE, CONFIG_LIMIT_BYTES, "the TTFT parts file"))
    totals = {}
    for role, texts in scrapes.items():
        if not 1 <= len(texts) <= 2:
            raise TtftSplitError(f"ttft split: give one or two scrapes of the {role} server, not {len(texts)}")
        parsed = [histogram_totals(t) for t in texts]
        totals[role] = (parsed[-1], parsed[0] if len(parsed) == 2 else None)
    parts = []
    for context, entries in ((False, spec["parts"]), (True, spec["context"])):
        for entry in entries:
            if entry["role"] not in totals:
                continue
            after, before = totals[entry["role"]]
            seen = _window(after, before, (entry["metric"], entry.get("stage", "")))
            if seen is None:
                continue
            total_s, count, series = seen  # each rank observes every request once
            parts.append(Part(entry["name"], entry["role"], 1000 * total_s / count if count > 0 else None,
                              count / max(series, 1), entry["means"], context))
    if not any(not p.context for p in parts):
        raise TtftSplitError("ttft split: no SGLang PD stage metrics in the scrapes (sglang:per_stage_req_latency_"
                            "seconds with stage prefill_* / decode_*); were the servers started with "
                            "--enable-metrics and --disaggregation-mode?")
    return parts


def markdown(parts: list[Part]) -> str:
    lines = ["| part | server | mean (ms) | requests | what it is |", "|---|---|---|---|---|"]
    for p in parts:
        mean = "-" if p.mean_ms is None else f"{p.mean_ms:.1f}"
        name = f"({p.name})" if p.context else p.name
        lines.append(f"| {name} | {p.role} | {mean} | {p.requests:.0f} | {p.means} |")
    summed = sum(p.mean_ms or 0.0 for p in parts if not p.context)
    ttft = next((p.mean_ms for p in parts if p.context and p.name == TTFT_PART), None)
    tail = f"; time to first token {ttft:.1f} ms, {ttft - summed:.1f} ms of it in none of the parts" if ttft else ""
    lines.append(f"\nparts summed: {summed:.1f} ms per request{tail}. Rows in parentheses overlap the parts "
                 "(context, not added).")
    return "\n".join(lines) + "\n"


def split_files(prefill: list[str], decode: list[str]) -> list[Part]:
    """split() of /metrics texts saved in files (anything else in a file, such as an HTTP status line,
    is skipped), each read through the bounded input door."""
    scrapes = {role: [read_input_text(p, DOCUMENT_LIMIT_BYTES, "a /metrics scrape") for p in paths]
               for role, paths in (("prefill", prefill), ("decode", decode)) if paths}
    return split(scrapes)
