"""Async streaming load: ramp to a target concurrency, keep it there, record every request.

Metric definitions (docs/load-metrics.md) follow sglang.bench_serving: TTFT = first text chunk
minus send time; ITL = gap between successive chunks, split evenly over the tokens a chunk
carries; TPOT = (e2e - TTFT) / (output tokens - 1); e2e = last chunk minus send time.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass, field

import aiohttp


@dataclass
class RequestRecord:
    request_id: int
    start_s: float                 # seconds since the load began
    ttft_ms: float = 0.0
    e2e_ms: float = 0.0
    tpot_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    output_tokens: int = 0
    ok: bool = False
    error: str | None = None


async def _one_request(session, url, api, input_len, output_len, rid, t0) -> RequestRecord:
    prompt = "hello " * input_len
    sampling = {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0}
    if api == "generate":
        payload = {"text": prompt, "stream": True, "sampling_params": sampling}
        path = "/generate"
    elif api == "generate_ids":
        # A server started with --skip-tokenizer-init takes token ids only (no tokenizer at hand).
        payload = {"input_ids": [(rid * 7919 + i) % 1000 + 100 for i in range(input_len)], "stream": True,
                   "sampling_params": sampling}
        path = "/generate"
    else:
        payload = {"prompt": prompt, "max_tokens": output_len, "stream": True, "ignore_eos": True, "temperature": 0.0}
        path = "/v1/completions"
    st = time.perf_counter()
    rec = RequestRecord(rid, st - t0)
    last, tokens = st, 0
    try:
        async with session.post(url + path, json=payload) as resp:
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return rec
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                body = line[5:].strip()
                if body == b"[DONE]":
                    continue
                data = json.loads(body)
                now = time.perf_counter()
                if api in ("generate", "generate_ids"):
                    new_total = int(data["meta_info"]["completion_tokens"])
                    new = new_total - tokens
                else:
                    new = 1 if data["choices"][0].get("text") else 0
                    new_total = tokens + new
                if new <= 0:
                    continue
                if tokens == 0:
                    rec.ttft_ms = (now - st) * 1e3
                else:
                    rec.itl_ms += [(now - last) * 1e3 / new] * new
                tokens, last = new_total, now
        rec.e2e_ms = (last - st) * 1e3
        rec.output_tokens = tokens
        rec.tpot_ms = (rec.e2e_ms - rec.ttft_ms) / (tokens - 1) if tokens > 1 else None
        rec.ok = tokens > 0
        if not rec.ok:
            rec.error = "no tokens received"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    return rec


class LoadRun:
    """Keeps `concurrency` requests in flight (ramped over ramp_s) until stop(); writes JSONL as they finish."""

    def __init__(self, url: str, concurrency: int, input_len: int, output_len: int, records_path: str,
                 api: str = "generate", ramp_s: float = 0.0, max_requests: int | None = None):
        self.url, self.concurrency, self.input_len, self.output_len = url, concurrency, input_len, output_len
        self.records_path, self.api, self.ramp_s, self.max_requests = records_path, api, ramp_s, max_requests
        self.records: list[RequestRecord] = []
        self._stop = asyncio.Event()
        self._next_id = 0

    def stop(self) -> None:
        self._stop.set()

    async def _worker(self, session, index, t0, out):
        await asyncio.sleep(self.ramp_s * index / max(1, self.concurrency))
        while not self._stop.is_set():
            if self.max_requests is not None and self._next_id >= self.max_requests:
                return
            rid, self._next_id = self._next_id, self._next_id + 1
            rec = await _one_request(session, self.url, self.api, self.input_len, self.output_len, rid, t0)
            self.records.append(rec)
            out.write(json.dumps(asdict(rec)) + "\n")
            out.flush()
            if not rec.ok:
                self._stop.set()  # a failing server ends the load; the caller reports why

    async def run(self) -> list[RequestRecord]:
        os.makedirs(os.path.dirname(self.records_path) or ".", exist_ok=True)
        t0 = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        with open(self.records_path, "a", encoding="utf-8") as out:
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
                await asyncio.gather(*(self._worker(session, i, t0, out) for i in range(self.concurrency)))
        return self.records


async def running_requests(session, url: str) -> float:
    """sglang:num_running_reqs summed over every scheduler's label set in /metrics."""
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("sglang:num_running_reqs"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def wait_for_running_batch(url: str, target: int, timeout_s: float, poll_s: float = 0.2) -> float:
    """Until the server reports at least `target` running requests; raises TimeoutError naming both."""
    deadline = time.monotonic() + timeout_s
    seen = 0.0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                seen = await running_requests(session, url)
            except aiohttp.ClientError:
                pass
            if seen >= target:
                return seen
            await asyncio.sleep(poll_s)
    raise TimeoutError(f"server reported {seen:.0f} running requests, never the target {target}, within {timeout_s:.0f} s")


async def spec_accept_length(url: str) -> float | None:
    """avg_spec_accept_length from /get_server_info (mean over DP ranks), None when MTP is off."""
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/get_server_info") as resp:
            info = await resp.json()
    values = [s["avg_spec_accept_length"] for s in info.get("internal_states") or [] if "avg_spec_accept_length" in s]
    return sum(values) / len(values) if values else None
