import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPO = ROOT
for entry in (str(ROOT), str(Path(__file__).resolve().parent)):
    if entry not in sys.path:
        sys.path.insert(0, entry)
# The shared folder sits beside the checkout (CI, main checkout) or two levels up (worktrees).
REAL = next((p / "shared" / "traces" / "real" for p in (ROOT.parent, ROOT.parent.parent)
             if (p / "shared" / "traces" / "real").exists()), ROOT.parent / "shared" / "traces" / "real")


def real_trace(rel: str) -> str:
    path = REAL / rel
    if not path.exists():
        pytest.skip(f"real trace {rel} not present beside the checkout (../shared/traces/real)")
    return str(path)


@pytest.fixture(scope="session")
def sglang_sources():
    """Every supported SGLang release's source files, from its wheel (downloaded once, then cached)."""
    from harness.sglang.version import supported_versions
    from harness.sglang.wheel_source import sglang_source_dir
    from harness.sglang.version import load_version

    return {v: sglang_source_dir(load_version(v)) for v in supported_versions()}
