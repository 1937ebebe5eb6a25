"""The embedded engine's actor seen from the driver: started with the scenario's resources, called
with a time bound, its log lines written to the run directory as each call returns.

Why the log with every call: an actor that dies later still leaves everything it logged before.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.run_dir import append_lines
from harness.run_errors import RunFailed
from harness.scenario import EmbeddedEngine, Scenario, embedded_model_config


class EngineHandle:
    """Calls the engine actor with a time bound, writing its log lines to the run directory at once."""

    def __init__(self, ray: Any, actor: Any, log_path: Path):
        self.ray, self.actor, self.log_path = ray, actor, log_path

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            reply = self.ray.get(getattr(self.actor, method).remote(*args), timeout=timeout_s)
        except GetTimeoutError as exc:
            raise RunFailed(f"engine call {method} did not return within {timeout_s:.0f} s") from exc
        except RayActorError as exc:
            raise RunFailed(
                f"the engine actor died during {method}: {_first_line(exc)}. "
                f"Its log so far is in {self.log_path}"
            ) from exc
        append_lines(self.log_path, reply["log"])
        return reply["result"]

    def kill(self) -> None:
        try:
            self.ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead is fine
            pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if "exit" in line.lower() or "died" in line.lower() or "Error" in line:
            return line.strip()[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def start_actor(ray: Any, scenario: Scenario, log_path: Path) -> EngineHandle:
    """The engine actor with 1 CPU (engine.threads), and 1 GPU when engine.device is cuda."""
    from harness.engines.embedded.actor import remote_actor_class

    engine = scenario.engine
    assert isinstance(engine, EmbeddedEngine)
    options: dict[str, Any] = {"num_cpus": engine.threads or 1}
    if engine.device == "cuda":
        options["num_gpus"] = 1
    actor = remote_actor_class().options(**options).remote(
        engine.model_dump(mode="json"), embedded_model_config(scenario), scenario.workload.model_dump(mode="json")
    )
    return EngineHandle(ray, actor, log_path)
