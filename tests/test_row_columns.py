"""A rank's rows sent from a worker as columns (analysis/attribution/kernel_columns.py) come back equal,
field for field, repeated strings still shared."""
from __future__ import annotations

import pickle

from analysis.attribution.kernel_columns import KernelColumns
from analysis.attribution.rows import KernelRow


def test_rows_come_back_equal_through_pickle():
    name = "void kernel<" + "x" * 300 + ">()"
    rows = [KernelRow("run", "TP0", i // 3, "decode", "layer", i - 1, 0, "moe", "experts", "gemm", name, 7,
                      1e12 + i * 0.125, -0.0 if i else float("inf"), 0.5, "structure", "experts" if i else "", "r")
            for i in range(5)]
    back = pickle.loads(pickle.dumps(KernelColumns.of_rows(rows), pickle.HIGHEST_PROTOCOL)).rows()
    assert back == rows
    assert [str(r.busy_us) for r in back] == [str(r.busy_us) for r in rows]  # -0.0 stays -0.0
    assert len({id(r.kernel_name) for r in back}) == 1
