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
