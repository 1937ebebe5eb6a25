"""A prefill table per prompt token and per chunk, against the trace's own step annotations.

Real: the prefill role of the PD pair the README's command ran (tests/data/sglang-real/pd-ray, SGLang
0.5.17, DeepEP normal mode, chunked prefill 4096, 2048-token prompts: steps of one or two chunks). The
truth reads the traces' JSON with its own code (no analysis import): each GPU step annotation's length
and its label's `toks=` and `bs=`.
"""
from __future__ import annotations

import csv
import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from harness.cli import main

PREFILL = (Path(__file__).resolve().parent / "data" / "sglang-real" / "pd-ray"
           / "sglang_dsv3_4l_pd_mooncake-20261128-065033" / "prefill" / "traces")
LABEL = re.compile(r"^step\[EXTEND bs=(\d+) toks=(\d+)\]$")


def _truth() -> tuple[float, float, float, float]:
    """(prompt tokens a step, chunks a step, us a prompt token in the forward, us a prompt token start to
    start): per rank over its steps' GPU marks (a step's marks, one per stream, overlap; its forward is
    their union; start to start from one step's first mark to the next one's, per the mean step's tokens),
    then the mean over ranks."""
    tokens, chunks, forward, period = [], [], [], []
    for path in sorted(PREFILL.glob("*.trace.json.gz")):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        marks = sorted((e for e in events if e.get("cat") == "gpu_user_annotation" and LABEL.match(str(e.get("name")))),
                       key=lambda e: e["ts"])
        groups: list[list[dict]] = []
        for e in marks:
            if groups and e["ts"] < max(g["ts"] + g["dur"] for g in groups[-1]):
                groups[-1].append(e)
            else:
                groups.append([e])
        assert len(groups) == 5, (path.name, len(groups))
        labels = [LABEL.match(g[0]["name"]) for g in groups]
        starts = [min(g["ts"] for g in group) for group in groups]
        spans = [max(g["ts"] + g["dur"] for g in group) - start for group, start in zip(groups, starts)]
        tokens.append(statistics.fmean(int(m[2]) for m in labels))
        chunks.append(statistics.fmean(int(m[1]) for m in labels))
        forward.append(statistics.fmean(spans) / tokens[-1])
        period.append(statistics.fmean(b - a for a, b in zip(starts, starts[1:])) / tokens[-1])
    return tuple(statistics.fmean(v) for v in (tokens, chunks, forward, period))


def test_a_prefill_table_says_its_cost_per_prompt_token_and_per_chunk(tmp_path, capsys):
    assert main(["analyze", *map(str, sorted(PREFILL.glob("*.gz"))), "--stage", "extend",
                 "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    note = re.search(r"prefill, (\d+) prompt tokens a step on average: ([\d.]+) us a prompt token \(the end-to-end "
                     r"step\); ([\d.]+) chunks a step .*?: ([\d.]+) ms a chunk", printed)
    assert note, printed[-2500:]
    tokens, chunks, forward_us, period_us = _truth()
    # tokens and chunks: the labels' toks= and bs=, read back
    assert int(note[1]) == round(tokens) and float(note[3]) == pytest.approx(chunks, abs=0.05)
    # per token: the table's end-to-end step over its tokens (arithmetic on the table's own line), which
    # holds the forward the marks cover and the host's time around it
    step_ms = float(re.search(r"\| end-to-end \(ms/step\) \|  \|  \| ([\d.]+)ms \|", printed)[1])
    assert float(note[2]) == pytest.approx(step_ms * 1000 / float(note[1]), rel=0.002)
    assert forward_us < float(note[2]) < 1.5 * forward_us
    assert float(note[4]) == pytest.approx(float(note[2]) * float(note[1]) / float(note[3]) / 1000, rel=0.01)
    # start to start per prompt token against the marks' own starts: within 3%
    row = re.search(r"\| per token \(ms\) \| all steps of a token \| start to start \| ([\d.]+)ms \|", printed)
    assert row and float(row[1]) * 1000 == pytest.approx(period_us, rel=0.03)
    with open(tmp_path / "out" / "steps.csv", newline="") as fh:
        assert {int(row["query_tokens"]) for row in csv.DictReader(fh)} == {2048, 4096}  # steps.csv: the labels' toks=
