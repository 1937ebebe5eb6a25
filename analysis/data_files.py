"""Built-in data files (signatures, models, hardware): found by name or path, read as a YAML mapping."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import ValidationError


def builtin_names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve(name_or_path: str, folder: Path, what: str, error: Callable[[str, str], Exception]) -> Path:
    """A YAML path as given, or `<folder>/<name>.yaml` for a built-in name; errors list the built-ins."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or os.sep in name_or_path):
        path = folder / f"{name_or_path}.yaml"
        if not path.exists():
            raise error(name_or_path, f"no built-in {what} of that name; built-ins: {', '.join(builtin_names(folder))}")
    if not path.is_file():
        raise error(str(path), "file not found")
    return path


# libyaml's parser where PyYAML has it (PyPI wheels do): the same data, read about 5x faster
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str):
    """yaml.safe_load of the text, through libyaml where it is installed."""
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader


def read_mapping(path: Path, error: Callable[[str, str], Exception]) -> dict:
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise error(str(path), f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise error(str(path), "top level must be a mapping")
    return data


def checked_regex(value: str | None, what: str = "regex") -> str | None:
    """A pydantic field validator's body: the value, or ValueError when it does not compile, so a
    bad regex fails at load naming its key (pydantic adds the path)."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{what} {value!r} is not a valid regex: {exc}") from None
    return value


def validation_problems(exc: ValidationError) -> str:
    """Pydantic errors as 'key.path: message' joined, so the user sees which key is wrong."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors())
