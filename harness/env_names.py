"""What may name an environment variable in a scenario: letters, digits and _, not starting with a digit.

Why: engine.env and engine.passthrough_env names become `export NAME=...` lines in the printed plan and
keys of every server's environment. A name such as `X=1; touch /tmp/pwned; Y` ran a command when the
plan was pasted into a shell, and a run refused it only after placement, in Ray's words. The schema
(harness/scenario.py) and the plan (harness/sglang/plan.py) both refuse such a name, naming the key.
"""
from __future__ import annotations

import re

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RULE = "letters, digits and _, not starting with a digit"


def bad_env_names(names) -> list[str]:
    """The names that are not variable names, in the order given."""
    return [name for name in names if not isinstance(name, str) or not ENV_NAME.match(name)]
