"""`moe-harness ttft-split`: a prefill/decode pair's time to first token, split into the parts SGLang times."""
from __future__ import annotations

import sys

from harness.commands import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ttft-split",
        help=COMMANDS["ttft-split"],
        description="Split a PD deployment's time to first token into bootstrap, prefill queue, prefill "
                    "compute, KV transfer and the wait before decode, from SGLang's per-request stage "
                    "histograms (sglang:per_stage_req_latency_seconds) in saved /metrics scrapes of the "
                    "prefill and the decode server. One scrape per server: means since the servers "
                    "started; two (the window's start, then its end): means over the window.")
    p.add_argument("--prefill", nargs="+", default=[], metavar="SCRAPE", required=True,
                   help="the prefill server's /metrics text, saved: one file, or two (before, after)")
    p.add_argument("--decode", nargs="+", default=[], metavar="SCRAPE",
                   help="the decode server's /metrics text, saved: one file, or two (before, after)")
    p.set_defaults(func=run)


def run(args) -> int:
    from analysis.api import InputFileError
    from harness.metrics.ttft_split import TtftSplitError, markdown, split_files

    try:
        parts = split_files(args.prefill, args.decode)
    except (TtftSplitError, InputFileError) as exc:
        print(f"moe-harness ttft-split: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(parts))
    return 0
