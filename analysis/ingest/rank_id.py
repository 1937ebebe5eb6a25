"""Rank identity from SGLang's profile file names.

SGLang names each rank's file `<prefix>-TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-{ep}][-{STAGE}].trace.json.gz`;
its profile V2 writes the stage in lower case (`-decode`, `-prefill`), read the same way.
"""
from __future__ import annotations

import os
import re

from analysis.ingest.trace_model import RankId

_SGLANG_NAME = re.compile(
    r"-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
    r"(?:-(?P<stage>[A-Za-z][A-Za-z_]*))?\.trace\.json(?:\.gz)?$"
)


def parse_rank_id(path: str) -> RankId | None:
    """RankId from an SGLang-style file name, or None when the name does not follow it."""
    match = _SGLANG_NAME.search(os.path.basename(path))
    if not match:
        return None
    parts = {k: (int(v) if v is not None and k != "stage" else v) for k, v in match.groupdict().items()}
    if parts["stage"] is not None:
        parts["stage"] = parts["stage"].upper()
    label = f"TP{parts['tp']}"
    for key in ("dp", "pp", "ep"):
        if parts[key] is not None:
            label += f"-{key.upper()}{parts[key]}"
    return RankId(label=label, **parts)


def run_prefix(path: str) -> str | None:
    """What an SGLang-style name holds before its rank (`<prefix>-TP-...`), the same for every rank
    of one profile; None when the name does not follow SGLang's."""
    name = os.path.basename(path)
    match = _SGLANG_NAME.search(name)
    return name[: match.start()] if match else None


def rank_id_for(path: str, explicit_label: str | None = None, index: int = 0) -> RankId:
    """The rank of a file: an explicit label wins, then the SGLang name, then the file's position."""
    parsed = parse_rank_id(path)
    if explicit_label is not None:
        if parsed is not None:
            return RankId(parsed.tp, parsed.dp, parsed.pp, parsed.ep, parsed.stage, explicit_label)
        return RankId(label=explicit_label)
    if parsed is not None:
        return parsed
    return RankId(label=f"rank{index}")
