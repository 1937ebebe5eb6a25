"""A signal that interrupts the building of a logging handler (Ray builds its loggers while it
connects) must not leave logging's exit-time flush printing a traceback after the run's message."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_half_built_stream_handler_is_mended_so_exit_prints_no_traceback():
    program = textwrap.dedent("""
        import logging
        from harness.interrupts import mend_half_built_log_handlers
        handler = logging.Handler.__new__(logging.StreamHandler)
        logging.Handler.__init__(handler)  # registered for the exit flush, as a signal would leave it
        if "mend" in __import__("sys").argv:
            mend_half_built_log_handlers()
    """)
    broken = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert "Traceback" in broken.stderr and "stream" in broken.stderr  # the defect, reproduced
    mended = subprocess.run([sys.executable, "-c", program, "mend"], capture_output=True, text=True, timeout=60)
    assert mended.returncode == 0 and "Traceback" not in mended.stderr, mended.stderr
