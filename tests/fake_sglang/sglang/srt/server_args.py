"""`ServerArgs.add_cli_args` of the release the fake speaks, built from that release's own source.

The flags, their arity, choices and deprecations are read out of the real wheel by the harness's
source reader (harness/sglang/wheel_source.py, held against SGLang's own parser in
tests/test_sglang_flags.py). Deprecated flags log SGLang's own warning text
(srt/arg_groups/argparse_actions.py) through the same logger name.
"""
import argparse
import logging
import os

import sglang

logger = logging.getLogger("sglang.srt.arg_groups.argparse_actions")


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=0, const=True, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _warn(option_string, self.new_flag)
        setattr(namespace, self.dest, True)


class DeprecatedAliasStoreAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _warn(option_string, self.new_flag)
        setattr(namespace, self.dest, values)


def _warn(option_string, new_flag):
    replacement = f" Use '{new_flag}' instead." if new_flag else ""
    logger.warning(f"\033[1;33m'{option_string}' is deprecated and will be removed in a future release.{replacement}\033[0m")


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        from harness.sglang.wheel_source import flag_table

        done = set()
        # FAKE_SGLANG_FLAGS_FROM: a release whose wheel lends the flags, for a version PyPI does not have
        # (a release newer than the harness's table, in the tests of that case).
        for spec in flag_table(os.environ.get("FAKE_SGLANG_FLAGS_FROM") or sglang.__version__).flags.values():
            if id(spec) in done:
                continue
            done.add(id(spec))
            dest = spec.names[0].lstrip("-").replace("-", "_")
            new_flag = spec.replacement[4:] if (spec.replacement or "").startswith("use ") else None
            help_text = ""
            if spec.deprecated:
                help_text = f"Deprecated. Use {new_flag} instead." if new_flag else spec.replacement or "Deprecated."
            if not spec.takes_value:
                action = DeprecatedStoreTrueAction if spec.deprecated else "store_true"
                extra = {"new_flag": new_flag} if spec.deprecated else {}
                parser.add_argument(*spec.names, dest=dest, action=action, help=help_text, **extra)
                continue
            nargs = ("*" if spec.value_optional else "+") if spec.multiple else ("?" if spec.value_optional else None)
            extra = {"action": DeprecatedAliasStoreAction, "new_flag": new_flag} if spec.deprecated else {}
            parser.add_argument(*spec.names, dest=dest, nargs=nargs, choices=spec.choices, help=help_text, **extra)
