"""The chrome trace format's rules (the Trace Event Format document that chrome://tracing and
Perfetto's JSON importer follow), as a checker: a list of problems, empty when the trace keeps them.

Checked: the document is an event array or an object with a `traceEvents` array (and
`displayTimeUnit`, when given, is "ms" or "ns"); every event is an object with a one-letter phase
the format defines, a string name, a pid and tid (number or string) and, except metadata, a
numeric `ts`; `args` is an object; a complete event ("X") has a finite `dur` >= 0; begin / end
events ("B" / "E") balance per thread; a metadata event ("M") is one of the five names the format
defines, with the argument it needs; on the threads named in `nested_tids`, complete events nest
(none ends inside another that it started after), as a viewer draws slices of one track.
Written from the format's description, independently of the code that writes traces.
"""
from __future__ import annotations

import math
from collections import defaultdict

PHASES = set("BEXiIbneCPsftMNODSTpFRc(),vV")  # every phase letter the format defines
METADATA = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
            "thread_name": "name", "thread_sort_index": "sort_index"}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def problems(doc, nested_tids: set[tuple] = frozenset(), limit: int = 20) -> list[str]:
    found: list[str] = []

    def say(index: int, text: str) -> None:
        if len(found) < limit:
            found.append(f"event {index}: {text}")

    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            return ["an object trace needs a traceEvents array"]
        if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
            found.append(f"displayTimeUnit {doc['displayTimeUnit']!r} is neither ms nor ns")
    elif isinstance(doc, list):
        events = doc
    else:
        return ["a trace is an array of events or an object with traceEvents"]
    open_b: dict[tuple, int] = defaultdict(int)
    slices: dict[tuple, list[tuple[float, float, int]]] = defaultdict(list)
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            say(i, "not an object")
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            say(i, f"unknown phase {ph!r}")
            continue
        if not isinstance(ev.get("name", ""), str):
            say(i, "name is not a string")
        for key in ("pid", "tid"):
            if key in ev and not (_number(ev[key]) or isinstance(ev[key], str)):
                say(i, f"{key} {ev[key]!r} is neither a number nor a string")
        if "args" in ev and not isinstance(ev["args"], dict):
            say(i, "args is not an object")
        thread = (ev.get("pid"), ev.get("tid"))
        if ph == "M":
            needed = METADATA.get(ev.get("name"))
            if needed is None:
                say(i, f"metadata event named {ev.get('name')!r}")
            elif needed not in (ev.get("args") or {}):
                say(i, f"{ev['name']} without args.{needed}")
            continue
        if not _number(ev.get("ts")):
            say(i, f"ts {ev.get('ts')!r} is not a finite number")
            continue
        if ph == "X":
            if not _number(ev.get("dur")) or ev["dur"] < 0:
                say(i, f"complete event with dur {ev.get('dur')!r}")
                continue
            if thread in nested_tids:
                slices[thread].append((ev["ts"], ev["ts"] + ev["dur"], i))
        elif ph == "B":
            open_b[thread] += 1
        elif ph == "E":
            open_b[thread] -= 1
            if open_b[thread] < 0:
                say(i, f"end event without a begin on thread {thread}")
    for thread, count in open_b.items():
        if count > 0:
            found.append(f"thread {thread}: {count} begin event(s) never end")
    for thread, spans in slices.items():
        stack: list[tuple[float, float, int]] = []
        for start, end, index in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-6:
                say(index, f"on thread {thread} it starts inside event {stack[-1][2]} and ends after it")
            stack.append((start, end, index))
    return found
