import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
REAL = ROOT.parent / "shared" / "traces" / "real"


def real_trace(rel: str) -> str:
    path = REAL / rel
    if not path.exists():
        pytest.skip(f"real trace {rel} not present beside the checkout (../shared/traces/real)")
    return str(path)
