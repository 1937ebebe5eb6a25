"""What #48's columns would save, measured before the rewrite: the kernel table's pages and the D4 step
cells made from the columns a columnar attribution would hold, against today's code on KernelRows.

Why: the tables after the attribution are a third of `analyze` on a large decode trace; whether moving
them onto columns alone reaches #48's goal decides the order of the rewrite. A prototype, not the
product: the columns are built here from the rows (untimed: the attribution would fill them where it
makes the rows), the encoder writes the project's Parquet pages from them, and the check is that the
file's bytes and every cell's sums come out the same as today's.

Usage: python benchmarks/columns_prototype.py TRACE    (docs/performance.md, sixteenth session)
"""
from __future__ import annotations

import gc
import io
import operator
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.io import thrift_compact as tc  # noqa: E402
from analysis.io.parquet_writer import (  # noqa: E402
    _DATA_PAGE, _DICTIONARY_PAGE, _PLAIN, _RLE_DICTIONARY, FLOAT64, STRING, RowGroup, _Chunk, _plain_strings,
    encode_row_groups, write_row_groups,
)
from analysis.pipeline.attribute_ranks import attribute  # noqa: E402
from analysis.tables.d4 import step_cells  # noqa: E402
from analysis.tables.kernel_table import COLUMNS, METADATA  # noqa: E402

LABELS = ("section", "group", "module", "kernel", "source", "role", "rule", "module_path")  # a slot's fields
NUMBERS = ("step", "layer", "micro_batch", "stream", "start_us", "busy_us", "exposed_us")


def _chunk(np, name: str, kind: str, codes, table: list):
    """A dictionary-encoded column chunk from value ids (`codes`, ids into `table`), dictionary in order of
    first appearance, as the project's writer makes it."""
    uniq, first = np.unique(codes, return_index=True)
    order = uniq[np.argsort(first)]
    remap = np.empty(len(table), dtype=np.int64)
    remap[order] = np.arange(len(order))
    distinct = [table[i] for i in order]
    chunk = _Chunk.__new__(_Chunk)
    chunk.name, chunk.kind, chunk.rows, chunk.uncompressed, chunk.pages = name, kind, len(codes), 0, []
    plain = _plain_strings(distinct) if kind == STRING else np.array(distinct, dtype="<i8").tobytes()
    chunk._page(_DICTIONARY_PAGE, plain, _PLAIN, len(distinct))
    width, dtype = next((w, d) for w, d in ((8, "<u1"), (16, "<u2"), (32, "<u4")) if len(distinct) <= 1 << w)
    groups = (len(codes) + 7) // 8
    packed = np.zeros(groups * 8, dtype=dtype)
    packed[:len(codes)] = remap[codes]
    header = bytearray([width])
    tc._varint((groups << 1) | 1, header)
    chunk._page(_DATA_PAGE, bytes(header) + packed.tobytes(), _RLE_DICTIONARY)
    return chunk


def main(trace: str) -> None:
    gc.disable()
    rows = attribute([trace]).kernel_rows
    n = len(rows)
    started = time.process_time()
    import numpy as np
    numpy_s = time.process_time() - started
    # what a columnar attribution would hold (untimed)
    slots: dict[tuple, int] = {}
    slot = np.array([slots.setdefault(x, len(slots)) for x in map(operator.attrgetter(*LABELS), rows)], np.int32)
    names: dict[str, int] = {}
    name_code = np.array([names.setdefault(r.kernel_name, len(names)) for r in rows], np.int32)
    numbers = {f: np.array(list(map(operator.attrgetter(f), rows))) for f in NUMBERS}
    constants = {f: getattr(rows[0], f) for f in ("run", "rank", "stage")}
    assert all((r.run, r.rank, r.stage) == tuple(constants.values()) for r in rows)  # one rank, one stage

    started = time.process_time()
    today = list(encode_row_groups(rows, COLUMNS))
    rows_s = time.process_time() - started
    started = time.process_time()
    chunks = []
    for name, kind in COLUMNS:
        if name in LABELS:
            ids: dict[str, int] = {}
            per_slot = np.array([ids.setdefault(label[LABELS.index(name)], len(ids)) for label in slots], np.int64)
            chunks.append(_chunk(np, name, kind, per_slot[slot], list(ids)))
        elif name in constants:
            chunks.append(_chunk(np, name, kind, np.zeros(n, np.int64), [constants[name]]))
        elif name == "kernel_name":
            chunks.append(_chunk(np, name, kind, name_code, list(names)))
        elif kind == FLOAT64:
            chunk = _Chunk.__new__(_Chunk)
            chunk.name, chunk.kind, chunk.rows, chunk.uncompressed, chunk.pages = name, kind, n, 0, []
            chunk._page(_DATA_PAGE, numbers[name].astype("<f8").tobytes(), _PLAIN)
            chunks.append(chunk)
        else:
            values, inverse = np.unique(numbers[name], return_inverse=True)
            chunks.append(_chunk(np, name, kind, inverse, values.tolist()))
    columns_s = time.process_time() - started
    before, after = io.BytesIO(), io.BytesIO()
    write_row_groups(before, today, COLUMNS, METADATA)
    write_row_groups(after, [RowGroup(n, chunks)], COLUMNS, METADATA)
    print(f"{n} rows; numpy's import {numpy_s:.3f} CPU-s; the kernel table: from rows {rows_s:.3f} CPU-s, "
          f"from columns {columns_s:.3f}; the same bytes: {before.getvalue() == after.getvalue()}")

    started = time.process_time()
    cells = step_cells(rows)
    rows_s = time.process_time() - started
    started = time.process_time()
    labels = list(slots)
    in_layer = np.array([label[0] == "layer" for label in labels])[slot]
    cell_of: dict[tuple, int] = {}
    cell_ids = np.array([cell_of.setdefault(label[1:4], len(cell_of)) for label in labels])
    steps, step_index = np.unique(numbers["step"], return_inverse=True)
    key = (step_index * len(cell_of) + cell_ids[slot])[in_layer]
    size = len(steps) * len(cell_of)
    busy = np.bincount(key, weights=numbers["busy_us"][in_layer], minlength=size)  # added in row order from 0.0
    exposed = np.bincount(key, weights=numbers["exposed_us"][in_layer], minlength=size)
    columns_s = time.process_time() - started
    same = all(busy[at] == cell[0] and exposed[at] == cell[1]
               for (_rank, step), part in cells.items() for key3, cell in part.cells.items()
               for at in [int(np.searchsorted(steps, step)) * len(cell_of) + cell_of[key3]])
    print(f"the step cells' busy and exposed sums: from rows {rows_s:.3f} CPU-s, from columns {columns_s:.3f}; "
          f"the same floats: {same}")


if __name__ == "__main__":
    main(sys.argv[1])
