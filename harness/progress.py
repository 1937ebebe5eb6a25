"""A run's progress: one line per phase with its elapsed time, and request counts for live metrics.

Why its own module: the driver (harness/run.py) and every engine's stages (harness/engines/) report
through the same object; the phase names are what a failure's manifest entry names.
"""
from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Any, Iterator


class Progress:
    """Phase lines with elapsed times (rich), readable both on a terminal and in a Ray job's log."""

    def __init__(self, quiet: bool = False):
        self.console = _masked_console_class()(stderr=True, quiet=quiet, highlight=False, soft_wrap=True)  # paths stay greppable
        self.timings_s: dict[str, float] = {}
        self.current: str | None = None
        self.listeners: list[Any] = []  # called with each phase name (the live metrics exporter)
        self.count_listeners: list[Any] = []  # called with (completed_delta, running) request counts

    def counts(self, completed_delta: int = 0, running: int | None = None) -> None:
        """Request counts for live progress: requests just completed, requests now running."""
        for listener in self.count_listeners:
            listener(completed_delta, running)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.current = name
        for listener in self.listeners:
            listener(name)
        started = time.perf_counter()
        self.console.print(f"[bold]>[/bold] {name} ...")
        try:
            yield
        finally:
            self.timings_s[name] = round(time.perf_counter() - started, 3)
        self.console.print(f"  [green]done[/green] {name} ({self.timings_s[name]:.1f} s)")

    def note(self, text: str) -> None:
        self.console.print(f"  {text}")

    def part(self, name: str) -> "Progress":
        """The same lines, timings and listeners, each phase named `name: phase` (a PD run's roles, whose
        servers start at once on threads of their own)."""
        child = Progress.__new__(Progress)
        child.__dict__.update(self.__dict__)
        parent = self

        @contextmanager
        def phase(phase_name: str) -> Iterator[None]:
            with parent.phase(f"{name}: {phase_name}"):
                child.current = parent.current
                yield

        child.phase = phase
        return child

    def hide(self, mask) -> None:
        """Every line printed from now on goes through mask (a run's Secrets.text)."""
        self.console.mask = mask


@functools.lru_cache(maxsize=1)
def _masked_console_class():
    """rich is imported on first use (a Progress), not when this module is."""
    from rich.console import Console

    class MaskedConsole(Console):
        """rich's Console, every text it prints first masked (secrets by value: harness/node/secrets.py)."""

        mask = staticmethod(lambda text: text)

        def print(self, *objects, **kwargs):
            super().print(*(self.mask(o) if isinstance(o, str) else o for o in objects), **kwargs)

    return MaskedConsole
