"""A dead server's log tail keeps the cause. Seen for real: SGLang 0.5.17 died of a CUDA device-side
assert, and the 60 last lines the harness reported held only the stack dump printed after it.
These start a real subprocess that prints like that crash and exits."""
from __future__ import annotations

import sys
import time

from harness.node.process import ServerProcess

CRASH = """
import sys
print("[2026-11-24 21:20:48] Ignore import error when loading sglang.srt.models.inkling: No module named 'helion'")
print("ScatterGatherKernel.cu:163: operator(): Assertion `idx_dim >= 0 && idx_dim < index_size` failed.")
print("terminate called after throwing an instance of 'c10::AcceleratorError'")
print("  what():  CUDA error: device-side assert triggered")
for i in range(200):
    print(f"frame #{i}: <unknown function> + 0x{i:x}")
print("Fatal Python error: Aborted")
sys.exit(134)
"""


def _run(tmp_path, script: str) -> ServerProcess:
    server = ServerProcess([sys.executable, "-c", script], {}, str(tmp_path / "server.log"))
    server.start()
    deadline = time.monotonic() + 30
    while server.exit_code() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.exit_code() == 134
    return server


def test_the_cause_comes_first_when_a_stack_dump_pushed_it_out_of_the_tail(tmp_path):
    tail = _run(tmp_path, CRASH).log_tail().splitlines()
    assert tail[0] == "first lines that look like a cause:"
    causes = tail[1:tail.index("--- last lines ---")]
    assert causes == ["ScatterGatherKernel.cu:163: operator(): Assertion `idx_dim >= 0 && idx_dim < index_size` failed.",
                      "  what():  CUDA error: device-side assert triggered"]
    assert tail[-1] == "Fatal Python error: Aborted"
    assert len(tail) == len(causes) + 2 + 60  # the last 60 lines as before


def test_a_short_log_is_shown_as_it_is(tmp_path):
    short = 'import sys\nprint("RuntimeError: no GPU")\nprint("bye")\nsys.exit(134)\n'
    assert _run(tmp_path, short).log_tail().splitlines() == ["RuntimeError: no GPU", "bye"]
