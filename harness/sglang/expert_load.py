"""SGLang's expert-distribution recorder over the profiled window: start, stop, dump, read.

Why: beside each MoE layer's dispatch and combine wait / transfer, the table shows how unevenly
the layer's experts were loaded in the same steps (analysis/ingest/expert_load.py). With
`profile.expert_load` every node starts SGLang with `--expert-distribution-recorder-mode stat`
(versions.yaml); the run starts the recording just before /start_profile, stops it once every
rank's trace is written, and asks for the dump. Rank 0 (on node 0) writes it with torch.save:
{rank, logical_count: int32 [passes, layers, logical experts] summed over ranks, ...}
(srt/eplb/expert_distribution.py, _StatAccumulator.dump). The run copies that file into
`expert_load/` and turns it into `expert_load/expert_load.json`, the form the analysis reads.
Reading the dump needs torch (present wherever SGLang is); without it the file is kept and the
table says why the expert load is missing.
"""
from __future__ import annotations

import io
import time
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.api import DOCUMENT_LIMIT_BYTES, InputFileError, read_input
from harness.node.node_files import fetch_node_file
from harness.sglang.http_post import post_json
from harness.sglang.plan import expert_record_dir

if TYPE_CHECKING:
    from harness.sglang.server_actor import Deployment

DUMP_WAIT_S = 30.0
# Flags that move experts away from the contiguous default placement (expert e on EP rank
# e // (experts / ep)): with any of them the per-rank split is not known from the dump.
PLACEMENT_FLAGS = ("--enable-eplb", "--ep-num-redundant-experts", "--init-expert-location")


class ExpertRecordError(RuntimeError):
    pass


def _call(dep: "Deployment", endpoint: str) -> str:
    url = dep.url + dep.plan.sglang.endpoints[endpoint]
    try:
        status, text = post_json(url, None, 60.0)
    except OSError as exc:
        raise ExpertRecordError(f"{url} not answered: {exc}") from None
    if status != 200:
        raise ExpertRecordError(f"{url} answered HTTP {status}: {text.strip()[:200]}")
    return text.strip()


def start(dep: "Deployment") -> None:
    """Start recording (SGLang clears any earlier record)."""
    _call(dep, "start_expert_record")


def stop(dep: "Deployment") -> None:
    _call(dep, "stop_expert_record")


def dump(dep: "Deployment", trace_dir: str, run_dir: Path) -> Path:
    """Dump, and copy node 0's new dump into run_dir/expert_load/; returns the copy."""
    import ray

    folder, pattern = expert_record_dir(trace_dir), dep.plan.sglang.expert_record["pattern"]
    node0 = dep.actors[0]
    before = set(ray.get(node0.list_files.remote(folder, pattern), timeout=60))
    _call(dep, "dump_expert_record")
    deadline = time.monotonic() + DUMP_WAIT_S
    while True:  # SGLang answers once rank 0 has saved it; a slow file system may lag
        new = sorted(set(ray.get(node0.list_files.remote(folder, pattern), timeout=60)) - before)
        if new:
            break
        if time.monotonic() > deadline:
            raise ExpertRecordError(f"no {pattern} in node 0's {folder} {DUMP_WAIT_S:.0f} s after "
                                    f"{dep.plan.sglang.endpoints['dump_expert_record']}")
        time.sleep(0.2)
    return fetch_node_file(lambda offset, size: node0.read_file.remote(new[-1], offset, size),
                           run_dir / "expert_load" / Path(new[-1]).name, 60)


def logical_count(dump: Path) -> list[list[list[int]]]:
    """[passes][layers][experts] from SGLang's stat-mode dump (torch.load; tensors and plain values only)."""
    try:
        import torch
    except ImportError:
        raise ExpertRecordError(f"{dump.name}: reading SGLang's dump needs torch, which this Python lacks; "
                                "the file is kept") from None
    try:
        raw = read_input(dump, DOCUMENT_LIMIT_BYTES, "an expert-distribution dump")
    except InputFileError as exc:
        raise ExpertRecordError(str(exc)) from None
    try:
        data = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        counts = data["logical_count"]
    except Exception as exc:  # a torch error of any kind: the file is not the dump we expect
        raise ExpertRecordError(f"{dump.name}: not an expert-distribution dump in stat mode: {exc}") from None
    if counts.dim() != 3:
        raise ExpertRecordError(f"{dump.name}: logical_count has shape {tuple(counts.shape)}, "
                                "expected [passes, layers, experts]")
    return counts.tolist()


def placement_known(extra_args: tuple[str, ...]) -> bool:
    """Do the experts sit in the contiguous default placement (no PLACEMENT_FLAGS among the server's flags)."""
    return not any(a.split("=")[0] in PLACEMENT_FLAGS for a in extra_args)


def record_files(dump: Path, ep: int, extra_args: tuple[str, ...]) -> Path:
    """expert_load.json beside the copied dump (analysis.api.write_expert_load)."""
    from analysis.api import write_expert_load

    return write_expert_load(dump.parent, logical_count(dump), ep, placement_known(extra_args),
                             f"SGLang expert distribution recorder ({dump.name})")
