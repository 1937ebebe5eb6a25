"""The embedded engine inside a Ray actor: one call per phase, each returning its result and new log lines.

Why return logs with every result: the driver writes them into the run directory at once, so an
actor that dies later still leaves its log behind.
"""
from __future__ import annotations

from typing import Any


class EmbeddedEngineActor:
    def __init__(self, engine: dict[str, Any], model_config: dict[str, Any], workload: dict[str, Any]):
        from harness.engines.embedded.engine import DecodeEngine  # torch loads in the actor, not the driver

        self.engine = DecodeEngine(engine, model_config, workload)

    def _reply(self, result: Any) -> dict[str, Any]:
        return {"result": result, "log": self.engine.log.drain()}

    def ready(self) -> dict[str, Any]:
        import os
        import socket

        info = self.engine.describe()
        info.update({"hostname": socket.gethostname(), "pid": os.getpid()})
        return self._reply(info)

    def prefill(self) -> dict[str, Any]:
        return self._reply(self.engine.prefill())

    def decode(self, num_steps: int) -> dict[str, Any]:
        return self._reply(self.engine.decode(num_steps))

    def profile(self, num_steps: int, prefix: str, record_shapes: bool, with_stack: bool) -> dict[str, Any]:
        return self._reply(self.engine.profile(num_steps, prefix, record_shapes, with_stack))

    def requests(self) -> dict[str, Any]:
        """The request records so far (completed false for those still decoding): a stopped run keeps them."""
        return self._reply(self.engine.request_records())

    def finish(self) -> dict[str, Any]:
        step_ms = self.engine.finish()
        return self._reply({"step_ms": step_ms, "requests": self.engine.request_records()})


def remote_actor_class():
    """The Ray actor class; never restarted, so a crash is reported instead of silently redone."""
    import ray

    return ray.remote(max_restarts=0, max_task_retries=0)(EmbeddedEngineActor)
