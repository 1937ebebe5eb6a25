"""`moe-harness calibrate`: how well a signature (and the structural attribution) names a stack's kernels."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.commands import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help=COMMANDS["calibrate"],
        description="Compare SIGNATURE and the structural attribution with a calibration truth: an eager trace "
                    "with nn.Module ranges (--truth), or a decode trace named through its CUDA-graph capture "
                    "traces (--decode with --capture-trace). Prints per-group agreement and the attribution "
                    "to analyse this stack with.")
    p.add_argument("--signature", default="generic", help="the stack's signature (name or YAML file; default generic)")
    p.add_argument("--truth", default=None, help="an eager trace recorded with stacks (nn.Module ranges)")
    p.add_argument("--decode", default=None, help="a CUDA-graph decode trace (with --capture-trace)")
    p.add_argument("--capture-trace", action="append", default=[], metavar="FILE|DIR",
                   help="capture traces of the decode trace's graphs (repeatable)")
    p.add_argument("--out", default=None, help="directory for calibration.md and calibration.json (a new or empty folder; see --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="--out may hold this command's own earlier output, which is replaced (never other files)")
    p.set_defaults(func=run)


def run(args) -> int:
    from analysis.api import AnalysisError, calibrate

    if (args.truth is None) == (not args.capture_trace):
        print("moe-harness calibrate: give either --truth TRACE or --decode TRACE with --capture-trace", file=sys.stderr)
        return 2
    from harness.output_dir import OutputError, prepare_output

    try:
        out = prepare_output(args.out, "calibrate", args.overwrite) \
            if args.out else None
    except OutputError as exc:
        print(f"moe-harness calibrate: {exc}", file=sys.stderr)
        return 2
    try:
        cal = calibrate(args.signature, truth_trace=args.truth, decode_trace=args.decode,
                        capture_refs=args.capture_trace or None)
    except AnalysisError as exc:
        print(f"moe-harness calibrate: {exc}", file=sys.stderr)
        return 2
    text = cal.markdown()
    print(text)
    if out is not None:
        def fill(folder: Path) -> None:
            (folder / "calibration.md").write_text(text)
            (folder / "calibration.json").write_text(json.dumps(cal.to_dict(), indent=2))

        if not out.write_or_say(fill)[0]:
            return 2
        print(f"wrote {Path(args.out) / 'calibration.md'} and calibration.json", file=sys.stderr)
    return 0
