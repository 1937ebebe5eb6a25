"""The command line imports only the command it runs (harness/cli.py): `analyze` pays for no other
command's module and no pydantic (the scenario schema), each checked in a fresh interpreter."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "embedded-h100-demo_gpu-TP-0-DECODE.trace.json.gz"
# The modules that register a command (harness/commands/ also holds helpers shared by several)
COMMAND_MODULES = {f"harness.commands.{p.stem}" for p in (ROOT / "harness" / "commands").glob("*.py")
                   if "\ndef register(" in p.read_text()}
COMMAND_NAMES = ["analyze", "compare", "validate", "run", "plan", "export", "metrics", "report", "view", "ncu",
                 "learn-signature", "calibrate", "ttft-split"]


def _modules_after(argv: list[str]) -> tuple[int, set[str]]:
    """Run the command line in a fresh interpreter; its exit status and the modules it imported."""
    script = ("import json, sys\nfrom harness.cli import main\n"
              "try:\n    rc = main(json.loads(sys.argv[1]))\nexcept SystemExit as exc:\n    rc = exc.code\n"
              "print(json.dumps([rc, sorted(sys.modules)]), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argv)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    rc, modules = json.loads(done.stderr.strip().splitlines()[-1])
    return rc, set(modules)


def _foreign(modules: set[str], own: str | None) -> list[str]:
    return sorted(m for m in modules if (m in COMMAND_MODULES and m != own) or m.split(".")[0] == "pydantic")


def test_analyze_help_imports_no_other_command_and_no_pydantic():
    rc, modules = _modules_after(["analyze", "--help"])
    assert rc == 0 and "harness.commands.analyze" in modules
    assert not _foreign(modules, "harness.commands.analyze")


def test_analyze_of_a_trace_imports_no_other_command_and_no_pydantic(tmp_path):
    rc, modules = _modules_after(["analyze", str(TRACE), "--out", str(tmp_path / "out")])
    assert rc == 0 and (tmp_path / "out" / "d4.md").is_file()
    assert not _foreign(modules, "harness.commands.analyze")


def test_the_command_list_imports_no_command():
    rc, modules = _modules_after(["--help"])
    assert rc == 0 and not _foreign(modules, None)


def test_every_command_module_is_listed():
    from harness.commands import COMMANDS, module_of

    assert list(COMMANDS) == COMMAND_NAMES and {module_of(name) for name in COMMANDS} == COMMAND_MODULES


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_each_command_builds_its_own_full_parser(name):
    """The lazily built parser of a command line is that command's full parser; the summaries listed
    by `moe-harness --help` are the ones the commands' parsers carry."""
    from harness.cli import build_parser, chosen_command
    from harness.commands import COMMANDS

    parser = build_parser([name, "--help"])
    choices = parser._subparsers._group_actions[0].choices
    assert set(choices) == set(COMMANDS)
    full = build_parser(None)._subparsers._group_actions[0]
    assert choices[name].format_help() == full.choices[name].format_help()
    helps = {a.dest: a.help for a in full._choices_actions}
    assert helps == COMMANDS
    assert chosen_command([name, "x"]) == name and chosen_command(["--help"]) is None
