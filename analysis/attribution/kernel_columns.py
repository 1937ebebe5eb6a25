"""One rank's kernel rows as columns: what the attribution writes and the tables read.

Why: a large decode trace has hundreds of thousands of kernel launches, and every table after the
attribution (the kernel table's encoding, the D4 step cells, the stream summary) walked one Python
object per launch again; summed and encoded from arrays they cost a fraction (#48,
docs/performance.md). The labels a namer gives a kernel (section, group, module, kernel, source,
role, rule, module path) come from a few hundred distinct slots per rank, so a row holds a slot code;
kernel names and stages are codes too; numbers are arrays. KernelRows are made from the columns
only for a reader that wants objects (`rows()`: the report, the page, the tests).

The builder sizes each column once for the rank's rows and fills it step by step (a column grown
as it fills moves while the trace's kernels are let go around it, and the memory they leave is then
not reused: peak memory, docs/performance.md).
"""
from __future__ import annotations

import operator
from itertools import compress, repeat
from typing import TYPE_CHECKING

from analysis.attribution.rows import KernelRow

if TYPE_CHECKING:
    import numpy as np

    from analysis.attribution.step_times import StepTimes

# a slot's labels, in the order KernelRow holds them
LABELS = ("section", "group", "module", "kernel", "source", "role", "rule", "module_path")
_LABELS_OF = operator.attrgetter(*LABELS)
_NAME = operator.attrgetter("name")
_INTS = {"step": "i", "layer": "i", "micro_batch": "b"}  # array typecodes: int32, int8
_FLOATS = ("start_us", "busy_us", "exposed_us")
_CODES = ("stage", "slot", "name", "stream")
_LAST_KEPT = 16  # (column, length) pairs whose last values and codes ColumnsBuilder keeps


def _numpy():
    from analysis.numeric import np

    return np


class KernelColumns:
    """A rank's kernel rows in row order: `slots` (label tuples, LABELS order), `names`, `stages` and
    `streams` are the tables the int32 code arrays `slot`, `name`, `stage` and `stream` index; `step` and
    `layer` are int32, `micro_batch` int8, `start_us`, `busy_us`, `exposed_us` float64. Picklable (a rank
    worker sends it whole)."""

    __slots__ = ("run", "rank", "slots", "names", "stages", "streams", *_CODES, *_INTS, *_FLOATS)

    def __len__(self) -> int:
        return len(self.slot)

    @classmethod
    def of_rows(cls, rows: list[KernelRow]) -> KernelColumns:
        """KernelRows of one run and one rank as columns (the same values)."""
        np = _numpy()
        if len({(r.run, r.rank) for r in rows}) > 1:
            raise ValueError("rows of more than one run or rank")
        out = cls()
        out.run, out.rank = (rows[0].run, rows[0].rank) if rows else ("", "")
        for name, field in (("slot", LABELS), ("name", ("kernel_name",)), ("stage", ("stage",)), ("stream", ("stream",))):
            distinct, codes = distinct_codes(map(operator.attrgetter(*field), rows))
            setattr(out, name, np.asarray(codes, dtype=np.int32))
            setattr(out, name + "s", distinct)
        for name in (*_INTS, *_FLOATS):
            setattr(out, name, np.asarray(list(map(operator.attrgetter(name), rows)),
                                          dtype=_INTS.get(name, np.float64)))
        return out

    def label(self, field: str) -> tuple[list[str], np.ndarray]:
        """One slot label as (its distinct values, each slot's index into them)."""
        np = _numpy()
        at = LABELS.index(field)
        distinct, per_slot = distinct_codes(slot[at] for slot in self.slots)
        return distinct, np.asarray(per_slot, dtype=np.int32)

    def rows(self, first: int = 0, end: int | None = None) -> list[KernelRow]:
        """The rows (those from `first` to `end`) as KernelRows: the same values, field for field."""
        part = slice(first, len(self) if end is None else end)
        slot = self.slot[part].tolist()
        n = len(slot)
        if not n:
            return []
        labels = [list(map(values.__getitem__, slot)) for values in zip(*self.slots)]
        section, group, module, kernel, source, role, rule, module_path = labels
        return list(map(KernelRow, repeat(self.run, n), repeat(self.rank, n), self.step[part].tolist(),
                        list(map(self.stages.__getitem__, self.stage[part].tolist())), section,
                        self.layer[part].tolist(), self.micro_batch[part].tolist(), group, module, kernel,
                        list(map(self.names.__getitem__, self.name[part].tolist())),
                        list(map(self.streams.__getitem__, self.stream[part].tolist())),
                        self.start_us[part].tolist(), self.busy_us[part].tolist(), self.exposed_us[part].tolist(),
                        source, role, rule, module_path))

    def taken(self, indices) -> KernelColumns:
        """The rows at these positions (in the order given), as columns of the same tables."""
        part = KernelColumns()
        part.run, part.rank = self.run, self.rank
        part.slots, part.names, part.stages, part.streams = self.slots, self.names, self.stages, self.streams
        for name in (*_CODES, *_INTS, *_FLOATS):
            setattr(part, name, getattr(self, name)[indices])
        return part

    def rows_at(self, indices) -> list[KernelRow]:
        """The rows at these positions (in the order given) as KernelRows."""
        return self.taken(indices).rows()


def _coded(values: list, codes: dict) -> list[int]:
    """Each value's code, new values numbered as they come (`codes`: value -> code, grown here).
    One C-level lookup per value; only the values not seen before are numbered after it."""
    found = list(map(codes.get, values))
    if None in found:  # numbered in the order they come (a value twice in the step: its first code)
        setdefault = codes.setdefault
        for i in compress(range(len(found)), map(operator.is_, found, repeat(None))):
            found[i] = setdefault(values[i], len(codes))
    return found


def distinct_codes(values) -> tuple[list, list[int]]:
    """The distinct values in the order they first come, and each value's index into them."""
    codes: dict = {}
    found = _coded(list(values), codes)
    return list(codes), found


class ColumnsBuilder:
    """Fills a rank's columns step by step, as the attribution names each step: `rows`, the number
    of rows to come, sizes each column once (no column grows and moves while the trace's kernels are
    let go around it: peak memory)."""

    def __init__(self, run: str, rank: str, rows: int):
        np = _numpy()
        self.run, self.rank = run, rank
        self._slot_codes: dict = {}
        self._name_codes: dict[str, int] = {}
        self._stage_codes: dict[str, int] = {}
        self._stream_codes: dict[int, int] = {}
        self._filled = 0
        # per coded column, the values of the last step added and their codes (int32): a step that
        # repeats them (a decode replaying one CUDA graph) is not coded again
        self._last: dict[tuple[str, int], tuple[list, np.ndarray]] = {}
        self._columns = {name: np.empty(rows, dtype=np.int32) for name in _CODES}
        self._columns.update({name: np.empty(rows, dtype=code) for name, code in _INTS.items()})
        self._columns.update({name: np.empty(rows, dtype=np.float64) for name in _FLOATS})

    def add(self, step: int, stage: str, kernels: list, slots: list, layers: list[int],
            micro_batches: list[int], exposed_us, times: StepTimes) -> None:
        """One step's rows: its kernels, each one's slot (a frozen layers.Slot) or its label tuple
        already made (`slots` of tuples), layer, micro-batch and exposed time (a list, or
        float64 array), and the kernels' times (analysis/attribution/step_times.py)."""
        n = len(kernels)
        if not n:
            return
        first, end = self._filled, self._filled + n
        if end > len(self._columns["step"]):
            raise ValueError(f"more rows than the {len(self._columns['step'])} the columns were made for")
        part = slice(first, end)
        out = self._columns
        out["step"][part] = step
        out["stage"][part] = self._stage_codes.setdefault(stage, len(self._stage_codes))
        # a slot struct is its own key (frozen, hashed in C): no label tuple made a row; columns() folds
        # slots of one label tuple (a struct also holds its unit) into one code
        out["slot"][part] = self._coded_as_before("slot", slots, self._slot_codes)
        out["name"][part] = self._coded_as_before("name", list(map(_NAME, kernels)), self._name_codes)
        out["layer"][part] = layers
        out["micro_batch"][part] = micro_batches
        out["stream"][part] = self._coded_as_before("stream", times.stream_list, self._stream_codes)
        out["start_us"][part] = times.start_us
        out["busy_us"][part] = times.dur_us
        out["exposed_us"][part] = exposed_us
        self._filled = end

    def _coded_as_before(self, column: str, values: list, codes: dict):
        """_coded, with the codes of the last rows of this many values where they were these (equal
        values have one code, and a code once given stays): all of them, or, where most positions
        hold the very objects they held (a plan's slots, interned names), those positions' codes and
        the rest coded. Kept per length, so a step's few side rows between its kernels and the next
        step's do not hide the step before."""
        key = (column, len(values))
        last = self._last.pop(key, None)  # put back below: the one longest unused is let go first
        if last is not None and last[0] == values:
            kept = last
        else:
            found = None
            if last is not None:
                fresh = list(compress(range(len(values)), map(operator.is_not, values, last[0])))
                if len(fresh) <= len(values) // 2:  # new values are numbered in the order they come, as _coded does
                    found = last[1]  # written into the columns already: changed here, kept as the last
                    found[fresh] = _coded(list(map(values.__getitem__, fresh)), codes)
            if found is None:
                found = _numpy().asarray(_coded(values, codes), dtype="int32")
            kept = (list(values), found)
        if len(self._last) >= _LAST_KEPT:  # steps of many lengths
            del self._last[next(iter(self._last))]
        self._last[key] = kept
        return kept[1]

    def columns(self) -> KernelColumns:
        np = _numpy()
        out = KernelColumns()
        out.run, out.rank = self.run, self.rank
        out.names, out.stages = list(self._name_codes), list(self._stage_codes)
        out.streams = list(self._stream_codes)
        filled = self._filled
        for name, values in self._columns.items():  # every row filled: the columns as they are
            setattr(out, name, values if filled == len(values) else values[:filled].copy())
        # each key's label tuple, numbered as they first come: keys are numbered as they first come, so
        # the first key of each label tuple comes first in the rows
        out.slots, per_key = distinct_codes(key if isinstance(key, tuple) else _LABELS_OF(key) for key in self._slot_codes)
        out.slot = np.asarray(per_key, dtype=np.int32)[out.slot] if filled else out.slot
        return out
