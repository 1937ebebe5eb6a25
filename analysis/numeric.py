"""numpy, imported once for the analysis, without a BLAS thread pool unless the user asked for one.

Why: the analysis sums and encodes columns; it does no linear algebra. numpy's bundled OpenBLAS
starts one thread per core when it loads: measured on a 2-core host, the import took 0.10 CPU-s with
the pool and 0.05 without it, and a process holding idle threads is then forked into rank workers.
The variable is set only while numpy loads (OpenBLAS reads it once), so nothing this process starts
later inherits it. Where numpy was imported before, or OPENBLAS_NUM_THREADS is set already (a program
that uses the analysis beside its own linear algebra), it is left as it is.
"""
from __future__ import annotations

import os
import sys

_THREADS = "OPENBLAS_NUM_THREADS"

if "numpy" not in sys.modules and _THREADS not in os.environ:
    os.environ[_THREADS] = "1"
    try:
        import numpy as np
    finally:
        os.environ.pop(_THREADS, None)
else:
    import numpy as np



def sequential_sum(values, total: float = 0.0) -> float:
    """`total` and the values added one after the other, as a loop would (numpy's sum adds pairwise:
    other roundings; the analysis's sums must not move when a loop becomes an array pass)."""
    if not len(values):
        return total
    return float(np.add.accumulate(np.concatenate(([total], values)))[-1])


__all__ = ["np", "sequential_sum"]
