"""Ports for servers the tests start: a run of free ones outside the kernel's ephemeral range.

A deployment's node r serves on engine.port + r, so one free port is not enough: the next one may be
another server's (or a port the kernel hands out to a client meanwhile). Bases are drawn below the
ephemeral range (32768+ on Linux) so a connection's local port does not take them between the check
and the bind."""
from __future__ import annotations

import random
import socket

_LOW, _HIGH = 20000, 32000


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports that are free now."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(_LOW, _HIGH - count)
        if all(_bindable(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports between {_LOW} and {_HIGH}")
