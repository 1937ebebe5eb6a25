"""Async streaming load: ramp to a target concurrency, keep it there, record every request.

Metric definitions (docs/load-metrics.md) follow sglang.bench_serving: TTFT = first text chunk
minus send time; ITL = gap between successive chunks, split evenly over the tokens a chunk
carries; TPOT = (e2e - TTFT) / (output tokens - 1); e2e = last chunk minus send time.

Tokens per chunk: /generate chunks carry the running `meta_info.completion_tokens`; /v1/completions
chunks carry `usage.completion_tokens` when asked for (stream_options.continuous_usage_stats), so a
chunk of several tokens (speculative decoding) counts all of them. A chunk `{"error": ...}` ends the
request with the server's message.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass, field

import aiohttp

DEFAULT_LOADS_PATH = "/v1/loads"


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


class LoadCounters:
    """What the driver reads while the load runs: requests awaiting their first token, and the
    speculative-decoding totals (tokens and verify steps, summed between consecutive chunks)."""

    def __init__(self) -> None:
        self.awaiting_first_token = 0
        self.spec_tokens = 0
        self.spec_verify_steps = 0
        self.tokens_in_flight: dict[int, int] = {}   # request id -> tokens received, while it runs

    def most_tokens_left(self, output_len: int) -> int:
        """Tokens still to come for the youngest request in flight (0 when none runs)."""
        received = list(self.tokens_in_flight.values())  # one C-level copy: safe beside the load's thread
        return max((output_len - t for t in received), default=0)

    def fewest_tokens_left(self, output_len: int) -> tuple[int, int]:
        """(requests in flight, tokens still to come for the oldest of them; 0 when none runs)."""
        received = list(self.tokens_in_flight.values())
        return len(received), min((output_len - t for t in received), default=0)

    def spec_snapshot(self) -> tuple[int, int]:
        return self.spec_tokens, self.spec_verify_steps


def _payload(api: str, input_len: int, output_len: int, rid: int = 0) -> tuple[str, dict]:
    prompt = "hello " * input_len
    sampling = {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0}
    if api == "generate":
        return "/generate", {"text": prompt, "stream": True, "sampling_params": sampling}
    if api == "generate_ids":
        # A server started with --skip-tokenizer-init takes token ids only (no tokenizer at hand).
        return "/generate", {"input_ids": [(rid * 7919 + i) % 1000 + 100 for i in range(input_len)], "stream": True,
                             "sampling_params": sampling}
    return "/v1/completions", {"prompt": prompt, "max_tokens": output_len, "stream": True, "ignore_eos": True,
                               "temperature": 0.0,
                               "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def _error_text(error) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _chunk_tokens(api: str, data: dict, tokens: int) -> tuple[int, int | None]:
    """(completion tokens so far, verify steps so far or None) after one chunk."""
    if api in ("generate", "generate_ids"):
        meta = data["meta_info"]
        verify = meta.get("spec_verify_ct")
        return int(meta["completion_tokens"]), (int(verify) if verify is not None else None)
    usage = data.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        return int(usage["completion_tokens"]), None
    choices = data.get("choices") or []
    return tokens + (1 if choices and choices[0].get("text") else 0), None  # server without per-chunk usage


async def _one_request(session, url, api, input_len, output_len, rid, t0, counters: LoadCounters) -> RequestRecord:
    path, payload = _payload(api, input_len, output_len, rid)
    st = time.perf_counter()
    rec = RequestRecord(rid, st - t0)
    last, tokens, verify = st, 0, 0
    counters.awaiting_first_token += 1
    counters.tokens_in_flight[rid] = 0
    waiting = True
    try:
        async with session.post(url + path, json=payload) as resp:
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return rec
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                body = line[5:].strip()
                if body == b"[DONE]":
                    continue
                data = json.loads(body)
                if "error" in data:
                    rec.error = f"server error in the stream after {tokens} token(s): {_error_text(data['error'])}"
                    break
                now = time.perf_counter()
                new_total, new_verify = _chunk_tokens(api, data, tokens)
                new = new_total - tokens
                if new <= 0:
                    continue
                if tokens == 0:
                    rec.ttft_ms = (now - st) * 1e3
                    counters.awaiting_first_token -= 1
                    waiting = False
                else:
                    rec.itl_ms += [(now - last) * 1e3 / new] * new
                    if new_verify is not None and new_verify > verify:
                        counters.spec_tokens += new
                        counters.spec_verify_steps += new_verify - verify
                if new_verify is not None:
                    verify = new_verify
                tokens, last = new_total, now
                counters.tokens_in_flight[rid] = tokens
        rec.e2e_ms = (last - st) * 1e3
        rec.output_tokens = tokens
        rec.tpot_ms = (rec.e2e_ms - rec.ttft_ms) / (tokens - 1) if tokens > 1 else None
        rec.ok = tokens > 0 and rec.error is None
        if tokens == 0 and rec.error is None:
            rec.error = "no tokens received"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
        rec.output_tokens = tokens
    finally:
        if waiting:
            counters.awaiting_first_token -= 1
        counters.tokens_in_flight.pop(rid, None)
    return rec


class LoadRun:
    """Keeps `concurrency` requests in flight (ramped over ramp_s) until stop(); writes JSONL as they finish.

    pause() stops admitting new requests (the running ones go on), so the server runs decode batches
    only once every running request has its first token: the profile window."""

    def __init__(self, url: str, concurrency: int, input_len: int, output_len: int, records_path: str,
                 api: str = "generate", ramp_s: float = 0.0, max_requests: int | None = None):
        self.url, self.concurrency, self.input_len, self.output_len = url, concurrency, input_len, output_len
        self.records_path, self.api, self.ramp_s, self.max_requests = records_path, api, ramp_s, max_requests
        self.records: list[RequestRecord] = []
        self.counters = LoadCounters()
        self._stop = asyncio.Event()
        self._admit = asyncio.Event()
        self._admit.set()
        self._next_id = 0
        self._t0: float | None = None  # perf_counter at the start: the clock of RequestRecord.start_s

    def clock_s(self) -> float | None:
        """Seconds on the records' clock (RequestRecord.start_s), None before the load starts: what the
        driver stamps the profile window with, so the analysis can tell tokens outside it."""
        return None if self._t0 is None else time.perf_counter() - self._t0

    def stop(self) -> None:
        self._stop.set()
        self._admit.set()  # paused workers wake up and see the stop

    def pause(self) -> None:
        self._admit.clear()

    def resume(self) -> None:
        self._admit.set()

    async def _worker(self, session, index, t0, out):
        await asyncio.sleep(self.ramp_s * index / max(1, self.concurrency))
        while not self._stop.is_set():
            await self._admit.wait()
            if self._stop.is_set():
                return
            if self.max_requests is not None and self._next_id >= self.max_requests:
                return
            rid, self._next_id = self._next_id, self._next_id + 1
            rec = await _one_request(session, self.url, self.api, self.input_len, self.output_len, rid, t0,
                                     self.counters)
            self.records.append(rec)
            out.write(json.dumps(asdict(rec)) + "\n")
            out.flush()
            if not rec.ok:
                self.stop()  # a failing server ends the load; the caller reports why

    async def run(self) -> list[RequestRecord]:
        os.makedirs(os.path.dirname(self.records_path) or ".", exist_ok=True)
        t0 = self._t0 = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        with open(self.records_path, "a", encoding="utf-8") as out:
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
                await asyncio.gather(*(self._worker(session, i, t0, out) for i in range(self.concurrency)))
        return self.records


async def fetch_loads(session, url: str, loads_path: str = DEFAULT_LOADS_PATH) -> list[dict]:
    """/v1/loads: one entry per DP rank of every node (num_running_reqs, num_waiting_reqs, ...)."""
    async with session.get(url + loads_path) as resp:
        resp.raise_for_status()
        body = await resp.json()
    return [load for load in body.get("loads") or [] if isinstance(load, dict)]


def total_running(loads: list[dict]) -> float:
    return float(sum(int(load.get("num_running_reqs") or 0) for load in loads))


def describe_loads(loads: list[dict] | None) -> str:
    """'DP rank 0: 4 running, 0 waiting; DP rank 1: 2 running, 2 waiting': where a batch is short."""
    if not loads:
        return "no per-rank loads"
    return "; ".join(f"DP rank {load.get('dp_rank', i)}: {int(load.get('num_running_reqs') or 0)} running, "
                     f"{int(load.get('num_waiting_reqs') or 0)} waiting"
                     + (f" (max {load['max_running_requests']})" if load.get("max_running_requests") else "")
                     for i, load in enumerate(loads))


async def running_requests(session, url: str, loads_path: str = DEFAULT_LOADS_PATH) -> float:
    """Running requests over every DP rank of every node: the sum of num_running_reqs in /v1/loads.

    Not /metrics: its figures are node-local (node 0's schedulers only) and, with DP attention, one
    series per DP group, so a multi-node deployment's node 0 never shows the whole batch."""
    return total_running(await fetch_loads(session, url, loads_path))


async def wait_for_running_batch(url: str, target: int, timeout_s: float, poll_s: float = 0.2,
                                 loads_path: str = DEFAULT_LOADS_PATH) -> float:
    """Until the server reports at least `target` running requests; raises TimeoutError naming both."""
    deadline = time.monotonic() + timeout_s
    seen = 0.0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:  # each poll within what is left of the deadline, however slowly the server answers
                seen = await asyncio.wait_for(running_requests(session, url, loads_path),
                                              timeout=max(0.1, deadline - time.monotonic()))
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if seen >= target:
                return seen
            await asyncio.sleep(poll_s)
    raise TimeoutError(f"server reported {seen:.0f} running requests, never the target {target}, within {timeout_s:.0f} s")


def window_accept_length(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Tokens per verify step between two LoadCounters.spec_snapshot()s; None without verify steps."""
    tokens, steps = after[0] - before[0], after[1] - before[1]
    return tokens / steps if steps > 0 else None
