"""Before any server starts, each node's own SGLang judges the planned command line.

The offline check reads the release's source; this one asks the installed SGLang itself, in the
node's Python (the launcher's interpreter, with the node's environment): node_check_script.py builds
SGLang's parser and parses the planned argv. Any unknown, deprecated or invalid flag, or an installed
release other than the one the plan is spelled for, ends the launch with the flag, the scenario key it
came from and SGLang's own words.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.node.secrets import Secrets

SCRIPT_PATH = Path(__file__).with_name("node_check_script.py")
MARK = "MOE_HARNESS_NODE_CHECK "


def run_node_check(python: str, server_args: list[str], env: dict[str, str], timeout_s: float = 600.0,
                   mode: str = "check") -> dict:
    """The script's JSON answer ({sglang_version, problems} or {error}; mode "version": {sglang_version}
    only); never raises."""
    cmd = [python, "-c", SCRIPT_PATH.read_text(encoding="utf-8"), mode, "--", *server_args]
    try:
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"cannot run the check with {python}: {exc}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"the check with {python} printed no answer (exit status {proc.returncode}): " + " | ".join(tail)}


def describe(results: dict[int, dict], plan) -> list[str]:
    """One line per refusal, naming the node, the flag, its scenario key and SGLang's message."""
    from harness.sglang.version import VersionError, checked_version

    lines = []
    for rank, result in sorted(results.items()):
        node = plan.nodes[rank]
        secrets = Secrets(getattr(node, "secret_values", ())) | Secrets.of_launch(node.env, node.argv)
        if result.get("error"):
            lines.append(f"node {rank}: {secrets.text(str(result['error']))}")
            continue
        installed = result.get("sglang_version")
        if installed != plan.sglang.version:
            try:
                advice = f"run with --sglang-version {checked_version(str(installed))}, or without it"
            except VersionError as exc:
                advice = str(exc)
            lines.append(f"node {rank}: SGLang {installed} is installed, the plan is spelled for "
                         f"{plan.sglang.version}: {advice}")
        for p in result.get("problems") or []:
            key = node.flag_keys.get(p.get("flag") or "")
            where = f"{p.get('flag')}" + (f" (from {key})" if key else "")
            lines.append(f"node {rank}: {where}: {p['kind']}: SGLang {installed} says: "
                         + secrets.text(str(p["message"])))
    return lines


def installed_release(answers: dict[int, dict]) -> str:
    """The one SGLang release every node has installed, from each node's `version` answer; a node that
    cannot tell, or nodes that differ, are a ValueError naming them."""
    errors = [f"node {rank}: {a['error']}" for rank, a in sorted(answers.items()) if a.get("error")]
    if errors:
        raise ValueError("cannot tell which SGLang the nodes have: " + "; ".join(errors))
    found = {rank: str(a.get("sglang_version")) for rank, a in sorted(answers.items())}
    if len(set(found.values())) != 1:
        raise ValueError("the nodes have different SGLang releases: "
                         + ", ".join(f"node {rank} {v}" for rank, v in found.items()))
    return next(iter(found.values()))
