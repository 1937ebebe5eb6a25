"""What `analyze` prints of a result, whether it analysed traces or a run directory again."""
from __future__ import annotations

import sys


def print_result(result, table: str) -> None:
    """The table on stdout, each stream's busy and exposed time when there are several, problems on stderr."""
    print(table)
    streams = result.streams
    if len({s.stream for s in streams}) > 1:
        print("streams (busy / exposed ms, exposed = no other stream running):")
        for s in streams:
            print(f"  {s.rank} stream {s.stream}: {s.kernels} kernels, {s.busy_us / 1000:.3f} / {s.exposed_us / 1000:.3f} ms")
    for problem in result.problems:
        where = f"{problem.path} " if problem.path else ""
        print(f"warning: {where}[{problem.rank}] {problem.message}", file=sys.stderr)
