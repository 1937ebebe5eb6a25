"""The streaming load client on a background thread, so the driver can watch the servers meanwhile."""
from __future__ import annotations

import asyncio
import threading

from harness.load.client import DEFAULT_LOADS_PATH, LoadRun, RequestRecord, fetch_loads, total_running


class BackgroundLoad:
    """Starts LoadRun in its own event loop; stop() lets in-flight requests finish, no new ones start."""

    def __init__(self, url: str, concurrency: int, input_len: int, output_len: int, records_path: str,
                 ramp_s: float = 0.0, api: str = "generate", loads_path: str = DEFAULT_LOADS_PATH,
                 loads_url: str | None = None):
        """loads_url: the server whose /v1/loads says what runs (default url; behind a PD router, the
        decode server, since the router answers no /v1/loads)."""
        self.url, self.loads_path, self.output_len = url, loads_path, output_len
        self.loads_url = loads_url or url
        self.load = LoadRun(url, concurrency, input_len, output_len, records_path, api=api, ramp_s=ramp_s)
        self.loop = asyncio.new_event_loop()
        self.error: BaseException | None = None
        self.last_loads: list[dict] | None = None   # the server's last /v1/loads entries (per DP rank)
        self.thread = threading.Thread(target=self._main, name="load", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.loop.run_until_complete(self.load.run())
        except BaseException as exc:  # noqa: BLE001 - reported to the driver by first_failure()
            self.error = exc
        finally:
            self.loop.close()

    @property
    def records(self) -> list[RequestRecord]:
        return list(self.load.records)

    def first_failure(self) -> str | None:
        """Why the load cannot go on (a failed request or a crashed client), or None."""
        if self.error is not None:
            return f"the load client crashed: {type(self.error).__name__}: {self.error}"
        for rec in self.load.records:
            if not rec.ok:
                return f"request {rec.request_id} failed: {rec.error}"
        return None

    def _call(self, fn) -> None:
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(fn)
            except RuntimeError:  # closed in between: the load has already ended
                pass

    def stop(self) -> None:
        self._call(self.load.stop)

    def pause(self) -> None:
        """No new requests from now on; the running ones go on."""
        self._call(self.load.pause)

    def resume(self) -> None:
        self._call(self.load.resume)

    def awaiting_first_token(self) -> int:
        """Requests sent whose first token has not come: while any, the server may still prefill."""
        return self.load.counters.awaiting_first_token

    def most_tokens_left(self) -> int:
        """Tokens still to come for the youngest running request: how long the batch can last unfed."""
        return self.load.counters.most_tokens_left(self.load.output_len)

    @property
    def concurrency(self) -> int:
        """The requests the load keeps in flight (the scenario's batch)."""
        return self.load.concurrency

    def fewest_tokens_left(self) -> tuple[int, int]:
        """(requests in flight, tokens still to come for the oldest): whether the whole batch outlasts a window."""
        return self.load.counters.fewest_tokens_left(self.load.output_len)

    def clock_s(self) -> float | None:
        """Now on the load records' clock (seconds since the load began), None before it began."""
        return self.load.clock_s()

    def spec_snapshot(self) -> tuple[int, int]:
        """(speculative tokens, verify steps) summed over every request so far."""
        return self.load.counters.spec_snapshot()

    def stop_and_wait(self, timeout_s: float) -> bool:
        """Stop issuing requests and wait for the in-flight ones; False when they outlast timeout_s."""
        self.stop()
        self.thread.join(timeout=timeout_s)
        return not self.thread.is_alive()

    def running_batch(self, timeout_s: float = 5.0) -> float | None:
        """The server's running requests now, every DP rank on every node (/v1/loads), or None when it
        does not answer."""
        import aiohttp

        async def probe() -> list[dict]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
                return await fetch_loads(session, self.loads_url, self.loads_path)

        try:
            self.last_loads = asyncio.run(probe())
            return total_running(self.last_loads)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            return None
