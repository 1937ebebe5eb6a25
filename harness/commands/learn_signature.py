"""`moe-harness learn-signature`: a signature template learned from a trace with module ranges."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.commands import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "learn-signature",
        help=COMMANDS["learn-signature"],
        description="Attribute TRACE by its nn.Module ranges (under BASE's module_ranges map, or the standard one) and write a "
                    "signature whose template names the same kernels without ranges (CUDA-graph traces).")
    p.add_argument("trace", help="a trace with nn.Module ranges (eager or CPU)")
    p.add_argument("--base", default="generic",
                   help="signature (name or file) whose module_ranges map names modules "
                        "(default: generic, i.e. the standard map of module roles to the seed table's rows)")
    p.add_argument("--name", required=True, help="name of the learned signature")
    p.add_argument("--description", default=None)
    p.add_argument("--steps", default=None, help="learn from these step indices only, e.g. 0,1")
    p.add_argument("--out", required=True, help="YAML file to write (an existing file is not overwritten)")
    p.set_defaults(func=run)


def run(args) -> int:
    import yaml

    from analysis.api import AnalysisError, learn_signature

    out = Path(args.out)
    if os.path.lexists(out):  # a link too, dangling or not: the file is created, never written through one
        print(f"moe-harness learn-signature: {out} exists; choose another --out", file=sys.stderr)
        return 2
    steps = {int(s) for s in args.steps.split(",")} if args.steps else None
    try:
        learned = learn_signature(args.trace, args.base, args.name,
                                  args.description or f"learned from {Path(args.trace).name} by module ranges",
                                  steps)
    except (AnalysisError, ValueError) as exc:
        print(f"moe-harness learn-signature: {exc}", file=sys.stderr)
        return 1
    header = (f"# Learned by `moe-harness learn-signature {Path(args.trace).name} --base {args.base}`: each entry\n"
              "# matches the kernels one module launched, weighted by how characteristic each name is of it.\n")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "x", encoding="utf-8") as handle:  # exclusive: never over a file that appeared meanwhile
            handle.write(header + yaml.safe_dump(learned, sort_keys=False, width=200, allow_unicode=True))
    except OSError as exc:
        print(f"moe-harness learn-signature: {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({len(learned['layer'])} layer entries)", file=sys.stderr)
    return 0
