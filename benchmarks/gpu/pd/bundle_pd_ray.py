"""Bundle the PD run directories pd_ray.sh brought back (runs.tar.gz) into tests/data/sglang-real/pd-ray.

Each run directory is kept as the job wrote it, except: every trace slimmed (../../accuracy/slim_trace.py:
the analysis reads the same kernels, launches and step labels; the tables it writes are unchanged) and
each role's kernels_long.parquet left out (the bundled runs' rule, tests/data/sglang-real/ray-run), and
the manifests re-sealed to the slimmed bytes (../../reseal_bundled_run.py).

Usage: python benchmarks/gpu/pd/bundle_pd_ray.py RUNS_DIR [OUT_DIR]
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SLIM = REPO / "benchmarks" / "accuracy" / "slim_trace.py"
RESEAL = REPO / "benchmarks" / "reseal_bundled_run.py"  # the manifests then list the slimmed bytes


def bundle(run_dir: Path, out_root: Path) -> Path:
    out = out_root / run_dir.name
    if out.exists():
        raise SystemExit(f"{out} exists: remove it first")
    shutil.copytree(run_dir, out, ignore=shutil.ignore_patterns("kernels_long.parquet"))
    for trace in sorted(out.glob("*/traces/*.trace.json.gz")):
        slim = trace.with_name(trace.name + ".slim")
        subprocess.run([sys.executable, str(SLIM), str(trace), str(slim)], check=True, capture_output=True)
        slim.replace(trace)
    subprocess.run([sys.executable, str(RESEAL), str(out)], check=True, capture_output=True)
    return out


def main(argv: list[str]) -> int:
    runs = Path(argv[0])
    out_root = Path(argv[1]) if len(argv) > 1 else REPO / "tests" / "data" / "sglang-real" / "pd-ray"
    out_root.mkdir(parents=True, exist_ok=True)
    for run_dir in sorted(p for p in runs.iterdir() if (p / "manifest.json").is_file()):
        print(bundle(run_dir, out_root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
