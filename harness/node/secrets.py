"""Secrets travel in the environment but never appear in printed plans, logs or manifests."""
from __future__ import annotations

import re

# Whole name parts only: HF_TOKEN, API_KEY, --api-key, AWS_SECRET_ACCESS_KEY; not NUM_DRAFT_TOKENS.
SECRET_NAME = re.compile(r"(^|[_-])(TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIALS?)($|[_-])", re.IGNORECASE)
MASK = "***"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name.lstrip("-")))


def mask_env(env: dict[str, str]) -> dict[str, str]:
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
        if is_secret_name(name) and value and len(value) >= 4:
            text = text.replace(value, MASK)
    return text
