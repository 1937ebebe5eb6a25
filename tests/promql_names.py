"""Metric names selected by a PromQL expression, and Grafana variable substitution, for the
dashboard checks. Deliberately small: strings, label matchers, ranges and grouping clauses are
removed; what remains that is not a function call, keyword or number is a metric name.
"""
from __future__ import annotations

import re

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


def substitute_grafana(expr: str) -> str:
    """Make a dashboard query a plain PromQL query: built-ins get durations, user variables `.*`."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def metric_names(expr: str) -> set[str]:
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        token = match.group(0)
        following = text[match.end():].lstrip()
        if following.startswith("(") or token.lower() in KEYWORDS:
            continue
        if re.fullmatch(r"\d+[smhdwy]?", token) or (match.start() > 0 and text[match.start() - 1].isdigit()):
            continue
        names.add(token)
    return names
