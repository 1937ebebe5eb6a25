"""What the attribution's array passes cost a kernel on step shapes the generated traces do not hold.

Why: the exposed time, the chain's overlap sweep and the step cut run as array passes over a step's
kernels (docs/performance.md, twentieth session). An array pass can cost as many passes as one kernel
has neighbours: the first version of the exposed time took 1.1 s for 315 steps each crossed by one
long kernel on a side stream (a persistent or waiting kernel beside ~700 short ones with gaps), 12x the
loop it replaced. This prints, for SYNTHETIC steps of a known shape, the CPU microseconds per kernel of
the exposed time and of the chain, so such a shape shows up beside the plain one:

  plain       two streams, the side stream's few kernels each beside one or two of the main's
  long-side   the same with one kernel on a third stream across the whole step
  many-forks  four streams whose kernels overlap in many short forks

Usage: python benchmarks/step_shapes_bench.py [--steps 315] [--kernels 700]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.attribution.overlap import exposed_of_times  # noqa: E402
from analysis.attribution.step_times import StepTimes  # noqa: E402
from analysis.attribution.structure import chain_positions  # noqa: E402
from analysis.ingest.trace_model import Kernel  # noqa: E402

SHAPES = ("plain", "long-side", "many-forks")


def step_of(shape: str, n: int, rng: random.Random) -> list[Kernel]:
    """One SYNTHETIC step of `shape` with about n kernels, by start."""
    kernels, clock = [], 0.0
    for i in range(n):
        clock += rng.choice([0.5, 1.0, 2.0])
        dur = rng.choice([1.0, 3.5, 7.0])
        stream = rng.randrange(4) if shape == "many-forks" else (7 if i % 25 == 0 else 0)
        kernels.append(Kernel(f"k{i % 40}", stream, clock, dur, i, "cudaLaunchKernel"))
        clock += dur if stream == 0 or shape == "many-forks" else 0.0
    if shape == "long-side":
        kernels.append(Kernel("wait", 9, 0.25, clock, n, "cudaLaunchKernel"))
    return sorted(kernels, key=lambda k: k.start_us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=315, help="steps of each shape (default 315)")
    parser.add_argument("--kernels", type=int, default=700, help="kernels a step (default 700)")
    args = parser.parse_args()
    print(f"{'shape':<12} {'exposed us/kernel':>18} {'chain us/kernel':>16}")
    for shape in SHAPES:
        rng = random.Random(1)
        steps = [step_of(shape, args.kernels, rng) for _ in range(args.steps)]
        times = [StepTimes.of(step) for step in steps]
        count = sum(map(len, steps))
        started = time.process_time()
        for t in times:
            exposed_of_times(t)
        exposed_s = time.process_time() - started
        started = time.process_time()
        for step, t in zip(steps, times):
            chain_positions(step, t)
        chain_s = time.process_time() - started
        print(f"{shape:<12} {exposed_s / count * 1e6:>18.3f} {chain_s / count * 1e6:>16.3f}")


if __name__ == "__main__":
    main()
