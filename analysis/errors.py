"""Errors that say what is wrong and where."""
from __future__ import annotations

import os


def shown_path(path: str | os.PathLike) -> str:
    """The path as text that any output can hold: bytes that are not UTF-8 (a file name from another
    system) appear as \\x escapes instead of failing the print, the CSV or the JSON that names the file."""
    text = os.fsdecode(path)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class AnalysisError(Exception):
    """Base for every error the analysis reports to the user."""


class TraceLoadError(AnalysisError):
    """A trace file could not be read: names the file and what is wrong with it."""

    def __init__(self, path: str, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{shown_path(self.path)}: {problem}")


class SignatureError(AnalysisError):
    """A signature file is malformed: names the file and the key."""

    def __init__(self, source: str, problem: str):
        self.source = str(source)
        self.problem = problem
        super().__init__(f"signature {self.source}: {problem}")


class ModelSpecError(AnalysisError):
    def __init__(self, source: str, problem: str):
        super().__init__(f"model spec {source}: {problem}")
