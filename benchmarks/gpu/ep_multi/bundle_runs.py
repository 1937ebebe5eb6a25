"""Copy drive.py run folders (as record_pairs.sh / record_four.sh bring them back) into a test-data folder.

Per configuration: its traces renamed `<prefix>-<label>-<rank>-decode.trace.json.gz` (already slimmed on
the GPU machine), a `<prefix>-<label>.run.json` with the launch plan, status and timings, the load
summary, the expert-load summary (busiest expert over the mean, per MoE layer) and the server log's
error lines, and the run's expert_load.json beside them. `--ranks` keeps only the first N ranks' traces.

    python benchmarks/gpu/ep_multi/bundle_runs.py --prefix sglang-0.5.17-dsv3-4l-fp8-h100x2 \\
        --out tests/data/sglang-real/tbo RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

_RANK = re.compile(r"-(TP-\d+(?:-DP-\d+)?(?:-EP-\d+)?)-decode\.trace\.json\.gz$")


def expert_load_summary(path: Path) -> dict | None:
    """Busiest expert over the mean tokens per expert, per MoE layer (min / median / max over layers)."""
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    ratios = []
    for layer in doc["layers"]:
        tokens = layer["tokens_per_expert"]
        if sum(tokens):
            ratios.append(max(tokens) * len(tokens) / sum(tokens))
    if not ratios:
        return None
    ratios.sort()
    return {"forward_passes": doc["forward_passes"], "moe_layers": len(ratios),
            "experts": len(doc["layers"][-1]["tokens_per_expert"]),
            "busiest_over_mean": {"min": round(ratios[0], 2), "median": round(ratios[len(ratios) // 2], 2),
                                  "max": round(ratios[-1], 2)}}


def bundle(run: Path, out: Path, prefix: str, ranks: int | None) -> list[Path]:
    status = json.loads((run / "status.json").read_text())
    label = run.name
    written = []
    traces = sorted((run / "traces").glob("*.trace.json.gz"))
    for trace in traces[:ranks] if ranks else traces:
        rank = _RANK.search(trace.name)
        if rank is None:
            raise SystemExit(f"{trace}: no rank in its name")
        dest = out / f"{prefix}-{label}-{rank.group(1)}-decode.trace.json.gz"
        shutil.copyfile(trace, dest)
        written.append(dest)
    log = (run / "server.log").read_text(errors="replace").splitlines() if (run / "server.log").is_file() else []
    record = {
        "label": label,
        "status": {k: v for k, v in status.items() if k != "files"},
        "plan": (run / "plan.sh").read_text(),
        "load_summary": json.loads((run / "load-summary.json").read_text()) if (run / "load-summary.json").is_file() else None,
        "expert_load": expert_load_summary(run / "expert_load" / "expert_load.json"),
        "server_log_errors": [line for line in log if re.search(r"Error|Traceback|Assertion", line)][:20],
        "traces_kept": [p.name for p in written],
    }
    dest = out / f"{prefix}-{label}.run.json"
    dest.write_text(json.dumps(record, indent=1) + "\n")
    written.append(dest)
    if (run / "expert_load" / "expert_load.json").is_file():
        load = out / f"{prefix}-{label}.expert_load.json"
        shutil.copyfile(run / "expert_load" / "expert_load.json", load)
        written.append(load)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--prefix", required=True)
    p.add_argument("--ranks", type=int, default=None, help="keep the first N ranks' traces only")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for run in a.runs:
        for path in bundle(run, a.out, a.prefix, a.ranks):
            print(path, path.stat().st_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
