"""Did every profiled decode step run at the scenario's batch? Steady state, checked after the fact.

SGLang names each forward step `step[<stage> bs=<requests> ...]` (`build_step_span_name`), bs being
the requests in that scheduler's batch (one scheduler per DP-attention group). A run waits for its
batch before profiling, but a window can still hold ramp-up steps (requests not yet all admitted)
or steps after some requests finished; their times are in the table like the others. This compares
every decode and verify step's bs with the batch one scheduler holds at the scenario's batch, and
names each step outside it.

In: StepRow (analysis.attribution.rows), the expected batch per scheduler (fewest, most).
Out: a ProfiledBatch with a status (ok, off, unknown), the steps outside, problem lines, a note.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.attribution.stages import BATCH_STAGES

# Stages whose steps run the scenario's batch: decode, and the verify step of speculative decoding
# (labelled TARGET_VERIFY up to SGLang 0.5.19, VERIFY from 0.5.20: both the target_verify stage).
# Draft and extend steps are not.
MAX_NAMED = 8  # steps named in the note under the table; problems name every one


@dataclass(frozen=True)
class OffStep:
    rank: str
    step: int
    stage: str
    batch: int


@dataclass(frozen=True)
class ProfiledBatch:
    expected: tuple[int, int] | None      # (fewest, most) requests per scheduler; None: not known
    checked: int = 0                      # decode / verify steps with a bs in their label
    unlabelled: int = 0                   # decode / verify steps whose label gives no bs
    off: list[OffStep] = field(default_factory=list)

    @property
    def status(self) -> str:
        """ok: every checked step at the scenario's batch; off: some are not; unknown: nothing to compare."""
        if self.expected is None or self.checked == 0:
            return "unknown"
        return "off" if self.off else "ok"

    def _expected_text(self) -> str:
        lo, hi = self.expected
        return f"{lo}" if lo == hi else f"{lo} to {hi}"

    def problems(self) -> list[tuple[str, str]]:
        """(rank, message) per step outside the scenario's batch."""
        if self.status != "off":
            return []
        lo, _ = self.expected
        return [(s.rank, f"step {s.step} ({s.stage}): bs={s.batch}, the scenario's batch per scheduler is "
                         f"{self._expected_text()}: " + ("a ramp-up step, or requests finished inside the window"
                                                           if s.batch < lo else "more requests than the scenario's"))
                for s in self.off]

    def note(self) -> str:
        """One line for under the D4 table."""
        if self.expected is None:
            return "Profiled batch: not checked (the batch per scheduler is not known for this deployment)."
        if self.checked == 0:
            return (f"Profiled batch: not checked: no decode or verify step label gives its batch (bs=); "
                    f"{self.unlabelled} step(s) without one.")
        if not self.off:
            return (f"Profiled batch: all {self.checked} decode/verify steps ran at the scenario's "
                    f"{self._expected_text()} requests per scheduler (bs= of SGLang's step labels).")
        named = ", ".join(f"{s.rank} step {s.step} bs={s.batch}" for s in self.off[:MAX_NAMED])
        more = f" and {len(self.off) - MAX_NAMED} more" if len(self.off) > MAX_NAMED else ""
        return (f"Profiled batch: {len(self.off)} of {self.checked} decode/verify steps did not run at the "
                f"scenario's {self._expected_text()} requests per scheduler (ramp-up or drain; their times are "
                f"in the table): {named}{more}.")

    def summary(self) -> dict:
        """JSON-able, for a run's manifest."""
        return {"status": self.status, "expected_per_scheduler": list(self.expected) if self.expected else None,
                "checked_steps": self.checked, "unlabelled_steps": self.unlabelled,
                "off_steps": [{"rank": s.rank, "step": s.step, "stage": s.stage, "bs": s.batch} for s in self.off]}


def check_profiled_batch(step_rows, expected: tuple[int, int] | None) -> ProfiledBatch:
    """Every decode / verify step's bs against the expected (fewest, most) requests per scheduler."""
    checked = unlabelled = 0
    off: list[OffStep] = []
    for row in step_rows:
        if row.stage not in BATCH_STAGES:
            continue
        if row.batch_size is None:
            unlabelled += 1
            continue
        checked += 1
        if expected is not None and not expected[0] <= row.batch_size <= expected[1]:
            off.append(OffStep(row.rank, row.step, row.stage, row.batch_size))
    return ProfiledBatch(expected, checked, unlabelled, off)
