"""SIGINT and SIGTERM during a run: an exception the run handles, never a bare death.

Why: KeyboardInterrupt and SystemExit passed the run's `except Exception`, so a Ctrl-C left a
manifest saying `failed` with no phase, a second Ctrl-C during clean-up left none, and SIGTERM
died in Ray's C++ code (exit 134). Here both signals raise `Interrupted` in the main thread; the
run writes its manifest (status `interrupted`, the phase) before cleaning up, and exits 128 + the
signal number (130, 143). While the final manifest is written, signals are held back.
"""
from __future__ import annotations

import logging
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal asked the run to stop. A KeyboardInterrupt, so no `except Exception` swallows it and
    Ray's blocking calls (ray.get) end with it: they turn any other exception raised by a signal
    handler into a SystemError, and re-raise a KeyboardInterrupt of their own (which signal it
    was is then the guard's `last_signal`)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def as_interrupted(exc: BaseException, last_signal: int | None = None) -> Interrupted:
    """A KeyboardInterrupt re-raised by Ray, or by Python's default handler, as the signal last received."""
    return exc if isinstance(exc, Interrupted) else Interrupted(last_signal or signal.SIGINT)


class InterruptGuard:
    """Installs the handlers (main thread only; elsewhere a no-op) and restores the old ones."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._old: dict[int, object] = {}
        self._raise = True
        self.active = threading.current_thread() is threading.main_thread()

    def install(self) -> None:
        """(Again) after a library that sets its own handlers (ray.init)."""
        if not self.active:
            return
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._old.setdefault(sig, previous)

    def quiet(self) -> None:
        """From now on a signal is noted, not raised (the final manifest is being written)."""
        self._raise = False

    def arm(self) -> None:
        """From now on a signal raises; one noted while quiet is raised now."""
        self._raise = True
        if self.received:
            raise Interrupted(self.received[-1])

    def _handle(self, signum, frame) -> None:
        self.received.append(signum)
        if self._raise:
            raise Interrupted(signum)

    @property
    def last_signal(self) -> int | None:
        return self.received[-1] if self.received else None

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
        if self.received:
            mend_half_built_log_handlers()


def mend_half_built_log_handlers() -> None:
    """A signal that lands while a logging handler is being built (Ray sets up its loggers while it
    connects) leaves a handler registered for the exit-time flush but without its stream; logging's
    flush at exit then prints an AttributeError traceback after the run's own clean message. Such
    a handler gets no stream, which logging treats as nothing to flush. (logging keeps the handlers
    it flushes at exit in a private list; there is no public one.)"""
    for ref in list(getattr(logging, "_handlerList", ())):
        handler = ref()
        if isinstance(handler, logging.StreamHandler) and not hasattr(handler, "stream"):
            handler.stream = None


class signals_held:
    """SIGINT and SIGTERM wait until the block ends (a manifest is never half written by a signal)."""

    def __enter__(self):
        self._held = threading.current_thread() is threading.main_thread()
        if self._held:
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))
        return self

    def __exit__(self, *exc):
        if self._held:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)
        return False
