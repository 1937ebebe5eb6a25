"""Command-line options for metrics, shared by `moe-harness metrics` and the run command."""
from __future__ import annotations

import argparse
import os

PUSHGATEWAY_ENV = "MOE_HARNESS_PUSHGATEWAY"


def add_push_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.arg_types import pushgateway_url

    parser.add_argument("--pushgateway", default=os.environ.get(PUSHGATEWAY_ENV), type=pushgateway_url,
                        help=f"Pushgateway URL (host:port or http://[user:password@]host:port) to push the run's "
                             f"metrics to (credentials sent as Basic authorization, never printed or stored); "
                             f"default ${PUSHGATEWAY_ENV}; unset = do not push")
    parser.add_argument("--delete-old-groups", action="store_true",
                        help="after pushing, delete the Pushgateway groups of other runs of the same scenario")
    parser.add_argument("--push-job", default="moe_harness", help="Pushgateway job name (default moe_harness)")
