"""A node's file copied to the driver in pieces: a rank's trace can be gigabytes, and one Ray call that
returns it whole holds it twice over (the actor's bytes, the driver's copy) before a byte is written.

The actor answers `read_file(path, offset, size_bytes)` / `read_log(offset, size_bytes)` with at most
NODE_FILE_PIECE_BYTES (analysis.api.read_input_range); the driver writes each piece as it comes into
a file written aside and moved in (a failure leaves no half file).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

NODE_FILE_PIECE_BYTES = 64 * 1024 * 1024  # what one call ships through Ray


def fetch_node_file(read_piece: Callable[[int, int], object], dest: str | Path, timeout_s: float,
                    piece_bytes: int = NODE_FILE_PIECE_BYTES) -> Path:
    """Copy a node's file to dest: read_piece(offset, size_bytes) is the actor call (an object ref);
    each piece waits at most timeout_s. The path written."""
    import ray

    from harness.run_dir import write_atomic

    def copy(handle) -> None:
        offset = 0
        while True:
            piece = ray.get(read_piece(offset, piece_bytes), timeout=timeout_s)
            handle.write(piece)
            offset += len(piece)
            if len(piece) < piece_bytes:
                return

    return write_atomic(Path(dest), copy)
