"""Built-in data files (signatures, models, hardware): found by name or path, read as a YAML mapping."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec
import yaml

from analysis.errors import AnalysisError
from analysis.io.input_files import CONFIG_LIMIT_BYTES, InputFileError, read_input_text


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
_LONG_NUMBER = re.compile(r"\d{4301,}")


class _UniqueKeys(_SAFE_LOADER):
    """The safe loader refusing a key given twice in one mapping: PyYAML keeps the last silently, so
    `dp: 4` above `dp: 8` would plan with 8 while whoever reads the file sees 4. Keys a merge (`<<`)
    brings in are not given twice: the mapping's own keys override them, as YAML means."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base constructor says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice (lines {first} and {line}); keep one", key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, loader: type = _UniqueKeys):
    """yaml.safe_load of the text, through libyaml where it is installed, a key given twice in one
    mapping refused (_UniqueKeys). Every failure is a
    yaml.YAMLError, also those PyYAML lets out as other exceptions: a whole number of more than 4300
    digits (Python's limit on converting text to int) and nesting deeper than the parser's stack."""
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except ValueError as exc:
        long = _LONG_NUMBER.search(text)
        where = f" (line {text.count(chr(10), 0, long.start()) + 1})" if long else ""
        raise yaml.YAMLError(f"a number with more than 4300 digits{where}" if long else str(exc)) from None
    except RecursionError:
        raise yaml.YAMLError("nested too deeply to read") from None
    except yaml.MarkedYAMLError as exc:  # libyaml stops at its own depth, with its own words
        if "maximum nesting depth" not in str(exc.problem):
            raise
        raise yaml.YAMLError(f"nested too deeply to read (line {exc.problem_mark.line + 1})") from None


def _analysis_error(path: str, problem: str) -> AnalysisError:
    return AnalysisError(f"{path}: {problem}")


def read_yaml_file(path: Path, schema: type = dict, error: Callable[[str, str], Exception] = _analysis_error,
                   limit_bytes: int = CONFIG_LIMIT_BYTES):
    """The one reader of a YAML data file (a rule file, a threshold file, a page style, a user's
    settings): read within limit_bytes as UTF-8, parsed by libyaml, converted to `schema` (dict: any
    mapping); every problem is `error(path, why)`, a schema's naming the key (validation_problems)."""
    text = read_yaml_text(path, error, limit_bytes)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise error(str(path), f"not valid YAML: {' '.join(str(exc).split())}") from None
    try:
        return convert(data, schema)
    except msgspec.ValidationError as exc:
        raise error(str(path), validation_problems(exc)) from None


def read_packaged_struct(path: Path, schema: type):
    """A data file shipped with the package (a page style, a noise rule) as the schema's typed
    objects; a missing, unreadable or malformed file is an AnalysisError naming it."""
    return read_yaml_file(path, schema)


def read_yaml_text(path: Path, error: Callable[[str, str], Exception], limit_bytes: int = CONFIG_LIMIT_BYTES) -> str:
    """A settings file's text: bounded (CONFIG_LIMIT_BYTES), UTF-8; a problem is `error(path, why)`."""
    try:
        return read_input_text(path, limit_bytes, "a settings file")
    except InputFileError as exc:
        raise error(str(path), exc.problem) from None


def read_mapping(path: Path, error: Callable[[str, str], Exception]) -> dict:
    """A settings file whose top level is a mapping (read_yaml_file)."""
    data = read_yaml_file(path, object, error)
    if not isinstance(data, dict):
        raise error(str(path), "top level must be a mapping")
    return data


def checked_regex(value: str | None, what: str = "regex") -> str | None:
    """The value, or ValueError when it does not compile, so a bad regex fails at load naming its
    key (a schema's __post_init__ calls it through field_problem)."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{what} {value!r} is not a valid regex: {exc}") from None
    return value


def check_regexes(item: object, *fields: str) -> None:
    """A schema's __post_init__: each named field, a regex or None, compiles; else the error names
    the field (validation_problems puts it on the key path)."""
    for name in fields:
        check_field_regexes(name, [getattr(item, name)], name)


def check_field_regexes(field: str, values: Iterable[str | None], what: str) -> None:
    """Each of the values (a field's, or its keys) compiles as a regex; else the error names the
    field and says which value (`what`)."""
    for value in values:
        try:
            checked_regex(value, what)
        except ValueError as exc:
            raise field_problem(field, str(exc)) from None


def field_problem(field: str, message: str) -> ValueError:
    """An error of one field, raised in a schema's __post_init__ (msgspec reports the struct's path)."""
    return ValueError(f"field `{field}`: {message}")


def convert(data: object, schema: type, **fields) -> object:
    """data (YAML's mappings and lists) as the schema's typed objects; `fields` added to the top
    mapping. Raises msgspec.ValidationError (validation_problems says where)."""
    if fields:
        data = {**data, **fields} if isinstance(data, dict) else data
    return msgspec.convert(data, schema)


_AT = re.compile(r"^(.*?)(?: - at `\$(.*)`)?$", re.S)
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[(.*?)\]")
_ABOUT_FIELD = (
    (re.compile(r"^field `([^`]+)`: (.*)$", re.S), None),
    (re.compile(r"^Object contains unknown field `([^`]+)`$"), "not a known key"),
    (re.compile(r"^Object missing required field `([^`]+)`$"), "required key missing"),
)


def validation_problems(exc: msgspec.ValidationError) -> str:
    """A schema error as 'key.path: message', so the user sees which key is wrong: msgspec's
    `$.layer[0]` becomes layer.0, and an error about one field (unknown, missing, a bad regex)
    puts that field on the path."""
    message, raw_path = _AT.match(str(exc)).groups()
    keys = [m.group(1) or m.group(2) or m.group(3).strip("'\"") for m in _PATH_PART.finditer(raw_path or "")]
    for pattern, text in _ABOUT_FIELD:
        found = pattern.match(message)
        if found:
            keys.append(found.group(1))
            message = text or found.group(2)
            break
    return f"{'.'.join(keys) or '(top)'}: {message}"
