"""The TTFT split of a prefill/decode pair from SGLang's own per-request stage histograms.

Real: the /metrics scrapes of the Mooncake PD pair in tests/data/sglang-real/pd (SGLang 0.5.17,
2026-11-28), kept in its run.json; the window's means are recomputed here from the raw lines with
their own arithmetic. Synthetic (named so, answers known by construction): two ranks' series.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.metrics.ttft_split import TtftSplitError, markdown, split

RUN = Path(__file__).resolve().parent / "data" / "sglang-real" / "pd" / "sglang-0.5.17-dsv3-4l-fp8-h100x4-pd-mooncake.run.json"


def _scrapes() -> dict[str, list[str]]:
    metrics = json.loads(RUN.read_text())["pd_metrics"]
    return {"prefill": ["\n".join(metrics["warm-mooncake-prefill"]), "\n".join(metrics["after-prefill-mooncake-prefill"])],
            "decode": ["\n".join(metrics["warm-mooncake-decode"]), "\n".join(metrics["after-prefill-mooncake-decode"])]}


def _raw_mean_ms(texts: list[str], stage: str) -> float:
    def totals(text):
        s = sum(float(l.split()[-1]) for l in text.splitlines() if "_sum{" in l and f'stage="{stage}"' in l)
        c = sum(float(l.split()[-1]) for l in text.splitlines() if "_count{" in l and f'stage="{stage}"' in l)
        return s, c
    (s0, c0), (s1, c1) = totals(texts[0]), totals(texts[1])
    return 1000 * (s1 - s0) / (c1 - c0)


def test_the_real_pairs_window_split_matches_the_raw_lines():
    scrapes = _scrapes()
    parts = {p.name: p for p in split(scrapes)}
    assert parts["prefill compute"].mean_ms == pytest.approx(_raw_mean_ms(scrapes["prefill"], "prefill_forward"))
    assert parts["KV transfer"].mean_ms == pytest.approx(_raw_mean_ms(scrapes["prefill"], "prefill_transfer_kv_cache"))
    assert parts["wait before decode"].mean_ms == pytest.approx(_raw_mean_ms(scrapes["decode"], "decode_waiting"))
    assert parts["bootstrap"].mean_ms == pytest.approx(_raw_mean_ms(scrapes["prefill"], "prefill_bootstrap"))
    # the window (two prefill profiles' bursts) saw 64 requests, counted once per rank
    assert {p.requests for p in parts.values()} == {64}
    assert parts["KV transfer"].mean_ms > 100  # Mooncake over TCP: hundreds of ms for a 3000-token prompt
    ttft = next(p for p in split(scrapes) if p.name == "time to first token")
    assert ttft.context and ttft.mean_ms > sum(p.mean_ms for p in parts.values() if not p.context)


def test_synthetic_two_ranks_two_scrapes_known_means():
    """Synthetic: two ranks; between the scrapes each saw 4 requests of 0.5 s bootstrap (rank 0) and
    1.5 s (rank 1): mean 1000 ms over 4 requests."""
    def scrape(total_s, count):
        return "\n".join(f'sglang:per_stage_req_latency_seconds_{k}{{tp_rank="{r}",stage="prefill_bootstrap"}} {v}'
                         for r, t in ((0, total_s[0]), (1, total_s[1])) for k, v in (("sum", t), ("count", count)))
    parts = split({"prefill": [scrape((1.0, 3.0), 2), scrape((3.0, 9.0), 6)]})
    assert [(p.name, p.mean_ms, p.requests) for p in parts] == [("bootstrap", 1000.0, 4)]
    one = split({"prefill": [scrape((3.0, 9.0), 6)]})  # one scrape: since the start
    assert one[0].mean_ms == 1000.0 and one[0].requests == 6


def test_scrapes_without_pd_stages_say_what_is_missing():
    with pytest.raises(TtftSplitError, match="--disaggregation-mode"):
        split({"prefill": ["sglang:num_running_reqs{tp_rank=\"0\"} 3"]})
    with pytest.raises(TtftSplitError, match="one or two scrapes"):
        split({"prefill": ["", "", ""]})


def test_the_command_prints_the_table_and_refuses_a_device(tmp_path, capsys):
    files = []
    for role, texts in _scrapes().items():
        for i, text in enumerate(texts):
            f = tmp_path / f"{role}-{i}.txt"
            f.write_text("HTTP 200\n" + text + "\n")
            files.append(str(f))
    assert main(["ttft-split", "--prefill", *files[:2], "--decode", *files[2:]]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| KV transfer \| prefill \| \d+\.\d \| 64 \|", out) and "in none of the parts" in out
    assert main(["ttft-split", "--prefill", "/dev/zero"]) == 2
    assert "/dev/zero" in capsys.readouterr().err
