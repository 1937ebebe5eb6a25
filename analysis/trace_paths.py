"""Which trace files the paths of a command line name.

Why a module of its own: the harness asks which files a path names (checking an input before a run
uses it) as the pipeline does; both must see the same files, and the first need not import the pipeline.
"""
from __future__ import annotations

import os
from pathlib import Path

from analysis.errors import AnalysisError

TRACE_SUFFIXES = (".json", ".json.gz")


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given; a directory stands for the trace files directly inside it."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(f) for f in Path(p).iterdir() if f.name.endswith(TRACE_SUFFIXES) and f.is_file())
            if not found:
                raise AnalysisError(f"{p}: directory holds no .json or .json.gz trace files")
            files.extend(found)
        else:
            files.append(str(p))
    return files
