"""Secrets travel in the environment but never appear in printed plans, logs or manifests.

Why by value: masking only names that look secret (`*_TOKEN`, `*_KEY`: harness/node/secret_names.py)
let through a passthrough variable with a plain name, a password in a Pushgateway URL and an
`--api-key` copied into the run's scenario.yaml. So a run first collects every value that is secret
(`Secrets`): the values of `engine.passthrough_env` and of secret-looking variables (passed or
inherited), the value after a secret-looking flag (`--api-key X`, `--api-key=X`) or in a secret-looking
assignment (`HF_TOKEN=X`), and the credentials of any URL (harness/node/url_secrets.py).

Why only where a secret stands: replacing every occurrence rewrote what is no secret (a passthrough
HF_HOME=/data/hf turned `--model-path /data/hf/m` into `***/m`; a token 30000 turned `--port 30000`
into `***`; `***` in a YAML copy is an alias, and the copy no longer loaded). So a secret is masked

- by its place, whatever its length: the value of a secret-looking or passthrough variable; of a
  secret-looking flag (`--api-key X` in a command line or a YAML list, `--api-key=X` anywhere); of a
  secret-looking name in `NAME=X` (a launcher's `env HF_TOKEN=X`, SGLang's `api_key='X'` in its log;
  not where X says none is set: `api_key=None`) or a YAML key (`HF_TOKEN: X`); a URL's userinfo and the
  value of a secret-looking query parameter;
- by its value, where that value stands whole: an argument, a variable's value, the value of
  `--flag=` or `NAME=`, a YAML scalar, a string in a manifest; and in free text (server logs,
  messages, the console) as a whole token: not next to a letter, digit, `_ - / + ~ %`, nor to a `.`
  that continues the token. So a secret is never masked as part of a path (`/data/hf/m`), a number
  (`130000`) or a longer word. Only a value of SHORTEST_SEARCHED_CHARS characters or more, not all
  digits, is looked for by value: a shorter one or a number cannot be told from ordinary words, ports
  and counts, so it is masked by its place only.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from harness.env_names import ENV_NAME
from harness.node.secret_names import is_secret_name, is_unset_value
from harness.node.url_secrets import url_credentials, without_url_credentials
from harness.node.yaml_masking import masked_yaml

__all__ = ["MASK", "SHORTEST_SEARCHED_CHARS", "Secrets", "is_secret_name", "mask_argv", "mask_env",
           "secret_argv_values", "url_credentials", "without_url_credentials"]

MASK = "***"
SHORTEST_SEARCHED_CHARS = 8
# a whole token: not inside a word, path or number (a `.` ends a token only where no token goes on)
_TOKEN_CHAR = r"[\w/+~%-]"
_BEFORE = rf"(?<!{_TOKEN_CHAR})(?<!{_TOKEN_CHAR}\.)"
_AFTER = rf"(?!{_TOKEN_CHAR})(?!\.{_TOKEN_CHAR})"
# NAME=value and --flag=value in free text (not `--flag value`: in a message the next word is prose);
# a quoted value keeps its quotes
_VALUE = r"""(?:'(?P<single>[^'\n]*)'|"(?P<double>[^"\n]*)"|(?P<bare>[^\s,;&()\[\]{}'"]+))"""
_NAMED_VALUE = re.compile(rf"(?<![\w.-])(?P<name>-{{0,2}}[A-Za-z_][\w.-]*)=" + _VALUE)


def _searchable(value: str) -> bool:
    return len(value) >= SHORTEST_SEARCHED_CHARS and not value.isdigit()


def _mask_named_values(text: str) -> str:
    """`HF_TOKEN=x`, `api_key='x'`, `--api-key=x`: the value of a secret-looking name, unless it says none is set."""
    def masked(match: re.Match) -> str:
        part = next(g for g in ("single", "double", "bare") if match.group(g) is not None)
        value = match.group(part)
        if not value or not is_secret_name(match.group("name")) or is_unset_value(value):
            return match.group(0)
        start, end = (i - match.start() for i in match.span(part))
        return match.group(0)[:start] + MASK + match.group(0)[end:]
    return _NAMED_VALUE.sub(masked, text)


def _argv_secrets(words: list[str]) -> list[tuple[int, int]]:
    """Where a command line holds secrets, as (word, first character of the secret in it): the value
    after a secret-looking flag (`--api-key X`: the whole next word, unless it is a flag itself:
    `--disable-auth --port 1`), of `--api-key=X`, and of a secret-looking assignment (`env HF_TOKEN=X`).
    The one reading of both secret_argv_values and mask_argv."""
    found = []
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name.startswith("--") and is_secret_name(name):
            if eq:
                found.append((i, len(name) + 1))
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                found.append((i + 1, 0))
        elif eq and value and ENV_NAME.match(name) and is_secret_name(name):
            found.append((i, len(name) + 1))
    return found


def secret_argv_values(argv: Iterable[str]) -> list[str]:
    """The value after each secret-looking flag (--api-key X, --api-key=X) and of each secret-looking
    assignment (a launcher's `env HF_TOKEN=X`)."""
    words = list(argv)
    return [words[i][start:] for i, start in _argv_secrets(words)]


class Secrets:
    """Every value a run must not write or print; `text`, `env`, `argv`, `data` and `yaml` mask them."""

    def __init__(self, values: Iterable[str] = ()):
        self.values = frozenset(v for v in values if isinstance(v, str) and v)
        # longest first, so a value holding another is masked whole
        searched = sorted((v for v in self.values if _searchable(v)), key=len, reverse=True)
        self._searched = re.compile(_BEFORE + "(?:" + "|".join(map(re.escape, searched)) + ")" + _AFTER) \
            if searched else None

    @classmethod
    def of_launch(cls, env: Mapping[str, str], argv: Iterable[str] = (), passthrough: Iterable[str] = ()) -> "Secrets":
        """A process's secrets: passthrough variables' values, secret-looking variables' values, secret
        flags' and assignments' values, and the credentials of every URL in its environment and command line."""
        words = list(argv)
        shared = set(passthrough)
        values = [v for k, v in env.items() if k in shared or is_secret_name(k)]
        values += secret_argv_values(words)
        for text in (*env.values(), *words):
            values += url_credentials(text)
        return cls(values)

    def __or__(self, other: "Secrets") -> "Secrets":
        return Secrets(self.values | other.values)

    def text(self, text: str) -> str:
        """Free text: URL credentials, secret-looking names' values, and every secret value that stands
        as a whole token, masked."""
        text = _mask_named_values(without_url_credentials(text))
        return self._searched.sub(MASK, text) if self._searched else text

    def word(self, word: str) -> str:
        """One value (an argument, a manifest string): *** when it is a secret, else masked as text."""
        return MASK if self._is_whole(word) else self.text(word)

    def env(self, env: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
        """An environment to show: a secret-looking or passthrough variable, or one whose value is a
        secret, as ***; the others masked as text."""
        shared = set(passthrough)
        return {k: (MASK if v and (k in shared or is_secret_name(k)) else self.word(v)) for k, v in env.items()}

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line to show: secret flags' values, and each argument that is a secret, masked."""
        return [word if word == MASK else self.word(word) for word in mask_argv(list(argv))]

    def yaml(self, text: str) -> str:
        """A YAML file's text (the run's scenario.source.yaml), still valid YAML with the same layout:
        the value of a secret-looking key, the item after a secret flag and every secret scalar masked."""
        def scalar(value: str, key: str | None, previous: str | None) -> str:
            if value and key is not None and is_secret_name(key) and not is_unset_value(value):
                return MASK
            if (value and previous and previous.startswith("--") and "=" not in previous
                    and is_secret_name(previous) and not value.startswith("--")):
                return MASK
            return self.word(value)
        return masked_yaml(text, scalar, self.text)

    def _is_whole(self, value: str) -> bool:
        """A whole value that is a secret long enough to tell from ordinary words (`8` never is)."""
        return value in self.values and _searchable(value)

    def data(self, value):
        """Every string in a JSON-like value (dict keys too) masked as a value."""
        if isinstance(value, str):
            return self.word(value)
        if isinstance(value, dict):
            return {self.data(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Secret-looking variables' values masked (by name; Secrets.env masks by value too)."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def mask_argv(argv: list[str]) -> list[str]:
    """Mask the value after a flag whose name looks secret (--api-key X, --api-key=X) and of a
    secret-looking assignment (env HF_TOKEN=X); a flag that follows is no value (--disable-auth --port 1)."""
    out = list(argv)
    starts: dict[int, int] = {}
    for i, start in _argv_secrets(out):  # a word that is a flag's value is masked whole
        starts[i] = min(start, starts.get(i, start))
    for i, start in starts.items():
        out[i] = out[i][:start] + MASK
    return out
