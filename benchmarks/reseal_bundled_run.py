"""Re-seal a bundled run directory's manifests after its traces were slimmed (or its tables analysed
again): each listed file that is present but differs gets its new size and sha256, and the manifest
says which and why under `bundled`.

Why: `analyze RUN_DIR` checks every file it reads again against the manifest (harness/manifest_check.py);
a trace slimmed for the repository (benchmarks/accuracy/slim_trace.py) no longer matches what the run
listed, and would be refused like a trace replaced by another run's. Files left out (kernels_long.*)
keep their entries: the manifest still says what the run wrote.

Usage: python benchmarks/reseal_bundled_run.py RUN_DIR [RUN_DIR ...]   (every manifest.json below each)
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

WHY = ("bundled in the repository: traces slimmed by benchmarks/accuracy/slim_trace.py (same kernels, launches "
       "and step labels) or tables analysed again; these entries re-sealed to the bundled bytes")


def reseal(manifest_path: Path) -> list[str]:
    """The paths whose entries changed (the manifest rewritten only if any did)."""
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    root = manifest_path.parent
    changed = []
    for entry in manifest.get("files") or []:
        path = root / entry["path"]
        if not path.is_file():
            continue
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if entry.get("sha256") != digest or entry.get("bytes") != len(data):
            entry["bytes"], entry["sha256"] = len(data), digest
            changed.append(entry["path"])
    if changed:
        bundled = manifest.setdefault("bundled", {"why": WHY, "resealed": []})
        bundled["resealed"] = sorted(set(bundled.get("resealed", [])) | set(changed))
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for run_dir in map(Path, argv):
        # the deepest first: a PD run's top manifest lists its roles' manifests
        for manifest_path in sorted(run_dir.rglob("manifest.json"), key=lambda p: (-len(p.parts), p)):
            changed = reseal(manifest_path)
            print(f"{manifest_path}: {len(changed)} entries re-sealed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
