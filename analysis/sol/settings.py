"""SOL settings checked before any trace is read: what the harness asks for, from a scenario or the
command line, instead of building a Deployment and loading the model's shapes itself.

Why: which model has SOL shapes, which hardware a peaks file, what makes a deployment valid and how a
preset's config names the shapes are the SOL model's knowledge (analysis/sol/); the harness only says
what the scenario or the options give (harness/scenario_sol.py, harness/commands/sol_options.py).
"""
from __future__ import annotations

from analysis.errors import AnalysisError
from analysis.sol.estimate import Deployment, SolSettings
from analysis.sol.model_shapes import ModelShapes, load_model_shapes

DEPLOYMENT_FIELDS = Deployment.__struct_fields__  # batch_per_rank, kv_len, tp, dp, ep, mtp_draft_tokens, dtypes, mla_form
# A Hugging Face DeepseekV3Config keyword -> the ModelShapes field, where the names differ.
CONFIG_TO_SHAPES = {"num_hidden_layers": "num_layers"}


def sol_settings(hardware: str, model: str, checked: bool = True, engine_config: dict | None = None,
                 **deployment) -> SolSettings:
    """The settings of these deployment fields (DEPLOYMENT_FIELDS); `checked`: once the deployment is
    valid, else an AnalysisError (SolInputError) says which field is not (unchecked, the analysis
    checks them before any trace is read). engine_config: the model config the engine runs (an
    embedded preset with its overrides, DeepseekV3Config keywords); where a key differs from the
    model's SOL shapes, an AnalysisError names each one."""
    if engine_config is not None:
        mismatch = shapes_mismatch(model, engine_config, CONFIG_TO_SHAPES)
        if mismatch:
            raise AnalysisError(f"model {model!r} shapes differ from the engine's model config: {mismatch}")
    unknown = sorted(set(deployment) - set(DEPLOYMENT_FIELDS))
    if unknown:
        raise AnalysisError(f"unknown deployment fields: {', '.join(unknown)}")
    settings = SolSettings(hardware=hardware, deployment=Deployment(**deployment), model=model)
    if checked:
        settings.deployment.validate()
    return settings


def shapes_mismatch(model: str, config: dict, renamed: dict[str, str] | None = None) -> str:
    """The config keys (a preset with its overrides) whose value differs from the model's SOL shapes,
    as 'key a != b' (renamed: config key -> shapes field where they differ)."""
    shapes = load_model_shapes(model)
    fields = set(ModelShapes.__struct_fields__)
    diffs = []
    for key, value in sorted(config.items()):
        field = (renamed or {}).get(key, key)
        if field in fields and getattr(shapes, field) != value:
            diffs.append(f"{key} {value} != {getattr(shapes, field)}")
    return ", ".join(diffs)
