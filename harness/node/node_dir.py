"""Where each node keeps its own files of a run: `$MOE_HARNESS_NODE_DIR/<run>`, default
`<tmp>/moe-harness/<run>`.

Why one path for every node: /start_profile sends one output_dir to all ranks. Nodes share no file
system, so server logs and traces come back to the run directory through Ray; after a failure they
stay here (the manifest's `node_dir` says where).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

NODE_DIR_ENV = "MOE_HARNESS_NODE_DIR"


def node_dir_for(run_name: str) -> str:
    root = os.environ.get(NODE_DIR_ENV) or os.path.join(tempfile.gettempdir(), "moe-harness")
    return str(Path(root) / run_name)
