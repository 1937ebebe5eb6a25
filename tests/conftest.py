import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPO = ROOT
for entry in (str(ROOT), str(Path(__file__).resolve().parent)):
    if entry not in sys.path:
        sys.path.insert(0, entry)
from real_traces import ENV_REQUIRE, FETCH_HINT, candidate_dirs, load_sources, missing_message, real_traces_dir  # noqa: E402

# The public real traces (tests/real_traces.py says where they are looked for); the first candidate
# stands in when none is found, so paths still print.
REAL_FOUND = real_traces_dir()
REAL = REAL_FOUND or candidate_dirs()[0]
_real_users: set[str] = set()  # tests that asked for a real trace
_current_test = [""]
_real_outcomes: dict[str, str] = {}


def real_trace(rel: str) -> str:
    """The path of a public real trace; a missing one skips the test, or fails it when
    MOE_HARNESS_REQUIRE_REAL_TRACES=1 (as CI sets), saying where it was looked for."""
    _real_users.add(_current_test[0])
    found = [d / rel for d in [REAL, *candidate_dirs()] if (d / rel).exists()]
    if not found:
        listed = {t.path: t for t in load_sources()}
        required = rel not in listed or listed[rel].shared
        if os.environ.get(ENV_REQUIRE) == "1" and required:
            pytest.fail(f"{missing_message(rel)} ({ENV_REQUIRE}=1)", pytrace=False)
        pytest.skip(missing_message(rel))
    return str(found[0])


def pytest_runtest_setup(item):
    _current_test[0] = item.nodeid


def pytest_runtest_logreport(report):
    if report.nodeid in _real_users and (report.when == "call" or report.outcome != "passed"):
        _real_outcomes.setdefault(report.nodeid, report.outcome)


def pytest_terminal_summary(terminalreporter):
    """One line: how many real-trace checks ran, or that they could not and how to get the traces."""
    outcomes = list(_real_outcomes.values())
    if not outcomes:
        return
    passed, failed, skipped = (sum(1 for o in outcomes if o == k) for k in ("passed", "failed", "skipped"))
    if REAL_FOUND is None:
        line = (f"real-trace checks: none ran ({skipped} skipped, {failed} failed): the public real traces are not "
                f"here (looked in {', '.join(map(str, candidate_dirs()))}); get them with `{FETCH_HINT}`")
    else:
        line = (f"real-trace checks: {passed + failed} ran on the traces in {REAL}"
                + (f", {failed} failed" if failed else "") + (f", {skipped} skipped" if skipped else ""))
    terminalreporter.write_line(line, yellow=bool(skipped or failed), green=not (skipped or failed))


@pytest.fixture(scope="session")
def sglang_sources():
    """Every supported SGLang release's source files, from its wheel (downloaded once, then cached)."""
    from harness.sglang.version import load_version, supported_versions
    from harness.sglang.wheel_source import sglang_source_dir

    return {v: sglang_source_dir(load_version(v)) for v in supported_versions()}
