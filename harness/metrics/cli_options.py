"""Command-line options for metrics, shared by `moe-harness metrics` and the run command."""
from __future__ import annotations

import argparse
import os

PUSHGATEWAY_ENV = "MOE_HARNESS_PUSHGATEWAY"


def pushgateway_option(text: str) -> str:
    """--pushgateway's type: arg_types.pushgateway_url, whose refusal echoes the URL without its
    credentials (a mistyped port must not print the password next to it)."""
    from harness.arg_types import pushgateway_url
    from harness.node.url_secrets import shown_url

    try:
        return pushgateway_url(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a URL (host:port or http://[user:password@]host:port): "
                                         f"{shown_url(text)!r}") from None


def add_push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pushgateway", default=os.environ.get(PUSHGATEWAY_ENV), type=pushgateway_option,
                        help=f"Pushgateway URL (host:port or http://[user:password@]host:port) to push the run's "
                             f"metrics to (credentials sent as Basic authorization, never printed or stored; "
                             f"a token in the query is not printed either); default ${PUSHGATEWAY_ENV}; "
                             f"unset = do not push")
    parser.add_argument("--delete-old-groups", action="store_true",
                        help="after pushing, delete the Pushgateway groups of other runs of the same scenario")
    parser.add_argument("--push-job", default="moe_harness", help="Pushgateway job name (default moe_harness)")
