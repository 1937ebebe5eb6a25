"""The one stage sequence of every run: start, steady state, profile, finish, collect, analyse,
discard the traces not kept, and stop on every exit.

Why one place: the Ray job (harness/run.py, either engine through harness/engines/), the one-GPU
runner without Ray (harness/engines/embedded/standalone.py) and the SGLang driver without Ray
(benchmarks/gpu/sglang_real/drive.py) go through the same stages in the same order; each provides
the stage bodies (base.py's Engine, or any object with the same methods) and keeps its own record
of the run (the Ray job's manifest and progress phases, the standalone manifest, drive.py's status.json).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # nothing at run time: the Ray-free drivers import this module alone
    from harness.engines.base import Traces


class Stages(Protocol):
    """What run_stages calls, in order; base.py's Engine documents each stage."""

    def start(self) -> None: ...
    def reach_steady_state(self) -> None: ...
    def profile(self) -> Traces: ...
    def finish(self) -> None: ...
    def collect(self, traces: Traces) -> Traces: ...
    def analyse(self, traces: Traces) -> str | None: ...
    def discard_traces(self, traces: Traces) -> None: ...
    def stop(self) -> None: ...


def run_stages(engine: Stages, on_interrupt: Callable[[BaseException], None] | None = None) -> str | None:
    """Every engine's stages, in order; returns what analyse returned (the D4 table with the run's
    notes under it; None where a runner does not analyse).

    The engine is stopped on every exit (servers, actors, load), before the failure is recorded; an
    interrupt is recorded first (on_interrupt), since a second one may cut the stopping short."""
    try:
        engine.start()
        engine.reach_steady_state()
        traces = engine.profile()
        engine.finish()
        traces = engine.collect(traces)
        table = engine.analyse(traces)
        engine.discard_traces(traces)
        return table
    except KeyboardInterrupt as exc:  # Interrupted (harness/interrupts.py), or Ray's re-raise of it
        if on_interrupt is not None:
            on_interrupt(exc)
        raise
    finally:
        engine.stop()
