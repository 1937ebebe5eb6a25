"""Which names hold a secret: environment variables, command-line flags, URL query parameters.

Why by parts, not whole words: the whole-word rule (TOKEN, KEY, ... between `_`) let OPENAI_APIKEY and
MY_PASSPHRASE through in plain text. Why not any substring: TOKEN anywhere hides NUM_DRAFT_TOKENS,
--speculative-token-map and --tbo-token-distribution-threshold, which are no secrets. The words, and
where in a name each counts, are knowledge: secret_names.yaml next to this file.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

NAMES_FILE = Path(__file__).with_name("secret_names.yaml")
LISTS = ("anywhere", "last_part_ending", "last_part", "query_last_part", "not_secret_endings", "unset_values")
# parts: cut at _ - . and before an upper-case letter that follows a lower-case one or a digit (apiKey)
_PART_BREAK = re.compile(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")


@functools.lru_cache(maxsize=1)
def _words() -> dict[str, frozenset[str]]:
    from analysis.api import CONFIG_LIMIT_BYTES, load_yaml, read_input_text

    data = load_yaml(read_input_text(NAMES_FILE, CONFIG_LIMIT_BYTES, "the secret names file"))
    bad = [k for k in LISTS if not isinstance(data, dict) or not isinstance(data.get(k), list)]
    if bad:
        raise ValueError(f"{NAMES_FILE}: {', '.join(bad)} must be a list of words")
    words = {k: frozenset(str(w).upper() for w in data[k]) for k in LISTS}
    words["unset_values"] = frozenset(str(w) for w in data["unset_values"])  # as written
    return words


def name_parts(name: str) -> list[str]:
    """OPENAI_APIKEY -> [OPENAI, APIKEY]; --api-key -> [API, KEY]; apiKey -> [API, KEY]."""
    return [p.upper() for p in _PART_BREAK.split(name) if p]


def is_secret_name(name: str, in_query: bool = False) -> bool:
    """Whether a variable, a flag (its dashes aside) or, with in_query, a URL query parameter holds a
    secret (secret_names.yaml)."""
    words = _words()
    parts = name_parts(name)
    while parts and parts[-1].isdigit():  # OPENAI_API_KEY_2
        parts.pop()
    if not parts:
        return False
    joined = "_".join(parts)
    if any(joined == e or joined.endswith("_" + e) for e in words["not_secret_endings"]):
        return False
    last = parts[-1]
    whole = words["last_part"] | (words["query_last_part"] if in_query else frozenset())
    return (any(w in part for part in parts for w in words["anywhere"])
            or any(last.endswith(w) for w in words["last_part_ending"]) or last in whole)


def is_unset_value(value: str) -> bool:
    """`None`, `false`, ...: what a secret-looking setting shows when no secret is set."""
    return value in _words()["unset_values"]
