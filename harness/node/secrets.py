"""Secrets travel in the environment but never appear in printed plans, logs or manifests.

Why by value: masking only names that look secret (`*_TOKEN`, `*_KEY`) let through a passthrough
variable with a plain name, a password in a Pushgateway URL and an `--api-key` copied into the run's
scenario.yaml. So a run first collects every value that is secret (`Secrets`): the values of
`engine.passthrough_env` and of secret-looking variables, the value after a secret-looking flag
(`--api-key X`, `--api-key=X`), and the credentials of any URL (`http://user:password@host`). Whatever
is written or printed then has each of those values replaced by `***`, wherever it occurs.

A value of fewer than SHORTEST_SEARCHED_CHARS characters is masked where it is written as a value (an
environment entry, a flag's value, a URL's credentials) but not searched for in free text (logs,
messages), where it would mask every such string of digits or letters.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Whole name parts only: HF_TOKEN, API_KEY, --api-key, AWS_SECRET_ACCESS_KEY; not NUM_DRAFT_TOKENS.
SECRET_NAME = re.compile(r"(^|[_-])(TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIALS?)($|[_-])", re.IGNORECASE)
MASK = "***"
SHORTEST_SEARCHED_CHARS = 4
# scheme://userinfo@ : the userinfo (user:password, or a token alone) is a credential
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name.lstrip("-")))


def url_credentials(text: str) -> list[str]:
    """The userinfo of every URL in text, and its password part alone (user:password -> both)."""
    found = []
    for match in URL_CREDENTIALS.finditer(text):
        userinfo = match.group("userinfo")
        found.append(userinfo)
        user, sep, password = userinfo.partition(":")
        found += [password] if sep and password else [user]
    return found


def without_url_credentials(text: str) -> str:
    """Every URL's credentials replaced: http://user:pw@host -> http://***@host."""
    return URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def secret_flag_values(argv: Iterable[str]) -> list[str]:
    """The value after each secret-looking flag: --api-key X, --api-key=X."""
    words = list(argv)
    found = []
    for i, token in enumerate(words):
        name, eq, value = token.partition("=")
        if name.startswith("--") and is_secret_name(name):
            found.append(value if eq else (words[i + 1] if i + 1 < len(words) else ""))
    return found


class Secrets:
    """Every value a run must not write or print; `text`, `env`, `argv` and `data` mask them."""

    def __init__(self, values: Iterable[str] = ()):
        self.values = frozenset(v for v in values if isinstance(v, str) and v)
        # longest first, so a value holding another is masked whole
        self._searched = sorted((v for v in self.values if len(v) >= SHORTEST_SEARCHED_CHARS), key=len, reverse=True)

    @classmethod
    def of_launch(cls, env: Mapping[str, str], argv: Iterable[str] = (), passthrough: Iterable[str] = ()) -> "Secrets":
        """A process's secrets: passthrough variables' values, secret-looking variables' values, secret
        flags' values, and the credentials of every URL in its environment and command line."""
        words = list(argv)
        shared = set(passthrough)
        values = [v for k, v in env.items() if k in shared or is_secret_name(k)]
        values += secret_flag_values(words)
        for text in (*env.values(), *words):
            values += url_credentials(text)
        return cls(values)

    def __or__(self, other: "Secrets") -> "Secrets":
        return Secrets(self.values | other.values)

    def text(self, text: str) -> str:
        """Free text with every secret value (of SHORTEST_SEARCHED_CHARS or more) and URL credential masked."""
        for value in self._searched:
            if value in text:
                text = text.replace(value, MASK)
        return without_url_credentials(text)

    def env(self, env: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
        """An environment to show: a secret-looking or passthrough variable, or one whose value is a
        secret, as ***; the others with any secret inside them masked."""
        shared = set(passthrough)
        return {k: (MASK if v and (k in shared or is_secret_name(k) or self._is_searched(v)) else self.text(v))
                for k, v in env.items()}

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line to show: secret flags' values and every secret value in a word masked."""
        return [MASK if self._is_searched(word) else self.text(word) for word in mask_argv(list(argv))]

    def _is_searched(self, value: str) -> bool:
        """A whole value that is a secret long enough to tell from ordinary words (`8` never is)."""
        return len(value) >= SHORTEST_SEARCHED_CHARS and value in self.values

    def data(self, value):
        """Every string in a JSON-like value (dict keys too) masked as text."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Secret-looking variables' values masked (by name; Secrets.env masks by value too)."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def mask_argv(argv: list[str]) -> list[str]:
    """Mask the value after a flag whose name looks secret (--api-key X, --api-key=X)."""
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if token.startswith("--") and is_secret_name(token.split("=", 1)[0]):
            if "=" in token:
                out.append(token.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(token)
                hide_next = True
            continue
        out.append(token)
    return out


def secret_values(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """What must not be echoed, named for mask_text: secret-looking variables, and the values of the
    flags mask_argv masks (--api-key X, --api-key=X)."""
    found = {k: v for k, v in env.items() if is_secret_name(k)}
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if name.startswith("--") and is_secret_name(name):
            found[name] = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


def mask_text(text: str, env: dict[str, str]) -> str:
    """Replace every secret value of env that occurs in text (for log lines and error messages)."""
    for name, value in env.items():
        if is_secret_name(name) and value and len(value) >= SHORTEST_SEARCHED_CHARS:
            text = text.replace(value, MASK)
    return text
