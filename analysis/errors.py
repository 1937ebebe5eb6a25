"""Errors that say what is wrong and where."""
from __future__ import annotations


class AnalysisError(Exception):
    """Base for every error the analysis reports to the user."""


class TraceLoadError(AnalysisError):
    """A trace file could not be read: names the file and what is wrong with it."""

    def __init__(self, path: str, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class SignatureError(AnalysisError):
    """A signature file is malformed: names the file and the key."""

    def __init__(self, source: str, problem: str):
        self.source = str(source)
        self.problem = problem
        super().__init__(f"signature {self.source}: {problem}")


class ModelSpecError(AnalysisError):
    def __init__(self, source: str, problem: str):
        super().__init__(f"model spec {source}: {problem}")
