"""Deployment options for the speed-of-light columns, shared by analyze, compare and report."""
from __future__ import annotations

import argparse

from harness.arg_types import non_negative_int, positive_int


DEPLOYMENT_FIELDS = ("batch_per_rank", "kv_len", "tp", "dp", "ep", "mtp_draft_tokens", "weight_dtype", "kv_dtype",
                     "mla_form")


def add_sol_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "speed of light (DeepSeek-V3-style shapes from --model; docs/sol.md)",
        "--hardware with --batch-per-rank and --kv-len adds SOL us, % of SOL and bound per D4 row")
    g.add_argument("--hardware", default=None,
                   help="h800, h100, h200, b200 or a hardware YAML file (report: also the roofline peaks)")
    g.add_argument("--batch-per-rank", type=positive_int, default=None, help="requests in one rank's attention batch")
    g.add_argument("--kv-len", type=positive_int, default=None, help="mean KV-cache length of those requests, tokens")
    g.add_argument("--tp", type=positive_int, default=None, help="attention tensor parallelism (default 1)")
    g.add_argument("--dp", type=positive_int, default=None, help="attention data-parallel groups (default 1)")
    g.add_argument("--ep", type=positive_int, default=None, help="expert-parallel ranks (default 1)")
    g.add_argument("--mtp-draft-tokens", "--draft-tokens", dest="mtp_draft_tokens", type=non_negative_int, default=None,
                   help="MTP draft tokens verified per request per step (default 0)")
    g.add_argument("--weight-dtype", default=None, choices=["fp8", "bf16"], help="linear and expert weights (default fp8)")
    g.add_argument("--kv-dtype", default=None, choices=["fp8", "bf16"], help="MLA latent KV cache (default bf16)")
    g.add_argument("--mla-form", default=None, choices=["absorbed", "expanded"],
                   help="absorbed (SGLang decode, default) or expanded (transformers: per-head K/V cache)")


def deployment_given(args) -> dict:
    """The deployment fields set on the command line (unset ones are left to defaults or saved settings)."""
    return {name: getattr(args, name) for name in DEPLOYMENT_FIELDS if getattr(args, name, None) is not None}


def sol_settings_from(args, model: str | None, base=None, hardware_alone_ok: bool = False):
    """SolSettings from the options, over `base` (saved settings) when given; None when SOL is not asked for.

    Half-given options (a batch without hardware, hardware without batch and KV length) are errors,
    except hardware alone where the caller uses it for something else (report's roofline).
    """
    from analysis.api import AnalysisError, sol_settings

    given = deployment_given(args)
    hardware = args.hardware or (base.hardware if base else None)
    if not given and base is None:
        if args.hardware and not hardware_alone_ok:
            raise AnalysisError("--hardware adds SOL columns only with --batch-per-rank and --kv-len")
        return None
    if hardware is None:
        raise AnalysisError("SOL columns need --hardware (h800, h100, h200, b200 or a YAML file) "
                            f"besides {', '.join('--' + k.replace('_', '-') for k in given)}")
    fields = {f: getattr(base.deployment, f) for f in base.deployment.__struct_fields__} if base else {}
    fields.update(given)
    missing = [k for k in ("batch_per_rank", "kv_len") if k not in fields]
    if missing:
        raise AnalysisError("SOL columns need " + " and ".join("--" + k.replace("_", "-") for k in missing))
    return sol_settings(hardware, model or (base.model if base else "deepseek-v3"), checked=False, **fields)
