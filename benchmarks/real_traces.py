"""The public real traces for benchmarks: found where the tests find them (tests/real_traces.py)."""
from __future__ import annotations

from pathlib import Path

from tests.real_traces import REPO_ROOT, real_traces_dir  # noqa: F401 - re-exported for the benchmarks

QWEN3_DECODE = "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def real_trace_files(root: Path) -> list[Path]:
    """Every trace file under root (.json / .json.gz), without SGLang's execution_details.json."""
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
        and p.name != "execution_details.json"
    )
