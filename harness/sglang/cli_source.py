"""Read a release's launch flags out of its source with `ast`: nothing is imported or run.

SGLang declares its CLI two ways, and releases mix them (versions.yaml says which files):
- plain `parser.add_argument("--flag", ...)` calls (every release; the only way up to 0.5.13);
- annotated fields, `name: A[T, "help" | Arg(help=..., aliases=..., choices=..., action=...)]`,
  turned into flags by `arg_groups/arg_utils.py:add_cli_args_from_dataclass` (in server_args.py's
  ServerArgs from 0.5.14, in `arg_groups/fields/*.py` msgspec structs by 0.5.23). That function's
  rules are mirrored here: `--` + the field name with `-` (or `cli_name`), aliases, no_cli skipped,
  bool -> store_true, list -> nargs "+", Literal -> choices.
A flag is deprecated when its action is one of SGLang's Deprecated*Action classes or its help starts
with "Deprecated" / "(Deprecated" / "[Deprecated]".
"""
from __future__ import annotations

import ast
import re

from harness.sglang.flags import FlagError, FlagSpec, FlagTable

NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version",
                    "DeprecatedStoreTrueAction"}
ANNOTATED_NAMES = {"A", "Annotated"}
DEPRECATED_HELP = re.compile(r"^\W*deprecated\b", re.IGNORECASE)


def _name_of(node: ast.AST | None) -> str | None:
    """`foo` or `a.b` (dotted) for a Name / Attribute node."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name_of(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return None


class Constants(dict):
    """Known string lists by (dotted) name, plus single string constants in `.scalars`."""

    def __init__(self):
        super().__init__()
        self.scalars: dict[str, str] = {}


def _strings(node: ast.AST, constants: Constants) -> tuple[str, ...] | None:
    """The strings the expression surely evaluates to, or None when it cannot be known here."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out: list[str] = []
        for e in node.elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e.value)
            elif isinstance(e, ast.Starred) and _strings(e.value, constants) is not None:
                out += _strings(e.value, constants)
            elif _name_of(e) in constants.scalars:
                out.append(constants.scalars[_name_of(e)])
            else:
                return None
        return tuple(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _strings(node.left, constants), _strings(node.right, constants)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.Call) and _name_of(node.func) in ("list", "tuple", "sorted") and len(node.args) == 1:
        return _strings(node.args[0], constants)
    name = _name_of(node)
    return constants.get(name) if name else None


def collect_constants(trees: list[ast.Module]) -> Constants:
    """Module-level `NAME = [...]` and class-level `Class.NAME = [...]` string lists, across files."""
    found = Constants()
    for _ in range(3):  # later lists may be built from earlier ones, in any file order
        for tree in trees:
            for scope, prefix in [(tree.body, "")] + [(n.body, n.name + ".") for n in tree.body
                                                      if isinstance(n, ast.ClassDef)]:
                for stmt in scope:
                    target = value = None
                    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                        target, value = stmt.targets[0], stmt.value
                    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                        target, value = stmt.target, stmt.value
                    if not isinstance(target, ast.Name):
                        continue
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        found.scalars[prefix + target.id] = value.value
                        continue
                    strings = _strings(value, found)
                    if strings is not None:
                        found[prefix + target.id] = strings
    return found


def _keywords(call: ast.Call) -> dict[str, ast.AST]:
    return {k.arg: k.value for k in call.keywords if k.arg}


def _const(node: ast.AST | None):
    return node.value if isinstance(node, ast.Constant) else None


def _help_text(node: ast.AST | None) -> str:
    """The help string, joining implicit concatenations and f-string literal parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _help_text(node.left) + _help_text(node.right)
    return ""


def _deprecation(action: str | None, help_text: str, new_flag: str | None) -> tuple[bool, str | None]:
    deprecated = bool(action and action.startswith("Deprecated")) or bool(DEPRECATED_HELP.match(help_text))
    if not deprecated:
        return False, None
    if new_flag:
        return True, f"use {new_flag}"
    return True, help_text.strip() or None


def _add_argument_specs(tree: ast.Module, constants) -> list[FlagSpec]:
    specs = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = tuple(a.value for a in node.args
                      if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"))
        if not names:
            continue
        kw = _keywords(node)
        action = _const(kw.get("action")) or (_name_of(kw["action"]).rsplit(".", 1)[-1] if "action" in kw else None)
        nargs = _const(kw.get("nargs"))
        if action in NO_VALUE_ACTIONS or action == "BooleanOptionalAction":
            takes_value = False
        elif action in ("DeprecatedStoreConstAction", "DeprecatedAction"):  # nargs=0 unless the call says
            takes_value = "nargs" in kw and nargs != 0
        else:
            takes_value = nargs != 0
        choices = _strings(kw["choices"], constants) if "choices" in kw else None
        deprecated, replacement = _deprecation(action, _help_text(kw.get("help")), _const(kw.get("new_flag")))
        spec = FlagSpec(names, takes_value, nargs in ("+", "*"), choices, nargs in ("?", "*"),
                        deprecated, replacement)
        specs.append(spec)
        if action == "BooleanOptionalAction":
            specs.append(FlagSpec(tuple("--no-" + n[2:] for n in names), False, deprecated=deprecated,
                                  replacement=replacement))
    return specs


def _unwrap_optional(node: ast.AST) -> ast.AST:
    """Optional[X], Union[X, None] and X | None -> X."""
    if isinstance(node, ast.Subscript) and _name_of(node.value) in ("Optional", "typing.Optional"):
        return node.slice
    if isinstance(node, ast.Subscript) and _name_of(node.value) in ("Union", "typing.Union") \
            and isinstance(node.slice, ast.Tuple):
        rest = [e for e in node.slice.elts if not (isinstance(e, ast.Constant) and e.value is None)]
        return rest[0] if len(rest) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [s for s in (node.left, node.right) if not (isinstance(s, ast.Constant) and s.value is None)]
        return sides[0] if len(sides) == 1 else node
    return node


def _field_spec(field_name: str, annotation: ast.Subscript, constants) -> list[FlagSpec]:
    """The flags one `name: A[T, meta...]` field declaration adds (none without help/Arg, or no_cli)."""
    parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    if len(parts) < 2:
        return []
    type_node, meta = parts[0], None
    for m in parts[1:]:  # the first Arg(...) or bare help string wins, as in arg_utils._unwrap_annotated
        if isinstance(m, ast.Call) and _name_of(m.func) in ("Arg", "arg_utils.Arg"):
            meta = _keywords(m)
            break
        if isinstance(m, ast.Constant) and isinstance(m.value, str) or isinstance(m, ast.JoinedStr):
            meta = {"help": m}
            break
    if meta is None or _const(meta.get("no_cli")) is True:
        return []
    cli_name = _const(meta.get("cli_name")) or "--" + field_name.replace("_", "-")
    aliases = _strings(meta["aliases"], constants) if "aliases" in meta else ()
    names = (cli_name, *(aliases or ()))
    help_text = _help_text(meta.get("help"))
    action_node = meta.get("action")
    nargs = _const(meta.get("nargs"))
    choices = _strings(meta["choices"], constants) if "choices" in meta else None
    if action_node is not None:
        action = _const(action_node) or _name_of(action_node).rsplit(".", 1)[-1]
        kwargs = meta.get("action_kwargs")
        kw_nargs = None
        if isinstance(kwargs, ast.Dict):
            for k, v in zip(kwargs.keys, kwargs.values):
                if _const(k) == "nargs":
                    kw_nargs = _const(v)
        deprecated, replacement = _deprecation(action, help_text, None)
        if action == "BooleanOptionalAction":
            return [FlagSpec(names, False, deprecated=deprecated, replacement=replacement),
                    FlagSpec(tuple("--no-" + n[2:] for n in names), False, deprecated=deprecated,
                             replacement=replacement)]
        takes_value = action not in NO_VALUE_ACTIONS and kw_nargs != 0
        return [FlagSpec(names, takes_value, kw_nargs in ("+", "*"), choices, kw_nargs in ("?", "*"),
                         deprecated, replacement)]
    inner = _unwrap_optional(type_node)
    deprecated, replacement = _deprecation(None, help_text, None)
    head = _name_of(inner.value) if isinstance(inner, ast.Subscript) else _name_of(inner)
    if head in ("Literal", "typing.Literal"):
        elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
        literal = tuple(str(e.value) for e in elts if isinstance(e, ast.Constant))
        return [FlagSpec(names, True, False, choices or literal, False, deprecated, replacement)]
    if head in ("List", "list", "typing.List") and "type_parser" not in meta:
        n = nargs or "+"
        return [FlagSpec(names, True, n in ("+", "*"), choices, n in ("?", "*"), deprecated, replacement)]
    if head == "bool":
        return [FlagSpec(names, False, deprecated=deprecated, replacement=replacement)]
    return [FlagSpec(names, True, nargs in ("+", "*"), choices, nargs in ("?", "*"), deprecated, replacement)]


def _field_specs(tree: ast.Module, constants) -> list[FlagSpec]:
    specs = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(stmt.annotation, ast.Subscript)
                    and _name_of(stmt.annotation.value) in ANNOTATED_NAMES):
                specs += _field_spec(stmt.target.id, stmt.annotation, constants)
    return specs


def _parse(path: str, text: str, version: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise FlagError(f"SGLang {version}: cannot parse {path}: {exc}") from None


def parse_cli_sources(sources: dict[str, str], version: str = "?",
                      choice_sources: dict[str, str] | None = None) -> FlagTable:
    """Every flag declared in `sources` ({path: text}); later declarations of a name win, like argparse.
    `choice_sources` only lend their constant lists (flag choices); each file is parsed once."""
    extra = {path: text for path, text in (choice_sources or {}).items() if path not in sources}
    trees = {path: _parse(path, text, version) for path, text in {**extra, **sources}.items()}
    constants = collect_constants(list(trees.values()))
    table = FlagTable(version)
    for path in sources:
        tree = trees[path]
        for spec in _field_specs(tree, constants) + _add_argument_specs(tree, constants):
            for name in spec.names:
                table.flags[name] = spec
    if not table.flags:
        raise FlagError(f"no launch flags found in {', '.join(sources)} of SGLang {version}: its CLI layout "
                        "changed; update cli_sources in harness/sglang/versions.yaml (and cli_source.py)")
    return table
