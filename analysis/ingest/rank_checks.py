"""Checks on what an analysis is given, before any trace is read: each file is one rank, each rank
is one file, and the options are numbers that mean something.

Why: two files claiming the same rank (or one file given twice) used to be merged, their kernel
times added; a file without a rank in its name among ranked ones became an extra "rank0"; a
negative accept length gave a negative time per token. Each is an AnalysisError saying how to fix it.
"""
from __future__ import annotations

import math
import os
import re

from analysis.errors import AnalysisError, shown_path
from analysis.ingest.rank_id import parse_rank_id, rank_id_for, run_prefix

RANK_POLICY = re.compile(r"^(mean|max|rank:.+)$")
_LABEL_HINT = "--label FILE=LABEL"


def check_rank_identity(files: list[str], labels: dict[str, str]) -> None:
    """Raise when a file is given twice, two files claim one rank (and stage), or a file without a
    rank in its name (and no --label) sits among files that have one."""
    seen: dict[str, str] = {}
    for path in files:
        key = os.path.realpath(path)
        if key in seen:
            same = path if path == seen[key] else f"{seen[key]} and {path}"
            raise AnalysisError(f"{same}: the same trace file is given twice; a file is one rank's trace, give it once")
        seen[key] = path
    if len(files) < 2:
        return
    named = [path for path in files if path in labels or parse_rank_id(path) is not None]
    unnamed = [path for path in files if path not in named]
    if named and unnamed:
        raise AnalysisError(
            f"{unnamed[0]}: no rank in the file name (SGLang's ...-TP-<n>[-DP-<n>][-EP-<n>][-STAGE].trace.json.gz), "
            f"while {named[0]} has one; rename it, or give it a rank with {_LABEL_HINT}")
    claimed: dict[str, list[tuple[str | None, str]]] = {}  # rank label -> (stage, file) of each file claiming it
    for index, path in enumerate(files):
        rank = rank_id_for(path, labels.get(path), index)
        for stage, other in claimed.get(rank.label, []):
            # the same stage twice, or a file without a stage (it holds every stage) beside any other
            if stage == rank.stage or stage is None or rank.stage is None:
                how = "their --label" if path in labels and other in labels else "their names"
                stages = {s for s in (stage, rank.stage) if s}
                said = f" ({'/'.join(sorted(stages))})" if stages else ""
                raise AnalysisError(
                    f"{shown_path(other)} and {shown_path(path)} both claim rank {rank.label}{said} (from {how}): if "
                    f"they are different ranks give each its own {_LABEL_HINT}; if they are the same rank of two "
                    f"runs, analyse each run on its own (or compare them as two columns)")
        claimed.setdefault(rank.label, []).append((rank.stage, path))
    _refuse_mixed_runs([f for f in files if f not in labels])


def _refuse_mixed_runs(files: list[str]) -> None:
    """SGLang names every rank's file of one profile with one prefix (`<prefix>-TP-...`: the run and
    the profile's id): files with different prefixes come from different runs, and their ranks would
    be summed as one deployment's. Files given a --label are the user's word and are not compared."""
    prefixes: dict[str, str] = {}
    for path in files:
        prefix = run_prefix(path)
        if prefix is not None:
            prefixes.setdefault(prefix, path)
    if len(prefixes) > 1:
        (a, first), (b, second) = list(prefixes.items())[:2]
        raise AnalysisError(
            f"{shown_path(first)} and {shown_path(second)} come from different runs (their names begin "
            f"{a!r} and {b!r} before the rank): analyse each run on its own, or compare them as two columns "
            f"(if they are one run, give each file its rank with {_LABEL_HINT})")


def check_rank_policy(policy: str, ranks: set[str]) -> None:
    """mean, max, or rank:LABEL naming a rank that was analysed."""
    if not RANK_POLICY.match(policy):
        raise AnalysisError(f"rank policy {policy!r}: use mean, max or rank:LABEL")
    if policy.startswith("rank:") and policy[5:] not in ranks:
        raise AnalysisError(f"rank policy {policy!r} names a rank that is not among the analysed ones: "
                            f"{', '.join(sorted(ranks))}")


def check_numbers(options) -> None:
    """accept_length and step_gap_us must be positive and finite; the rank policy well formed."""
    if options.accept_length is not None and not (math.isfinite(options.accept_length) and options.accept_length > 0):
        raise AnalysisError(f"accept length must be a positive number of tokens per verify step, "
                            f"not {options.accept_length}")
    if not (math.isfinite(options.step_gap_us) and options.step_gap_us > 0):
        raise AnalysisError(f"step gap must be a positive number of microseconds, not {options.step_gap_us}")
    if options.jobs is not None and options.jobs < 1:
        raise AnalysisError(f"jobs must be at least 1, not {options.jobs}")
    if not RANK_POLICY.match(options.rank_policy):
        raise AnalysisError(f"rank policy {options.rank_policy!r}: use mean, max or rank:LABEL")
