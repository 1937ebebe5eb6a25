"""The per-kernel sums of the tables made from a rank's columns: the D4 step cells, the stream summary
and the shared expert's cells.

Why: each sums every kernel row of a rank (d4.step_cells, overlap.stream_summary and
share_overlap.share_cells walk KernelRows); from the columns the attribution writes
(analysis/attribution/kernel_columns.py) the sums are `numpy.bincount`s, which add each group's values
one after the other from 0.0 in row order, as the loops over rows do: the same floats, bit for bit
(tests/test_kernel_columns.py). The steps are read in blocks of about BLOCK_ROWS rows, so what the
sums hold for a while stays a few MB however large the trace.
"""
from __future__ import annotations

from analysis.attribution.kernel_columns import LABELS, KernelColumns, distinct_codes
from analysis.attribution.overlap import StreamSummary
from analysis.attribution.rows import SECTION_LAYER, SECTION_PRE, SECTION_SIDE
from analysis.numeric import np
from analysis.tables.d4 import MTP_GROUP, StepCells, _LayerSet
from analysis.tables.share_overlap import SHARE_GROUP, SHARED_MODULE, UNDER, ShareCells, cells_of_layer_rows

_SECTION, _GROUP, _MODULE, _KERNEL, _SOURCE = (LABELS.index(f) for f in ("section", "group", "module", "kernel", "source"))
_LAYER_BITS = 63  # layers below this are gathered as bits of one int64 per cell; others one by one
BLOCK_ROWS = 1 << 16


def _codes(keys) -> tuple[list, np.ndarray]:
    """Distinct keys (in order of first appearance) and each key's index into them, as int64s."""
    distinct, codes = distinct_codes(keys)
    return distinct, np.asarray(codes, dtype=np.int64)


def step_bounds(step: np.ndarray) -> list[tuple[int, int]] | None:
    """The rows of each step as (first, end), in row order; None where a step's rows are not together."""
    if not len(step):
        return []
    cuts = (np.flatnonzero(step[1:] != step[:-1]) + 1).tolist()
    starts = [0, *cuts]
    ends = [*cuts, len(step)]
    if len(set(step[starts].tolist())) != len(starts):
        return None
    return list(zip(starts, ends))


def _blocks(bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs of whole steps (indices into bounds) of about BLOCK_ROWS rows each."""
    out, lo = [], 0
    for i in range(1, len(bounds) + 1):
        if i == len(bounds) or bounds[i][1] - bounds[lo][0] > BLOCK_ROWS:
            out.append((lo, i))
            lo = i
    return out


def step_cells_of_columns(columns: KernelColumns) -> dict[tuple[str, int], StepCells] | None:
    """d4.step_cells of the columns' rows, the same cells; None where a step's rows are not together
    (the attribution writes each step's rows at once: never seen)."""
    bounds = step_bounds(columns.step)
    if bounds is None:
        return None
    slots = columns.slots
    cells = _codes([(s[_GROUP], s[_MODULE], s[_KERNEL]) for s in slots])
    sources = _codes([s[_SOURCE] for s in slots])
    place = np.asarray([0 if s[_SECTION] == SECTION_LAYER else 1 if s[_SECTION] == SECTION_PRE
                        else 3 if s[_SECTION] == SECTION_SIDE else 2 for s in slots], dtype=np.int64)
    mtp = np.asarray([s[_GROUP] == MTP_GROUP and s[_SECTION] not in (SECTION_LAYER, SECTION_SIDE) for s in slots],
                     dtype=bool)
    out: dict[tuple[str, int], StepCells] = {}
    for lo, hi in _blocks(bounds):
        _block_cells(columns, bounds[lo:hi], cells, sources, place, mtp, out)
    return out


def _block_cells(columns: KernelColumns, bounds: list[tuple[int, int]], cells: tuple[list, np.ndarray],
                 sources: tuple[list, np.ndarray], place_of_slot: np.ndarray, mtp_of_slot: np.ndarray,
                 out: dict[tuple[str, int], StepCells]) -> None:
    """The StepCells of a run of whole steps (bounds: their rows), added to `out` in row order."""
    first_row, end_row = bounds[0][0], bounds[-1][1]
    rows = slice(first_row, end_row)
    slot = columns.slot[rows]
    busy, exposed, layer = columns.busy_us[rows], columns.exposed_us[rows], columns.layer[rows]
    cell_keys, cell_of_slot = cells
    place = place_of_slot[slot]
    steps = len(bounds)
    step_at = np.repeat(np.arange(steps, dtype=np.int64), [end - first for first, end in bounds])
    # the layer rows' cells: (step, cell) keys, each key's first row, sums and layers
    in_layer = np.flatnonzero(place == 0)
    ncells = max(1, len(cell_keys))
    key = step_at[in_layer] * ncells + cell_of_slot[slot[in_layer]]
    keys, first_at, key_index = np.unique(key, return_index=True, return_inverse=True)
    busy_sum = np.bincount(key_index, weights=busy[in_layer], minlength=len(keys)).tolist()
    exposed_sum = np.bincount(key_index, weights=exposed[in_layer], minlength=len(keys)).tolist()
    layer_sets = _layer_sets(key_index, layer[in_layer], len(keys))
    # outside the layers: before (1), after (2), beside (3) per step; the MTP rows outside the layers
    outside = np.bincount(step_at * 4 + place, weights=busy, minlength=steps * 4).reshape(steps, 4).tolist()
    mtp = mtp_of_slot[slot]
    mtp_count = np.bincount(step_at[mtp], minlength=steps).tolist()
    mtp_sum = np.bincount(step_at[mtp], weights=busy[mtp], minlength=steps).tolist()
    cells_of_step: list[list[int]] = [[] for _ in range(steps)]
    key_step = (keys // ncells).tolist()
    for k in np.argsort(first_at, kind="stable").tolist():  # cells in the order their keys first appear
        cells_of_step[key_step[k]].append(k)
    key_cell = (keys % ncells).tolist()
    source_names, source_of_slot = sources
    source = source_of_slot[slot]
    for n, (first, end) in enumerate(bounds):
        step = StepCells()
        step.cells = {cell_keys[key_cell[k]]: [busy_sum[k], exposed_sum[k], layer_sets[k]] for k in cells_of_step[n]}
        step.outside = outside[n][1:]
        step.mtp_us = mtp_sum[n] if mtp_count[n] else None
        step.source_us = _by_source(source[first - first_row:end - first_row], busy[first - first_row:end - first_row],
                                    source_names)
        out[(columns.rank, int(columns.step[first]))] = step


def _by_source(source: np.ndarray, busy: np.ndarray, sources: list[str]) -> dict[str, np.ndarray]:
    """Each source's rows' busy us in row order (arrays: one Python float per kernel held 7 MB for a
    400 MB trace), sources in the order they first appear."""
    present, first = np.unique(source, return_index=True)
    if len(present) == 1:
        return {sources[int(present[0])]: busy}
    return {sources[code]: busy[source == code] for code in present[np.argsort(first)].tolist()}


def _layer_sets(key_index: np.ndarray, layer: np.ndarray, keys: int) -> list[_LayerSet]:
    """Each key's distinct layers as d4's _LayerSet."""
    sets = [_LayerSet() for _ in range(keys)]
    if not keys:
        return sets
    low = (layer >= 0) & (layer < _LAYER_BITS)
    bits = np.zeros(keys, dtype=np.int64)
    np.bitwise_or.at(bits, key_index[low], np.left_shift(np.int64(1), layer[low].astype(np.int64)))
    for s, value in zip(sets, bits.tolist()):
        s.bits = value
    for k, value in zip(key_index[~low].tolist(), layer[~low].tolist()):
        sets[k].add(value)
    return sets


def stream_summary_of_columns(columns: KernelColumns) -> list[StreamSummary]:
    """overlap.stream_summary of the columns' rows: per stream its kernels, busy and exposed us."""
    streams = columns.streams
    if not len(columns.stream):
        return []
    counts = np.bincount(columns.stream, minlength=len(streams)).tolist()
    busy = np.bincount(columns.stream, weights=columns.busy_us, minlength=len(streams)).tolist()
    exposed = np.bincount(columns.stream, weights=columns.exposed_us, minlength=len(streams)).tolist()
    return [StreamSummary(columns.rank, streams[i], counts[i], busy[i], exposed[i])
            for i in sorted(range(len(streams)), key=streams.__getitem__) if counts[i]]


def share_cells_of_columns(columns: KernelColumns) -> ShareCells:
    """share_overlap.share_cells of the columns' rows: KernelRows are made for the layer rows it reads
    (the shared expert's, the dispatch's and the combine's), none where no shared expert ran."""
    slots = columns.slots
    used = np.bincount(columns.slot, minlength=len(slots)) > 0
    if not any(s[_GROUP] == SHARE_GROUP and s[_MODULE] == SHARED_MODULE and on for s, on in zip(slots, used.tolist())):
        return {}
    read = np.asarray([s[_SECTION] == SECTION_LAYER and ((s[_GROUP], s[_MODULE]) == (SHARE_GROUP, SHARED_MODULE)
                                                          or (s[_GROUP], s[_MODULE]) in UNDER) for s in slots], dtype=bool)
    return cells_of_layer_rows(columns.rows_at(np.flatnonzero(read[columns.slot])))
