"""A launch command says each setting once, in the place the harness plans with.

Why: argparse keeps the last of two `--port`s without a word, so a flag engine.extra_args gives
again (after the plan's own, or twice in extra_args) overrides what the driver, the checks and the
trace names were planned with, and the run fails after placement or after the ready timeout. And a
flag a scenario field renders (versions.yaml `flags`) belongs to that field even where the plan
leaves it out at its default: `--dp-size 4` in extra_args while engine.dp says 1 is a deployment the
plan never made. A field left unset (null: SGLang's default) owns nothing; a switch left false owns
only the flag that turns its feature on (not the side flags its template adds).
Other spellings of one flag (`--tensor-parallel-size` is `--tp-size`) count as the flag, where the
release's flag table (launch_flags.yaml) names them.
"""
from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

from harness.argv_tokens import flag_uses
from harness.sglang.flags import FlagTable
from harness.sglang.launch_flags import canonical_flag
from harness.sglang.render import scenario_key
from harness.sglang.version import SGLangVersion

PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _shown(name: str, values: list[str]) -> str:
    return " ".join([name, *values])


def field_owners(spec, row: SGLangVersion, table: FlagTable | None) -> dict[str, list[str]]:
    """{flag (primary spelling): the deployment fields whose setting it carries} for this release."""
    field_names = {f.name for f in fields(spec)}
    owners: dict[str, list[str]] = {}

    def own(flag: str, field: str) -> None:
        names = owners.setdefault(canonical_flag(flag, table), [])
        if field not in names:
            names.append(field)

    for field, template in row.flags.items():
        value = getattr(spec, field, None)
        flag_at = [i for i, token in enumerate(template) if token.startswith("--")]
        carries = {i: [f for f in PLACEHOLDER.findall(template[i + 1]) if f in field_names and f != field]
                   if i + 1 < len(template) and not template[i + 1].startswith("--") else [] for i in flag_at}
        for i in flag_at:  # a flag followed by another field's value carries that field too (--attn-dp-size {dp})
            for other in carries[i]:
                if getattr(spec, other, None) is not None:
                    own(template[i], other)
        if value is None:
            continue
        if value is False:  # only the flag that turns the feature on
            flag_at = [i for i in flag_at if not carries[i]][:1]
        for i in flag_at:
            own(template[i], field)
    return owners


def _field_value(spec, field: str) -> Any:
    return spec.tp_size if field == "tp" else getattr(spec, field)


def argv_problems(spec, row: SGLangVersion, planned: list[str], keys: dict[str, str],
                  table: FlagTable | None) -> list[str]:
    """One line per flag given twice in `planned + spec.extra_args`, and per extra_args flag that a
    scenario field owns; `planned` is the plan's own part of the server arguments, `keys` its
    {flag: scenario key}."""
    seen: dict[str, list[tuple[str, str]]] = {}   # flag -> (as given, where)
    for name, values in flag_uses(planned):
        seen.setdefault(canonical_flag(name, table), []).append((_shown(name, values), keys.get(name, "the plan")))
    extra = flag_uses(spec.extra_args)
    for name, values in extra:
        seen.setdefault(canonical_flag(name, table), []).append((_shown(name, values), "engine.extra_args"))
    problems = []
    for flag, places in seen.items():
        if len(places) < 2:
            continue
        times = "twice" if len(places) == 2 else f"{len(places)} times"
        given = ", ".join(f"{shown} from {where}" for shown, where in places)
        planned_with = places[0][1]
        why = ("SGLang keeps only the last" if planned_with == "engine.extra_args" else
               f"SGLang keeps only the last, the harness plans with {planned_with}")
        problems.append(f"engine.extra_args: {flag} given {times} ({given}): {why}; give it once")
    owners = field_owners(spec, row, table)
    planned_flags = {canonical_flag(name, table) for name, _ in flag_uses(planned)}
    for name, values in extra:
        flag = canonical_flag(name, table)
        if flag in planned_flags or flag not in owners:
            continue
        says = ", ".join(f"{scenario_key(f)} ({_field_value(spec, f)})" for f in owners[flag])
        problems.append(f"engine.extra_args: {_shown(name, values)} contradicts {says}: the plan and its checks "
                        f"follow the scenario's field; set it there, not in extra_args")
    return problems
