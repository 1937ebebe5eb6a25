"""Which Engine class runs each `engine.kind`, named as "module:Class" and imported only when a run asks.

Why names, not imports: base.py defines the interface the engines implement, so it cannot import them
(each engine imports base.py: that was an import cycle), and SGLang's engine imports Ray at the top,
which the driver connects to first (a missing Ray is then reported in that phase, not at start-up).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from harness.engines.base import Engine, RunContext


@dataclass(frozen=True)
class EngineEntry:
    target: str  # "package.module:Class", a subclass of base.Engine
    run_options: tuple[str, ...] = ()  # keyword arguments of the class beyond the RunContext, given per run


ENGINES: dict[str, EngineEntry] = {
    "embedded": EngineEntry("harness.engines.embedded.ray_engine:EmbeddedRayEngine"),
    # sglang_version: the release the plan is spelled for (None: the one installed on the nodes)
    "sglang": EngineEntry("harness.engines.sglang:SGLangEngine", run_options=("sglang_version",)),
    # an sglang scenario with engine.disaggregation: a prefill/decode pair and its router
    "sglang_pd": EngineEntry("harness.engines.sglang_pd:SGLangPDEngine", run_options=("sglang_version",)),
}


def engine_key(scenario) -> str:
    """The ENGINES entry a scenario runs under: its engine.kind, or sglang_pd for a PD pair."""
    kind = scenario.engine.kind
    return "sglang_pd" if kind == "sglang" and scenario.engine.disaggregation is not None else kind


def engine_class(kind: str) -> type[Engine]:
    """The class `engine.kind` names, imported now."""
    module, _, name = ENGINES[kind].target.partition(":")
    return getattr(importlib.import_module(module), name)


def engine_for(ctx: RunContext, **run_options) -> Engine:
    """The engine `engine.kind` names, given the run options it takes (the others are not its concern).

    run_options: sglang_version, the SGLang release an sglang scenario is planned for (None: the one
    installed on the nodes)."""
    key = engine_key(ctx.scenario)
    entry = ENGINES[key]
    return engine_class(key)(ctx, **{k: v for k, v in run_options.items() if k in entry.run_options})
