"""Errors of the metrics and export code: each names the file (and line or column) at fault."""
from __future__ import annotations


class RunDataError(Exception):
    """A run directory file is missing or malformed."""

    def __init__(self, where: str, problem: str):
        self.where = str(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")
