"""The namers of one rank, in the order they are asked (see the package docstring)."""
from __future__ import annotations

from analysis.attribution.capture import Capture
from analysis.attribution.module_attribution import CaptureMap
from analysis.attribution.namers import Namer
from analysis.attribution.namers.capture import CaptureNamer, SignatureCaptureNamer
from analysis.attribution.namers.kernels import GenericNamer, StructureNamer, TemplateNamer
from analysis.attribution.namers.launch_points import LaunchPoints
from analysis.attribution.namers.module_ranges import ModuleRangeNamer
from analysis.attribution.signature import Signature
from analysis.attribution.steps import Step
from analysis.ingest.trace_model import RankTrace


def namers_for(trace: RankTrace, sig: Signature, attribution: str, steps: list[Step], points: LaunchPoints,
               capture: CaptureMap | None = None, captures: list[Capture] | None = None) -> list[Namer]:
    """`attribution`: auto (every source), modules (module ranges first, no signature capture),
    template (the signature's template or the kernels alone: no ranges, no captures)."""
    namers: list[Namer] = []
    if attribution in ("auto", "modules"):
        ranges = ModuleRangeNamer(trace, sig, points)
        if ranges:  # the rank's ranges can name layers
            namers.append(ranges)
    if attribution == "auto" and capture is not None:
        namers.append(SignatureCaptureNamer(capture))
    if attribution != "template" and captures is not None:
        namers.append(CaptureNamer(captures, steps))
    if not sig.generic:
        namers.append(TemplateNamer(sig))
    else:
        namers += [StructureNamer(first=not namers), GenericNamer(sig)]
    return namers
