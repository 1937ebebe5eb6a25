"""Pause Python's cyclic garbage collector around work that allocates millions of short-lived
objects and forms no reference cycles (trace decoding, attribution, the tables).

Why: the collector runs every few hundred allocations and, now and then, walks every live object;
over a large trace that is about a tenth of the whole analysis (measured in docs/performance.md).
Reference counting still frees everything as usual; only cycles wait until the collector is
back on, when it runs as before."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
