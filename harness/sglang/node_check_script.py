"""Runs in a node's own Python, where SGLang is installed: SGLang's parser judges a planned argv.

Standard library only, nothing of the harness imported, so it runs in any image: the harness
passes this file's text with `python3 -c`. It builds the parser exactly as launch_server does
(`argparse.ArgumentParser(prog="sglang serve")` + `ServerArgs.add_cli_args`) and prints one line,
`MOE_HARNESS_NODE_CHECK <json>`:
  check ARGV...  -> {"sglang_version", "problems": [{"flag", "kind", "message"}]}, kind being
                    unknown (not a flag of this release, abbreviations included), deprecated
                    (a Deprecated*Action, or help that starts with "Deprecated"), or invalid
                    (SGLang's parser refused the value: its own message)
  dump           -> {"sglang_version", "flags": {name: {takes_value, multiple, choices, deprecated}}}
  version        -> {"sglang_version"}: the installed release only (no parser built)
"""
import argparse
import json
import logging
import re
import sys
import traceback

MARK = "MOE_HARNESS_NODE_CHECK "
DEPRECATED_HELP = re.compile(r"^\W*deprecated\b", re.IGNORECASE)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Rejected(Exception):
    """argparse's error() or exit(), kept as a message instead of ending the process."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Rejected(message)

    def exit(self, status=0, message=None):
        raise Rejected((message or "").strip() or f"exit status {status}")


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(ANSI.sub("", record.getMessage()).strip())


def sglang_parser():
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, str(getattr(sglang, "__version__", "?"))


def is_deprecated(action):
    return type(action).__name__.startswith("Deprecated") or bool(DEPRECATED_HELP.match(action.help or ""))


def dump(parser):
    flags = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        try:
            choices = sorted(str(c) for c in action.choices) if action.choices is not None else None
        except TypeError:
            choices = None
        for name in action.option_strings:
            flags[name] = {"takes_value": action.nargs != 0, "multiple": action.nargs in ("+", "*"),
                           "choices": choices, "deprecated": is_deprecated(action)}
    return flags


def check(parser, argv):
    problems = []
    known = parser._option_string_actions
    for token in argv:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        action = known.get(name)
        if action is None:
            near = [o for o in known if o.startswith(name)]
            also = f" (argparse would take it as an abbreviation of {near[0]}; spell it out)" if len(near) == 1 else ""
            problems.append({"flag": name, "kind": "unknown", "message": f"not a flag of this SGLang{also}"})
        elif is_deprecated(action):
            problems.append({"flag": name, "kind": "deprecated", "message": ANSI.sub("", action.help or "").strip()})
    handler = Captured()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        parser.parse_args(argv)
    except Rejected as exc:
        message = str(exc)
        named = re.match(r"argument ([^:]+):", message)
        flags = named.group(1).split("/") if named else re.findall(r"--[\w-]+", message.split(":", 1)[-1])
        flag = next((f for f in flags if f in argv or any(t.startswith(f + "=") for t in argv)), flags[0] if flags else None)
        already = [p for p in problems if p["flag"] in flags]
        if already:  # SGLang's own words about a flag found above
            if not message.startswith("unrecognized arguments"):
                already[0]["message"] += f"; SGLang's parser: {message}"
        else:
            problems.append({"flag": flag, "kind": "invalid", "message": message})
    finally:
        root.removeHandler(handler)
    for warning in handler.messages:  # SGLang's own deprecation text replaces the help text
        for p in problems:
            if p["kind"] == "deprecated" and f"'{p['flag']}'" in warning:
                p["message"] = warning
    return problems


def main(args):
    mode = args[0] if args else "check"
    argv = args[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if mode == "version":
        try:
            import sglang
            out = {"sglang_version": str(getattr(sglang, "__version__", "?"))}
        except BaseException:  # noqa: BLE001 - reported to the harness, which names the node
            out = {"error": "cannot import sglang: " + traceback.format_exc(limit=3).strip().splitlines()[-1]}
        print(MARK + json.dumps(out), flush=True)
        return 0
    try:
        parser, version = sglang_parser()
    except BaseException:  # noqa: BLE001 - reported to the harness, which names the node
        out = {"error": "cannot build SGLang's parser: " + traceback.format_exc(limit=3).strip().splitlines()[-1],
               "traceback": traceback.format_exc(limit=6)}
        print(MARK + json.dumps(out), flush=True)
        return 0
    if mode == "dump":
        out = {"sglang_version": version, "flags": dump(parser)}
    else:
        out = {"sglang_version": version, "problems": check(parser, argv)}
    print(MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
