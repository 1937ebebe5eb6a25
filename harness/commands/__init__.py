"""The sub-commands of `moe-harness`, one module each.

COMMANDS holds each command's one-line summary: `moe-harness --help` lists them without importing
a single command module, and each module's register() gives the same line to its own parser. The
module of a command is harness.commands.<name, "-" written "_">. This file imports nothing: the
command line loads only the module of the command it runs (harness/cli.py).
"""

COMMANDS = {
    "analyze": "analyse kernel traces (one file per rank), or a run directory, into a D4 table",
    "compare": "put several runs side by side as columns of one D4 table, and say what changed",
    "validate": "check a scenario file (unknown keys, impossible combinations, the SGLang plan) without running it",
    "run": "run a scenario: launch the engine through Ray, profile, analyse, print the D4 table",
    "plan": "print the per-node SGLang launch commands of a scenario",
    "export": "export a run's kernel, step and D4 tables as CSV or Parquet",
    "metrics": "print or push a run's Prometheus metrics (docs/metrics.md)",
    "report": "write the kernel-level report (top kernels, speed of light, what-if, Nsight Compute)",
    "view": "write one self-contained HTML page of a run (and annotated traces for Perfetto)",
    "ncu": "run a workload under Nsight Compute for its top kernels (needs a GPU and ncu)",
    "learn-signature": "learn a kernel template from a trace that has nn.Module ranges",
    "calibrate": "check a signature against a trace with module information; say which attribution to use",
    "ttft-split": "split a prefill/decode pair's time to first token into SGLang's own per-request stages",
}


def module_of(command: str) -> str:
    """The module that registers `command`'s parser and runs it."""
    return f"harness.commands.{command.replace('-', '_')}"
