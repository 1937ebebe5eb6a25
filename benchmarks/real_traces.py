"""Where the shared real traces live: $MOE_HARNESS_REAL_TRACES, else a `shared/traces/real` folder
beside the checkout (the checkout may sit one or two levels below the folder holding `shared/`)."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
QWEN3_DECODE = "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def real_traces_dir() -> Path | None:
    configured = os.environ.get("MOE_HARNESS_REAL_TRACES")
    if configured:
        return Path(configured)
    for base in (REPO_ROOT.parent, REPO_ROOT.parent.parent):
        candidate = base / "shared" / "traces" / "real"
        if candidate.is_dir():
            return candidate
    return None


def real_trace_files(root: Path) -> list[Path]:
    """Every trace file under root (.json / .json.gz), without SGLang's execution_details.json."""
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
        and p.name != "execution_details.json"
    )
