"""The namers of a rank are asked in the documented order (analysis/attribution/namers), and the
first that answers names the step."""
from __future__ import annotations

from pathlib import Path

from analysis.attribution.namers import name_step
from analysis.attribution.namers.launch_points import LaunchPoints
from analysis.attribution.namers.order import namers_for
from analysis.attribution.signature import load_signature
from analysis.attribution.steps import segment_steps
from analysis.ingest.trace_loader import load_trace

DATA = Path(__file__).resolve().parent / "data"
EAGER = DATA / "accuracy/h100/dsv3ep-h100x1-e64k8-sidestream-bs8-eager-TP-0-EP-0-DECODE.trace.json.gz"
GRAPH = DATA / "accuracy/h100/dsv3ep-h100x1-e64k8-sidestream-bs8-graph-TP-0-EP-0-DECODE.trace.json.gz"


def _order(path: Path, signature: str, attribution: str) -> tuple[list[str], list]:
    trace = load_trace(str(path))
    steps = segment_steps(trace)
    namers = namers_for(trace, load_signature(signature), attribution, steps, LaunchPoints(trace))
    return [type(n).__name__ for n in namers], [name_step(namers, s)[1] for s in steps]


def test_module_ranges_come_first_and_name_an_eager_trace():
    order, hows = _order(EAGER, "generic", "auto")
    assert order == ["ModuleRangeNamer", "StructureNamer", "GenericNamer"]
    assert set(hows) == {"module_range"}


def test_template_mode_asks_only_the_kernels():
    order, hows = _order(EAGER, "generic", "template")
    assert order == ["StructureNamer", "GenericNamer"]
    assert set(hows) == {"structure"}


def test_a_graph_replay_without_ranges_falls_to_the_structure():
    order, hows = _order(GRAPH, "generic", "auto")
    assert order == ["StructureNamer", "GenericNamer"] and set(hows) == {"structure"}


def test_a_stack_signature_ends_the_order_with_its_template():
    order, _hows = _order(GRAPH, "sglang-sm90-deepep-ll", "template")
    assert order == ["TemplateNamer"]
