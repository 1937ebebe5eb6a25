"""The fake SGLang's importable side: what a node's Python sees where SGLang is installed.

Only what the harness's node check imports: `sglang.__version__` and
`sglang.srt.server_args.ServerArgs.add_cli_args`. Put this folder on PYTHONPATH (the test scenarios do).
"""
import os

__version__ = os.environ.get("FAKE_SGLANG_VERSION", "0.5.23")
