"""Validate SGLang command lines against the pinned version's own argument definitions.

The definitions come from `sglang/srt/server_args.py` read out of the pinned wheel with `ast`:
nothing is imported, so no GPU, torch or CUDA is needed, and a flag renamed or removed upstream
fails validation instead of failing on the first cluster hour.
"""
from __future__ import annotations

import ast
import difflib
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.sglang.version import SGLangPin, load_pin

SERVER_ARGS_MEMBER = "sglang/srt/server_args.py"
NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


class FlagError(ValueError):
    """A command line uses a flag or value the pinned SGLang does not accept."""


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]
    takes_value: bool
    multiple: bool = False          # nargs "+" or "*"
    choices: tuple[str, ...] | None = None
    value_optional: bool = False    # nargs "?"


@dataclass
class FlagTable:
    version: str
    flags: dict[str, FlagSpec] = field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return name in self.flags

    def validate(self, argv: list[str], where: str = "command") -> None:
        """Raise FlagError naming every bad token of argv (the arguments after launch_server)."""
        errors: list[str] = []
        i = 0
        while i < len(argv):
            token = argv[i]
            i += 1
            if not token.startswith("--"):
                errors.append(f"unexpected positional argument {token!r}")
                continue
            name, eq, inline_value = token.partition("=")
            spec = self.flags.get(name)
            if spec is None:
                close = difflib.get_close_matches(name, self.flags, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                errors.append(f"unknown flag {name}{hint}")
                continue
            if not spec.takes_value:
                if eq:
                    errors.append(f"{name} takes no value, got {inline_value!r}")
                continue
            values = [inline_value] if eq else []
            while not eq and i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
                if not spec.multiple:
                    break
            if not values and not spec.value_optional:
                errors.append(f"{name} needs a value")
                continue
            if spec.choices is not None:
                errors += [f"{name} {v!r} is not one of {list(spec.choices)}"
                           for v in values if v not in spec.choices]
        if errors:
            raise FlagError(f"{where}: not accepted by SGLang {self.version}: " + "; ".join(errors))


def _literal_strings(node: ast.AST, constants: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _module_constants(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """Module-level NAME = [\"a\", \"b\"] lists, used as `choices=NAME`."""
    found: dict[str, tuple[str, ...]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values = _literal_strings(stmt.value, {})
            if values is not None:
                found[stmt.targets[0].id] = values
    return found


def parse_server_args_source(source: str, version: str = "?") -> FlagTable:
    """Every `--flag` of every parser.add_argument(...) call in server_args.py source."""
    tree = ast.parse(source)
    constants = _module_constants(tree)
    table = FlagTable(version)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = tuple(a.value for a in node.args
                      if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"))
        if not names:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        action_name = action.value if isinstance(action, ast.Constant) else (
            action.attr if isinstance(action, ast.Attribute) else getattr(action, "id", None))
        nargs = kw.get("nargs")
        nargs_value = nargs.value if isinstance(nargs, ast.Constant) else None
        takes_value = action_name not in NO_VALUE_ACTIONS and action_name != "BooleanOptionalAction" \
            and nargs_value != 0
        choices = _literal_strings(kw["choices"], constants) if "choices" in kw else None
        spec = FlagSpec(names, takes_value, nargs_value in ("+", "*"), choices,
                        value_optional=nargs_value in ("?", "*"))
        all_names = list(names)
        if action_name == "BooleanOptionalAction":
            all_names += ["--no-" + n[2:] for n in names]
        for name in all_names:
            table.flags[name] = spec
    if not table.flags:
        raise FlagError(f"no add_argument flags found in server_args.py of SGLang {version}: "
                        "its CLI layout changed; update harness/sglang/flags.py with the pin")
    return table


def default_cache_dir() -> Path:
    base = os.environ.get("MOE_HARNESS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "moe-harness")
    return Path(base) / "sglang-dist"


def download_pinned_dist(pin: SGLangPin | None = None, cache_dir: Path | None = None) -> Path:
    """The pinned sglang wheel, downloaded once (pip download --no-deps) into the cache dir."""
    pin = pin or load_pin()
    target = (cache_dir or default_cache_dir()) / pin.version
    found = sorted(target.glob(f"sglang-{pin.version}-*.whl")) if target.exists() else []
    if found:
        return found[0]
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", pin.wheel_python_version, "--platform", pin.wheel_platform,
           f"sglang=={pin.version}", "-d", str(target)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    found = sorted(target.glob(f"sglang-{pin.version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise FlagError(f"could not download sglang=={pin.version} for flag validation "
                        f"({' '.join(cmd)}): {proc.stderr.strip()[-800:]}")
    return found[0]


def read_server_args_source(dist_path: Path) -> str:
    """server_args.py from a wheel (zip) or an sdist (tar.gz), without unpacking the rest."""
    if dist_path.suffix == ".whl":
        with zipfile.ZipFile(dist_path) as zf:
            return zf.read(SERVER_ARGS_MEMBER).decode()
    with tarfile.open(dist_path) as tf:
        for member in tf.getmembers():
            if member.name.endswith("/python/" + SERVER_ARGS_MEMBER) or member.name.endswith("/" + SERVER_ARGS_MEMBER):
                return tf.extractfile(member).read().decode()
    raise FlagError(f"{dist_path}: has no {SERVER_ARGS_MEMBER}")


def pinned_flag_table(cache_dir: Path | None = None) -> FlagTable:
    pin = load_pin()
    return parse_server_args_source(read_server_args_source(download_pinned_dist(pin, cache_dir)), pin.version)


ENVIRON_MEMBER = "sglang/srt/environ.py"


def read_sglang_env_names(dist_path: Path) -> set[str]:
    """SGLANG_* variables the pinned version declares (class attributes in srt/environ.py)."""
    with zipfile.ZipFile(dist_path) as zf:
        tree = ast.parse(zf.read(ENVIRON_MEMBER).decode())
    names = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.startswith(("SGLANG_", "SGL_"))}
    return names
