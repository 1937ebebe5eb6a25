"""Calibration: check a stack's signature against a trace that says which module launched each kernel.

Why: a shipped signature names kernels by the names they had on the stack it was written for; a
new library version renames them and the table silently goes wrong. A short calibration profile
with module information settles it per run: an eager pass recorded with stacks (nn.Module ranges),
or the decode trace itself named through its CUDA-graph capture traces. Both the signature and the
structural attribution are compared with that truth, per D4 group and module; the one that agrees
is used, and the report says how well each did.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.attribution.rank.agreement import GROUPS, Agreement, RangeTruth, shares, strip_ranges
from analysis.attribution.rank.attribute import RankOptions, attribute_rank
from analysis.attribution.capture import capture_files, load_capture
from analysis.errors import AnalysisError
from analysis.markdown_text import markdown_row, markdown_text
from analysis.attribution.signature import Signature, load_signature
from analysis.ingest.trace_loader import load_trace

AGREE_PP = 3.0  # a candidate agrees when every group's share is within this many percentage points
STRUCTURE = "generic"


@dataclass
class Candidate:
    signature: str
    agreement: Agreement

    @property
    def worst_pp(self) -> float:
        return abs(self.agreement.worst_group[1])

    @property
    def agrees(self) -> bool:
        a = self.agreement
        return self.worst_pp <= AGREE_PP and a.layers_agree


@dataclass
class Calibration:
    truth: str  # what the truth came from
    candidates: list[Candidate]
    chosen: str  # the signature to analyse this stack with
    reason: str
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """calibration.md (render_markdown)."""
        return render_markdown(self)

    def to_dict(self) -> dict:
        return {
            "truth": self.truth, "chosen": self.chosen, "reason": self.reason, "notes": self.notes,
            "agree_within_pp": AGREE_PP,
            "candidates": [{
                "signature": c.signature, "agrees": c.agrees, "worst_group_pp": round(c.worst_pp, 3),
                "layers_truth": c.agreement.truth.layers, "layers_found": c.agreement.found.layers,
                "groups_pct": {g: [round(c.agreement.truth.groups.get(g, 0.0), 3), round(c.agreement.found.groups.get(g, 0.0), 3)]
                               for g in GROUPS},
                "modules_gap_pp": {f"{g}/{m}": round(v, 3) for (g, m), v in sorted(c.agreement.module_gaps_pp().items())},
            } for c in self.candidates],
        }


class _CaptureTruth:
    """Truth: the decode trace named through its capture traces, loaded and attributed once;
    each signature is then tried on the same kernels without them."""

    def __init__(self, decode_path: str, capture_refs: list[str]):
        self.decode_path = decode_path
        trace = load_trace(decode_path)
        captures = [load_capture(f) for f in capture_files(capture_refs)]
        options = RankOptions()
        self.truth_rows, self.truth_steps = attribute_rank(trace, load_signature(STRUCTURE), None, options,
                                                           captures=captures)
        if not any(s.note.startswith("attributed by capture") for s in self.truth_steps):
            raise AnalysisError(f"{decode_path}: the capture traces name none of its steps: " + "; ".join(options.notes))
        self.notes = list(options.notes)
        self.stripped = strip_ranges(trace)

    def against(self, sig: Signature) -> Agreement:
        rows, steps = attribute_rank(self.stripped, sig, None, RankOptions(attribution="template"))
        return Agreement(self.decode_path, shares(self.truth_rows, self.truth_steps), shares(rows, steps),
                         "structure" if sig.generic else f"signature {sig.name}", list(self.notes))


def calibrate(signature: str, truth_trace: str | None = None, decode_trace: str | None = None,
              capture_refs: list[str] | None = None) -> Calibration:
    """Compare `signature` and the structural attribution with the truth; choose the one that agrees.

    The truth is either `truth_trace` (its own nn.Module ranges: an eager pass recorded with
    stacks) or `decode_trace` named through `capture_refs` (CUDA-graph capture traces). It is
    read and attributed once, then compared with each candidate.
    """
    names = [signature] if signature == STRUCTURE else [signature, STRUCTURE]
    if capture_refs and decode_trace is None:
        raise AnalysisError("calibrating with capture traces needs the decode trace they were captured for")
    if not capture_refs and truth_trace is None:
        raise AnalysisError("calibration needs a trace with module ranges or capture traces")
    sigs = [load_signature(name) for name in names]  # a bad signature fails before any trace is read
    if capture_refs:
        truth = f"{decode_trace} named by its capture traces"
        source: _CaptureTruth | RangeTruth = _CaptureTruth(decode_trace, capture_refs)
    else:
        truth = f"{truth_trace} (its nn.Module ranges)"
        source = RangeTruth(truth_trace)
    candidates = [Candidate(name, source.against(sig)) for name, sig in zip(names, sigs)]
    shipped = candidates[0]
    if shipped.agrees:
        chosen, reason = shipped.signature, f"{shipped.signature} agrees with the calibration (every group within {AGREE_PP:g} pp)"
    else:
        best = min(candidates, key=lambda c: (not c.agrees, c.worst_pp))
        chosen = best.signature
        group, gap = shipped.agreement.worst_group
        reason = (f"{shipped.signature} disagrees with the calibration ({group} {gap:+.1f} pp"
                  + ("" if shipped.agreement.layers_agree else
                     f", layers {shipped.agreement.found.layers} against {shipped.agreement.truth.layers}")
                  + f"): using {chosen}" + ("" if best.agrees else " (which does not agree either: check the calibration)"))
    notes = [n for c in candidates for n in c.agreement.notes]
    return Calibration(truth, candidates, chosen, reason, sorted(set(notes)))


def render_markdown(cal: Calibration) -> str:
    # the truth's file, signature and module names come from the user's files: escaped
    lines = ["# Calibration", "", markdown_text(f"Truth: {cal.truth}."), "", f"**{markdown_text(cal.reason)}.**", ""]
    header = ["group", *(f"{c.signature} (truth → found, %)" for c in cal.candidates)]
    lines += [markdown_row(header), "|" + "---|" * len(header)]
    for g in GROUPS:
        cells = []
        for c in cal.candidates:
            t, f = c.agreement.truth.groups.get(g, 0.0), c.agreement.found.groups.get(g, 0.0)
            cells.append("-" if t == f == 0 else f"{t:.1f} → {f:.1f} ({f - t:+.1f})")
        lines.append(markdown_row([g, *cells]))
    lines += ["", "Largest module gaps (pp):", ""]
    for c in cal.candidates:
        gaps = sorted(c.agreement.module_gaps_pp().items(), key=lambda kv: -abs(kv[1]))[:5]
        lines.append("- " + markdown_text(f"{c.signature}: " + ", ".join(f"{g}/{m} {v:+.1f}" for (g, m), v in gaps)))
    for note in cal.notes:
        lines.append(f"- note: {markdown_text(note)}")
    return "\n".join(lines) + "\n"
