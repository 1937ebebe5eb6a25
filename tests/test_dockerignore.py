"""The image's build context holds what the Dockerfile copies and nothing else: .dockerignore lets
each COPY source in and keeps the rest (the virtual environment, git history, traces, runs) out.

Synthetic of Docker's rule, not Docker itself (no image builder runs here): the patterns are applied
in order, the last that matches a path deciding, `!` letting it back in, `**/` matching any folder."""
from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _patterns() -> list[tuple[bool, str]]:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    return [(line.startswith("!"), line.lstrip("!")) for line in lines if line and not line.startswith("#")]


def _excluded(path: str) -> bool:
    """Docker's decision for a path of the context (a path is kept if its folder is let in again)."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for negated, pattern in _patterns():
        bare = pattern[3:] if pattern.startswith("**/") else None
        hit = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
            bare is not None and any(fnmatch.fnmatchcase(part, bare) for part in parts))
        if hit:
            excluded = not negated
    return excluded


def _copied_sources() -> list[str]:
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            sources += [s for s in shlex.split(line)[1:-1] if not s.startswith("--")]
    return sources


def test_every_copied_source_is_in_the_context_and_the_rest_is_not():
    sources = _copied_sources()
    assert {"pyproject.toml", "analysis", "harness", "scenarios"} <= set(sources)
    let_in = [s for s in sources if _excluded(s)]
    assert not let_in, f"the Dockerfile copies what .dockerignore leaves out: {let_in}"
    inner = ["analysis/data/rules/kernel_families.yaml", "harness/sglang/versions.yaml"]
    assert not [p for p in inner if _excluded(p)]
    kept_out = [".venv/bin/python", ".git/HEAD", "tests/data/README.md", "benchmarks/mutation_audit.py",
                "analysis/__pycache__/api.cpython-311.pyc", "runs/x/manifest.json"]
    assert all(_excluded(p) for p in kept_out), [p for p in kept_out if not _excluded(p)]
