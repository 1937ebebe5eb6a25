"""Fake SGLang server speaking one release's HTTP surface (0.5.23, or FAKE_SGLANG_VERSION), no model. See README.md here.

One scheduler loop stands for every DP group's scheduler: each tick is a prefill batch when requests
are waiting (they get their first token), else a decode batch (every running request gets one
token, or FAKE_SGLANG_ACCEPT tokens per verify step with speculative decoding). The profilers follow
SGLang's code: the classic one (`profiler_manager.py`, with its double start under load) and V2
(`profile_utils.py`, with SGLANG_PROFILE_V2=1).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import queue
import re
import shutil
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from expert_recorder import ExpertRecorder  # beside this script

# A real SGLang decode trace the project recorded itself (tests/data/sglang-real, docs/gpu-runs.md).
DEFAULT_TRACE = (Path(__file__).resolve().parent.parent / "data" / "sglang-real"
                 / "sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz")
TEMPLATE = Path(os.environ.get("FAKE_SGLANG_DECODE_TRACE") or DEFAULT_TRACE)
# What each capture trace is a copy of: a real capture recorded with stacks for the decode trace above,
# or by default the decode trace itself (no module ranges: plumbing only, and the analysis says so).
CAPTURE_TEMPLATE = Path(os.environ.get("FAKE_SGLANG_CAPTURE_TRACE") or TEMPLATE)
# What a plain profile window holding prefill passes writes: a real SGLang 0.5.17 prefill window the
# project recorded (DeepEP normal mode, six EXTEND steps, no stacks: tests/data/sglang-real/pd), its step
# labels kept as recorded.
PREFILL_TEMPLATE = (Path(__file__).resolve().parent.parent / "data" / "sglang-real" / "pd"
                    / "sglang-0.5.17-dsv3-4l-fp8-h100x4-pd-mooncake-prefill-nostack-TP-0-EP-0.trace.json.gz")
VERSION = os.environ.get("FAKE_SGLANG_VERSION", "0.5.23")


def release(version):
    """(major, minor, patch, post) of a release name, to say which dialect the fake speaks."""
    main, _, post = version.partition(".post")
    return (*(int(x) for x in main.split(".")), int(post or 0))


# What differs between releases, as each release's wheel has it (docs/sglang.md):
VERIFY_LABEL = "VERIFY" if release(VERSION) >= (0, 5, 20) else "TARGET_VERIFY"   # build_step_span_name
READS_DECODE_MIN_BS = release(VERSION) >= (0, 5, 20)      # SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS, classic profiler
GENERATE_CONTRACT = release(VERSION) >= (0, 5, 22)        # entrypoints/api_contract.py
BATCH_CAPTURE = release(VERSION) >= (0, 5, 18)            # SGLANG_GRAPH_BATCH_CAPTURE
# ProfileReq.detailed_annotations (managers/io_struct.py): the batch's aggregates in each step label
# (model_executor/step_span_utils.py), from 0.5.23 with the pass's forward_id (utils/profile_utils.py)
DETAILED_ANNOTATIONS = release(VERSION) >= (0, 5, 19)
FORWARD_ID_IN_LABEL = release(VERSION) >= (0, 5, 23)
# eplb/expert_distribution.py: from 0.5.21 the stat recorder masks top-k ids past the routed experts;
# before, a fused shared expert's id indexes past its counter (a device-side assert at the first forward).
RECORDER_MASKS_FUSED_SHARED = release(VERSION) >= (0, 5, 21)
# sglang/api/v1/api_types.py (0.5.23) SamplingParams: JSON object, unknown keys rejected.
SAMPLING_FIELDS = ("max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
                   "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
                   "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
                   "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
                   "sampling_seed", "custom_params", "beam_width", "watermark", "choice")
EXPERT_RECORD_PATHS = ("/start_expert_distribution_record", "/stop_expert_distribution_record",
                       "/dump_expert_distribution_record")
WARMUP_VERIFY_STEPS = 2000  # one-token verify steps before the load (warm-up), in the cumulative figures


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", "--model", default="fake")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--attn-dp-size", dest="attn_dp_size", type=int, default=1)
    p.add_argument("--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--enable-profile-cuda-graph", action="store_true")
    p.add_argument("--skip-tokenizer-init", action="store_true")
    p.add_argument("--cuda-graph-bs-decode", "--cuda-graph-bs", dest="cuda_graph_bs", type=int, nargs="+")
    p.add_argument("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs", dest="cuda_graph_max_bs", type=int)
    p.add_argument("--expert-distribution-recorder-mode", default=None)
    p.add_argument("--expert-distribution-recorder-buffer-size", type=int, default=None)
    p.add_argument("--disable-shared-experts-fusion", action="store_true")  # the fake's model fuses it by default
    p.add_argument("--disaggregation-mode", default="null", choices=("null", "prefill", "decode"))
    p.add_argument("--disaggregation-transfer-backend", default="mooncake")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    args, _ = p.parse_known_args(argv)  # every other flag was judged by the node check already
    # `--dp-size N --enable-dp-attention` is the deprecated spelling of `--attn-dp-size N`.
    args.dp_groups = args.attn_dp_size if args.attn_dp_size > 1 else (args.dp_size if args.enable_dp_attention else 1)
    return args


def node_ranks(args, node_rank):
    """(pp ranks, tp ranks) on one node, as engine._calculate_rank_ranges places them."""
    pp_per_node = max(args.pp_size // args.nnodes, 1)
    nodes_per_pp = max(args.nnodes // args.pp_size, 1)
    pp0 = pp_per_node * (node_rank // nodes_per_pp)
    tp_per_node = args.tp_size // nodes_per_pp
    tp0 = tp_per_node * (node_rank % nodes_per_pp)
    return range(pp0, pp0 + pp_per_node), range(tp0, tp0 + tp_per_node)


def rank_labels(args, node_rank):
    """This node's ranks as SGLang's profiler names them: TP-t[-DP-d][-PP-p][-EP-e]."""
    labels = []
    pps, tps = node_ranks(args, node_rank)
    for pp in pps:
        for tp in tps:
            parts = [f"TP-{tp}"]
            if args.dp_groups > 1:
                parts.append(f"DP-{tp // (args.tp_size // args.dp_groups)}")
            if args.pp_size > 1:
                parts.append(f"PP-{pp}")
            if args.ep_size > 1:
                parts.append(f"EP-{tp // (args.tp_size // args.ep_size)}")
            labels.append("-".join(parts))
    return labels


def group_leader_node(args, group):
    """The node of a DP group's attn_tp_rank 0, the one scheduler of the group that reports metrics."""
    tp_per_node = args.tp_size // max(args.nnodes // args.pp_size, 1)
    return (group * (args.tp_size // args.dp_groups)) // tp_per_node


STEP_LABEL = re.compile(r"^step\[(?P<stage>[A-Z_]+) bs=(?P<bs>\d+)(?P<rest>[^\]]*)\]$")


def _step_groups(events):
    """The template's step annotations, one list per step in time order: CPU ones one per step, GPU
    ones one per stream of a step (overlapping windows of the same step)."""
    steps = {"user_annotation": [], "gpu_user_annotation": []}
    for e in sorted((e for e in events if STEP_LABEL.match(str(e.get("name", ""))) and e.get("cat") in steps),
                    key=lambda e: e["ts"]):
        groups = steps[e["cat"]]
        if groups and e["cat"] == "gpu_user_annotation" and e["ts"] < max(g["ts"] + g.get("dur", 0) for g in groups[-1]):
            groups[-1].append(e)
        else:
            groups.append([e])
    return steps.values()


def detailed_suffix(shape, group, width):
    """build_detailed_annotation_suffix for a generation pass: per request N_Q = width (1, or the
    verify step's draft tokens) and N_KV its sequence length; then build_step_span_name's forward_id."""
    kv, forward_id = shape["kv"][group], shape["forward_id"]
    bs = len(kv)
    text = f" g_sq={bs * width} g_sqsq={bs * width * width} g_sqsk={width * sum(kv)} g_sk={sum(kv)}"
    return text + (f" forward_id={forward_id}" if FORWARD_ID_IN_LABEL else "")


def labelled_trace(group, step_batches, step_shapes=None, width=1, rank=0, template=None):
    """The template trace with this release's step labels: the verify stage's name, and as bs the
    requests this rank's scheduler (DP group) held at each profiled step (the template's step i gets
    profiled step i's batch, the last one repeated when the template has more steps); with
    step_shapes (detailed annotations asked for), each label also carries the step's aggregates. Each
    rank's clock is its own: every time is shifted by 7 us per rank (TP, plus 1000 per PP stage), so no
    two ranks' traces are one."""
    data = json.loads(gzip.decompress((template or TEMPLATE).read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 7.0 * rank
    for groups in _step_groups(events):
        for i, step in enumerate(groups):
            for e in step:
                m = STEP_LABEL.match(e["name"])
                stage = VERIFY_LABEL if m["stage"] in ("TARGET_VERIFY", "VERIFY") else m["stage"]
                bs = step_batches[min(i, len(step_batches) - 1)][group] if step_batches else int(m["bs"])
                rest = m["rest"]
                if step_shapes:
                    rest += detailed_suffix(step_shapes[min(i, len(step_shapes) - 1)], group, width)
                e["name"] = f"step[{stage} bs={bs}{rest}]"
    return gzip.compress(json.dumps(data).encode(), compresslevel=1)


def write_trace_files(args, node_rank, event, fail):
    if fail == "no_profile_file":
        print("profile: trace export skipped (fault injected)", flush=True)
        return
    out = Path(event["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    prefix = f"{event['prefix']}-" if event["prefix"] else ""
    for label in rank_labels(args, node_rank):
        name = f"{prefix}{event['profile_id']}-{label}{event['suffix']}.trace.json.gz"
        tmp = out / (name + ".tmp")
        group = int(label.split("-DP-")[1].split("-")[0]) if "-DP-" in label else 0
        parts = label.split("-")
        rank = int(parts[1]) + (1000 * int(parts[parts.index("PP") + 1]) if "PP" in parts else 0)
        prefill = event.get("prefill", False)  # a plain window with prefill passes: the prefill template as recorded
        tmp.write_bytes(labelled_trace(group, None if prefill else event.get("step_batches"), event.get("step_shapes"),
                                       event.get("query_width", 1), rank, PREFILL_TEMPLATE if prefill else None))
        tmp.rename(out / name)
        print(f"profile: wrote {out / name}", flush=True)


def write_capture_traces(args, node_rank):
    """--enable-profile-cuda-graph at start: 0.5.23 per batch size (SGLANG_GRAPH_BATCH_CAPTURE), 0.5.17 one file."""
    if not args.enable_profile_cuda_graph:
        return
    out = Path(os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")) / "graph_capture_profile"
    sizes = args.cuda_graph_bs or [bs for bs in (1, 2, 4, 8) if bs <= (args.cuda_graph_max_bs or 8)]
    _, tps = node_ranks(args, node_rank)
    names = []
    if os.environ.get("SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE") == "1":
        names = [f"cuda_graph_capture-DecodeCudaGraphRunner-TP-{tp}.json.gz" for tp in tps]
    elif os.environ.get("SGLANG_GRAPH_BATCH_CAPTURE") == "1" and BATCH_CAPTURE:
        names = [f"DecodeCudaGraphRunner_bs_{bs}_rank{tp}.json.gz" for tp in tps for bs in sizes]
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(CAPTURE_TEMPLATE, out / name)
        print(f"CUDA graph capture: saved trace to {out / name}", flush=True)


@dataclass
class Req:
    rid: str
    group: int
    max_new: int
    prompt_tokens: int
    spec: bool
    phase: str = "waiting"             # waiting (prefill) -> running (decode) -> done
    prompt_left: int = 1               # prompt tokens still to prefill
    generated: int = 0
    verify_ct: int = 0
    out: queue.Queue = field(default_factory=queue.Queue)
    error_after: int | None = None     # fault injection: an error chunk after this many tokens
    room: int | None = None            # PD: the bootstrap room the router gave the request
    times: dict = field(default_factory=dict)  # PD: when each stage began (time.monotonic), for the stage metrics


class ClassicProfiler:
    """SchedulerProfilerManager without SGLANG_PROFILE_V2 (profiler_manager.py, 0.5.23), one for all ranks."""

    def __init__(self, emit):
        self.emit = emit
        self.in_progress = False
        self.recording = False
        self.by_stage = False
        self.prefill_ct = self.decode_ct = 0
        self.target = None
        self.target_forward_ct = None
        self.req = None
        self.batches = []   # per recorded step, the running requests of each DP group
        self.cts = []       # per recorded step, its forward count
        self.stages = []    # per recorded step of a plain window, prefill or decode
        self.min_bs = int(os.environ.get("SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS", "0")) if READS_DECODE_MIN_BS else 0

    def start_request(self, req, forward_ct):
        if self.in_progress:
            return False, "Profiling is already in progress. Call /stop_profile first."
        self.req, self.by_stage = req, bool(req.get("profile_by_stage"))
        num_steps = req.get("num_steps")
        if self.by_stage:
            self.prefill_ct = self.decode_ct = 0
            self.target = num_steps
            return True, "Succeeded"
        self.target_forward_ct = forward_ct + num_steps + 1 if num_steps else None
        return self._start(None)

    def _start(self, stage):
        if self.recording:  # torch starts the second profiler and drops the first capture (torch 2.13)
            print(f"profiler_stop: the capture running since its start is dropped for a new one ({stage})", flush=True)
        self.recording = self.in_progress = True
        self.batches, self.cts, self.stages = [], [], []
        print(f"Profiling starts{f' for {stage}' if stage else ''}.", flush=True)
        return True, "Succeeded"

    def _stop(self, stage):
        if not self.in_progress:
            return False, "Profiling is not in progress. Call /start_profile first."
        if self.recording:
            self.emit(self.req, f"-{stage}" if stage else "", self.batches, self.cts,
                      prefill=stage is None and "prefill" in self.stages)
        self.recording = self.in_progress = False
        return True, "Succeeded."

    def stop_request(self):
        return self._stop(None)

    def step(self, stage, forward_ct, batches):
        if self.req is None:
            return
        if not self.by_stage:
            if self.target_forward_ct and self.target_forward_ct <= forward_ct and self.in_progress:
                self._stop(None)
            if self.recording:
                self.batches.append(batches)
                self.cts.append(forward_ct)
                self.stages.append(stage)
            return
        if stage == "prefill":
            if self.prefill_ct == 0:
                self._start("EXTEND")
            self.prefill_ct += 1
            if self.prefill_ct > self.target and self.in_progress:
                self._stop("EXTEND")
        else:
            if self.decode_ct == 0:
                if self.in_progress:
                    self._stop("EXTEND")  # force trace flush
                if self.min_bs > 0 and min(batches) < self.min_bs:
                    return  # 0.5.20+: wait for a decode batch of SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS
                self._start("DECODE")
            self.decode_ct += 1
            if self.decode_ct > self.target and self.in_progress:
                self._stop("DECODE")
        if self.recording:
            self.batches.append(batches)
            self.cts.append(forward_ct)


class ProfilerV2:
    """ProfileManager + _StageBasedTrigger (srt/utils/profile_utils.py), SGLANG_PROFILE_V2=1."""

    def __init__(self, emit):
        self.emit = emit
        self.configs: dict[str, int] = {}
        self.running: list | None = None     # [stage, count]
        self.req = None
        self.batches, self.cts = [], []

    def start_request(self, req, forward_ct):
        if not req.get("profile_by_stage"):
            raise AssertionError("only support profile_by_stage=true now")
        if self.running is not None:
            raise AssertionError("assert self.running_state is None")
        self.req = req
        self.configs = {s: int(req.get("num_steps") or 0) for s in (req.get("profile_stages") or ["prefill", "decode"])}
        return True, "Succeeded"

    def stop_request(self):
        raise NotImplementedError("manually stop is only supported yet")

    def step(self, stage, forward_ct, batches):
        if self.running is not None:
            self.running[1] += 1
            if self.running[1] > self.configs[self.running[0]] or stage != self.running[0]:
                done = self.running[0]
                del self.configs[done]
                self.running = None
                self.emit(self.req, f"-{done}", self.batches, self.cts)
        if self.running is None and stage in self.configs:
            self.running = [stage, 0]
            self.batches, self.cts = [], []
            print(f"Profiling starts for {stage}.", flush=True)
        if self.running is not None:
            self.batches.append(batches)
            self.cts.append(forward_ct)


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.reqs: dict[str, Req] = {}
        self.started_requests = 0
        self.forward_ct = 0
        self.gen_tokens = 0
        self.spec_verify_total = WARMUP_VERIFY_STEPS   # cumulative since start, warm-up included
        self.spec_accept_total = WARMUP_VERIFY_STEPS
        self.events: list[dict] = []                    # trace exports, replayed by the other nodes
        self.joined = set()                             # node ranks > 0 that have polled node 0
        fail = os.environ.get("FAKE_SGLANG_FAIL", "")
        only = os.environ.get("FAKE_SGLANG_FAIL_NODE")
        self.fail = fail if (only is None or int(only) == args.node_rank) else ""
        self.step_s = float(os.environ.get("FAKE_SGLANG_STEP_MS", "20")) / 1000.0
        self.accept = int(os.environ.get("FAKE_SGLANG_ACCEPT", "3"))
        self.prefill_chunk = int(os.environ.get("FAKE_SGLANG_PREFILL_CHUNK", "0"))  # 0: whole prompts at once
        profiler_cls = ProfilerV2 if os.environ.get("SGLANG_PROFILE_V2") == "1" else ClassicProfiler
        self.profiler = profiler_cls(self.emit_traces)
        self.step_shapes: dict[int, dict] = {}  # forward count -> {"kv": per DP group its requests' lengths, "forward_id"}
        self.experts = ExpertRecorder(args.expert_distribution_recorder_mode,
                                      args.expert_distribution_recorder_buffer_size, args.node_rank)
        self.rooms: dict[int, dict] = {}                # PD prefill: bootstrap room -> handshake, KV ready time
        self.observed: dict[tuple[str, str], list[float]] = {}  # PD: (metric, stage) -> [seconds, count]
        self.kv_s = float(os.environ.get("FAKE_SGLANG_KV_MS", "5")) / 1000.0  # one request's KV transfer

    def observe(self, metric, stage, seconds):
        """One request's time in a stage, as SGLang's per-stage histograms count it (req_time_stats.py)."""
        total = self.observed.setdefault((metric, stage), [0.0, 0])
        total[0] += max(0.0, seconds)
        total[1] += 1

    def emit_traces(self, req, suffix, step_batches, step_cts=(), prefill=False):
        step_batches = [list(b) for b in step_batches]
        if self.fail == "ramp_up" and step_batches:  # the first profiled step before full admission
            step_batches[0] = [max(1, b // 2) for b in step_batches[0]]
        event = {"output_dir": req.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp"),
                 "prefix": req.get("profile_prefix") or "", "profile_id": req["profile_id"], "suffix": suffix,
                 "step_batches": step_batches, "prefill": prefill}
        if req.get("detailed_annotations") and DETAILED_ANNOTATIONS:
            shapes = [self.step_shapes.get(ct) for ct in step_cts]
            event["step_shapes"] = [s for s in shapes if s is not None] or None
            event["query_width"] = self.accept if self.args.speculative_algorithm is not None else 1
        self.events.append(event)
        write_trace_files(self.args, 0, event, self.fail)

    def running(self, group=None):
        return sum(1 for r in self.reqs.values() if r.phase == "running" and (group is None or r.group == group))

    def waiting(self, group=None):
        return sum(1 for r in self.reqs.values() if r.phase == "waiting" and (group is None or r.group == group))


def bootstrapped(state, req):
    """A prefill request whose decode side has shaken hands: into the waiting queue."""
    req.phase = "waiting"
    req.times["waiting"] = time.monotonic()
    state.observe("per_stage_req_latency_seconds", "prefill_bootstrap", req.times["waiting"] - req.times["arrive"])


def serve_bootstrap(state):
    """A prefill server's bootstrap port (--disaggregation-bootstrap-port): the decode side's handshake for a
    room, then its polls until the room's KV has been sent (the fake's stand-in for the transfer backend)."""
    class Bootstrap(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            pass

        def do_GET(self):
            path, _, query = self.path.partition("?")
            if path != "/_fake/kv":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            room_id = int(query.rsplit("=", 1)[1])
            with state.lock:
                room = state.rooms.setdefault(room_id, {})
                if not room.get("handshake"):
                    room["handshake"] = True
                    req = room.get("req")
                    if req is not None and req.phase == "bootstrap":
                        bootstrapped(state, req)
                ready_at = room.get("kv_ready_at")
                ready = ready_at is not None and time.monotonic() >= ready_at
                if ready:
                    state.rooms.pop(room_id, None)
            data = json.dumps({"ready": ready}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("0.0.0.0", state.args.disaggregation_bootstrap_port), Bootstrap)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def crash(message):
    """An exception in a scheduler ends the whole SGLang server."""
    print(f"Scheduler hit an exception: {message}", flush=True)
    os._exit(1)


def recorder_breaks_forward(args) -> bool:
    """The stat recorder on a release that counts a fused shared expert's id past its counter."""
    return (args.expert_distribution_recorder_mode == "stat" and not args.disable_shared_experts_fusion
            and not RECORDER_MASKS_FUSED_SHARED)


def admissible(state):
    """The waiting requests the schedulers admit now. With DP attention each group holds at most
    max_running_requests // groups, and SGLang 0.5.17 keeps one request of a full group waiting (seen on
    two H100s: 7 running + 1 queued per group at a cap of 8, docs/gpu-runs.md)."""
    args = state.args
    waiting = [r for r in state.reqs.values() if r.phase == "waiting"]
    if not args.max_running_requests:
        return waiting
    if args.dp_groups > 1:
        per_group = args.max_running_requests // args.dp_groups - 1
        room = {g: max(0, per_group - state.running(g)) for g in range(args.dp_groups)}
        admitted = []
        for r in waiting:
            if room.get(r.group, 0) > 0:
                room[r.group] -= 1
                admitted.append(r)
        return admitted
    return waiting[: max(0, args.max_running_requests - state.running())]


def scheduler_loop(state):
    while True:
        time.sleep(state.step_s)
        with state.lock:
            if recorder_breaks_forward(state.args):  # the first forward: the server's own warm-up request
                print("ScatterGatherKernel.cu:163: operator(): block: [0,0,0], thread: [8,0,0] Assertion "
                      "`idx_dim >= 0 && idx_dim < index_size && \"scatter gather kernel index out of bounds\"` "
                      "failed.", flush=True)
                print("Fatal Python error: Aborted", flush=True)
                os.abort()
            waiting = admissible(state)
            batches = [sum(1 for r in waiting if r.group == g) for g in range(state.args.dp_groups)]
            if waiting:
                # Prefill first, as SGLang's scheduler does; with a chunk budget a long prompt takes
                # several prefill batches (chunked prefill), shared in arrival order.
                stage, budget = "prefill", state.prefill_chunk or sum(r.prompt_left for r in waiting)
                tokens = 0
                for r in waiting:
                    r.times.setdefault("scheduled", time.monotonic())
                    take = min(budget, r.prompt_left)
                    tokens += take
                    r.prompt_left -= take
                    budget -= take
                    if r.prompt_left == 0:
                        r.phase, r.generated = "running", 1
                        now = time.monotonic()
                        if state.args.disaggregation_mode == "prefill":  # the KV goes; the decode side decodes
                            r.phase = "done"
                            state.rooms.setdefault(r.room, {})["kv_ready_at"] = now + state.kv_s
                            state.observe("queue_time_seconds", "", r.times["scheduled"] - r.times["waiting"])
                            state.observe("per_stage_req_latency_seconds", "prefill_forward", now - r.times["scheduled"])
                            state.observe("per_stage_req_latency_seconds", "prefill_transfer_kv_cache", state.kv_s)
                        elif state.args.disaggregation_mode == "decode":  # a prebuilt batch: the KV arrived
                            state.observe("per_stage_req_latency_seconds", "decode_waiting", now - r.times["kv"])
                            state.observe("time_to_first_token_seconds", "", now - r.times["arrive"])
                        r.out.put((1, r.generated, 0))
            elif state.running():
                stage, tokens = "decode", 0
                batches = [state.running(g) for g in range(state.args.dp_groups)]
                # seq_lens at this pass (prompt + tokens so far), per DP group: the detailed annotations
                state.step_shapes[state.forward_ct + 1] = {
                    "kv": [[r.prompt_tokens + r.generated for r in state.reqs.values()
                            if r.phase == "running" and r.group == g] for g in range(state.args.dp_groups)],
                    "forward_id": state.forward_ct + 1}
                state.step_shapes.pop(state.forward_ct + 1 - 1000, None)  # a profile spans far fewer passes
                for r in [r for r in state.reqs.values() if r.phase == "running"]:
                    tokens += state.accept if r.spec else 1  # a verify pass runs the draft tokens
                    k = min(state.accept if r.spec else 1, r.max_new - r.generated)
                    r.generated += k
                    state.gen_tokens += k
                    if r.spec:
                        r.verify_ct += 1
                        state.spec_verify_total += 1
                        state.spec_accept_total += k
                    r.out.put((k, r.generated, r.verify_ct))
            else:
                continue
            state.experts.forward_pass(tokens)
            for r in [r for r in state.reqs.values() if r.phase == "running" and r.generated >= r.max_new]:
                r.phase = "done"
            state.forward_ct += 1
            try:
                state.profiler.step(stage, state.forward_ct, batches)
            except Exception as exc:  # noqa: BLE001 - as in SGLang: the scheduler dies
                crash(f"{type(exc).__name__}: {exc}")


def make_handler(state):
    args = state.args
    spec = args.speculative_algorithm is not None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            print("http: " + fmt % a, flush=True)

        def _send(self, code, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else (json.dumps(body) if ctype == "application/json" else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json_body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")

        def do_GET(self):
            path, _, query = self.path.partition("?")
            if path == "/_fake/events":  # a follower's poll: it has joined
                with state.lock:
                    state.joined.add(int(query.rsplit("=", 1)[1]))
                    return self._send(200, {"events": state.events})
            if path in ("/health", "/health_generate"):
                # Like SGLang, node 0 is healthy only once every node has joined the process group.
                if len(state.joined) < args.nnodes - 1:
                    return self._send(503, b"waiting for nodes", "text/plain")
                if path == "/health_generate" and state.fail == "hang_ready":
                    time.sleep(3600)
                return self._send(200, b"", "text/plain")
            if path in ("/get_server_info", "/server_info"):
                if path == "/get_server_info":
                    print("WARNING: Endpoint '/get_server_info' is deprecated and will be removed in a future "
                          "version. Please use '/server_info' instead.", flush=True)
                return self._send(200, self._server_info())
            if path == "/v1/loads":
                return self._send(200, self._loads())
            if path in EXPERT_RECORD_PATHS:
                return self._expert_record(path)
            if path == "/metrics":
                return self._send(200, self._metrics(), "text/plain; version=0.0.4")
            return self._send(404, {"detail": "Not Found"})

        def _server_info(self):
            with state.lock:
                cumulative = state.spec_accept_total / state.spec_verify_total
                internal = [{"dp_rank": g, "last_gen_throughput": state.running(g) / state.step_s,
                             **({"avg_spec_accept_length": cumulative} if spec else {})}
                            for g in range(args.dp_groups)]
            return {"model_path": args.model_path, "tp_size": args.tp_size, "pp_size": args.pp_size,
                    "dp_size": args.dp_size, "attn_dp_size": args.dp_groups, "ep_size": args.ep_size,
                    "enable_dp_attention": args.dp_groups > 1, "nnodes": args.nnodes,
                    "speculative_algorithm": args.speculative_algorithm, "internal_states": internal,
                    "version": VERSION, "frontend": "python"}

        def _loads(self):
            with state.lock:
                cumulative = state.spec_accept_total / state.spec_verify_total
                loads = []
                for g in range(args.dp_groups):
                    load = {"timestamp": time.time(), "dp_rank": g, "num_running_reqs": state.running(g),
                            "num_waiting_reqs": state.waiting(g), "num_used_tokens": 0, "num_total_tokens": 0,
                            "max_running_requests": args.max_running_requests or 0}
                    if spec:
                        load["speculative"] = {"accept_length": cumulative, "accept_rate": 0.0}
                    loads.append(load)
            return {"timestamp": datetime.now(timezone.utc).isoformat(), "version": VERSION, "accelerator": None,
                    "num_accelerators": args.tp_size * args.pp_size // args.dp_groups, "loads": loads}

        def _metrics(self):
            """Node-local: only node 0's DP-group leaders (attn_tp_rank 0) report, one series each."""
            lines = []
            with state.lock:
                groups = [g for g in range(args.dp_groups) if group_leader_node(args, g) == 0]
                for name, value_of in (("num_running_reqs", state.running), ("num_queue_reqs", state.waiting),
                                       ("gen_throughput", lambda g: state.running(g) / state.step_s),
                                       *((("spec_accept_length", lambda g: float(state.accept)),) if spec else ())):
                    lines.append(f"# TYPE sglang:{name} gauge")
                    for g in groups:
                        labels = (f'model_name="{args.model_path}",engine_type="unified",'
                                  f'tp_rank="{g * (args.tp_size // args.dp_groups)}",pp_rank="0",moe_ep_rank="0"')
                        if args.dp_groups > 1:
                            labels += f',dp_rank="{g}"'
                        lines.append(f"sglang:{name}{{{labels}}} {value_of(g)}")
                for metric in sorted({m for m, _ in state.observed}):  # PD: per-request stage histograms
                    lines.append(f"# TYPE sglang:{metric} histogram")
                    for (m, stage), (total, count) in sorted(state.observed.items()):
                        if m != metric:
                            continue
                        labels = (f'engine_type="{args.disaggregation_mode}",model_name="{args.model_path}",'
                                  f'moe_ep_rank="0",pp_rank="0"' + (f',stage="{stage}"' if stage else "") + ',tp_rank="0"')
                        lines += [f"sglang:{m}_sum{{{labels}}} {total}", f"sglang:{m}_count{{{labels}}} {count}"]
            return "\n".join(lines) + "\n"

        def _expert_record(self, path):
            """http_server.py: GET or POST; the scheduler's recorder raises when no mode was set."""
            with state.lock:
                try:
                    action = {"/start_expert_distribution_record": state.experts.start,
                              "/stop_expert_distribution_record": state.experts.stop,
                              "/dump_expert_distribution_record": state.experts.dump}[path]
                    action()
                except Exception as exc:  # noqa: BLE001 - as in SGLang: the scheduler dies
                    crash(f"{type(exc).__name__}: {exc}")
            text = {"/start_expert_distribution_record": b"Start recording the expert distribution.\n",
                    "/stop_expert_distribution_record": b"Stop recording the expert distribution.\n",
                    "/dump_expert_distribution_record": b"Dump expert distribution record.\n"}[path]
            return self._send(200, text, "text/plain")

        def do_POST(self):
            if self.path in EXPERT_RECORD_PATHS:
                return self._expert_record(self.path)
            if self.path == "/start_profile":
                req = self._json_body()
                req["profile_id"] = req.get("profile_id") or str(time.time())
                with state.lock:
                    try:
                        ok, message = state.profiler.start_request(req, state.forward_ct)
                    except Exception as exc:  # noqa: BLE001 - as in SGLang: the scheduler dies
                        crash(f"{type(exc).__name__}: {exc}")
                if not ok:  # SGLang raises RuntimeError(message) in the route: a bare 500
                    print(f"RuntimeError: {message}", flush=True)
                    return self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
                return self._send(200, b"Start profiling.\n", "text/plain")
            if self.path == "/stop_profile":
                with state.lock:
                    try:
                        ok, message = state.profiler.stop_request()
                    except Exception as exc:  # noqa: BLE001
                        crash(f"{type(exc).__name__}: {exc}")
                if not ok:
                    print(f"RuntimeError: {message}", flush=True)
                    return self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
                return self._send(200, b"Stop profiling. This will take some time.\n", "text/plain")
            if self.path in ("/generate", "/v1/completions"):
                return self._generate(self._json_body(), openai=self.path == "/v1/completions")
            return self._send(404, {"detail": "Not Found"})

        def _generate(self, body, openai):
            if openai:
                max_new = int(body.get("max_tokens") or 16)
                usage = (body.get("stream_options") or {}).get("continuous_usage_stats")
            else:
                sampling = body.get("sampling_params") or {}
                unknown = [k for k in sampling if k not in SAMPLING_FIELDS]
                if unknown and GENERATE_CONTRACT:  # the contract gate (entrypoints/api_contract.py)
                    listed = ", ".join(f"`{f}`" for f in SAMPLING_FIELDS)
                    return self._send(400, {"error": f"unknown field `{unknown[0]}`, expected one of {listed}"})
                max_new = int(sampling.get("max_new_tokens") or 128)
            stream = bool(body.get("stream"))
            if args.skip_tokenizer_init and not openai and body.get("input_ids") is None:
                # tokenizer_manager._tokenize_one_request: no tokenizer, so text prompts are refused
                # (a streamed request gets the error as its one chunk, http_server.generate_request).
                error = {"message": "The engine initialized with skip_tokenizer_init=True cannot accept text "
                                    "prompts. Please provide input_ids or re-initialize the engine with "
                                    "skip_tokenizer_init=False.",
                         "type": "invalid_request_error", "code": 400, "retryable": False}
                if not stream:
                    return self._send(400, {"error": error})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(f"data: {json.dumps({'error': error})}\n\n".encode() + b"data: [DONE]\n\n")
                self.close_connection = True
                return
            prompt_tokens = (len(body["input_ids"]) if body.get("input_ids") is not None
                             else len(str(body.get("prompt") or body.get("text") or "").split()))
            mode = args.disaggregation_mode
            if mode != "null":
                missing = [k for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room") if body.get(k) is None]
                if missing:  # the fake's own strictness: proves the load went through the router
                    return self._send(400, {"error": {"message": f"fake sglang ({mode} server of a PD pair): a request "
                                                                 f"without {', '.join(missing)} did not come through "
                                                                 "the router", "code": 400}})
            with state.lock:
                state.started_requests += 1
                n = state.started_requests
                req = Req(f"req-{n}", n % args.dp_groups, max_new, prompt_tokens, spec,
                          prompt_left=max(1, prompt_tokens))
                req.times["arrive"] = time.monotonic()
                if mode != "null":
                    req.room = int(body["bootstrap_room"])
                if mode == "prefill":  # waits in the bootstrap queue for the decode side's handshake
                    req.max_new, req.phase = 1, "bootstrap"
                    room = state.rooms.setdefault(req.room, {})
                    room["req"] = req
                    if room.get("handshake"):
                        bootstrapped(state, req)
                elif mode == "decode":  # waits for the prefill side's KV
                    req.phase, req.prompt_left = "transferring", 0
                if state.fail.startswith("error_chunk:") and n == int(state.fail.split(":")[1]):
                    req.error_after = 2
                state.reqs[req.rid] = req
            if mode == "decode" and not self._await_kv(req, body):
                with state.lock:
                    state.reqs.pop(req.rid, None)
                return self._send(500, {"error": {"message": f"fake sglang: no KV for bootstrap room {req.room}",
                                                  "code": 500}})
            if state.fail.startswith("die_mid_load:") and n >= int(state.fail.split(":")[1]):
                print("fatal: scheduler died (fault injected)", flush=True)
                os._exit(4)
            try:
                self._stream(req, openai, stream, usage if openai else False)
            finally:
                with state.lock:
                    req.phase = "done"
                    state.reqs.pop(req.rid, None)

        def _await_kv(self, req, body):
            """The decode side's transfer: poll the prefill side's bootstrap server until the room's KV is there."""
            url = f"http://{body['bootstrap_host']}:{body['bootstrap_port']}/_fake/kv?room={req.room}"
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        ready = json.loads(r.read())["ready"]
                except OSError:
                    ready = False
                if ready:
                    with state.lock:
                        now = time.monotonic()
                        req.times["kv"] = now
                        state.observe("per_stage_req_latency_seconds", "decode_transferred", now - req.times["arrive"])
                        req.phase = "waiting"
                    return True
                time.sleep(0.005)
            return False

        def _stream(self, req, openai, stream, usage):
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
            text, total = "", 0
            while total < req.max_new:
                k, total, verify = req.out.get(timeout=300)
                delta = " tok" * k
                text += delta
                if req.error_after is not None and total >= req.error_after:
                    error = {"message": "The request was aborted: KV cache pool is full (fault injected)",
                             "type": "invalid_request_error", "code": 400, "retryable": False}
                    if openai:
                        error = {"object": "error", "message": error["message"], "type": "BadRequestError",
                                 "param": None, "code": 400}
                    self.wfile.write(f"data: {json.dumps({'error': error})}\n\n".encode() + b"data: [DONE]\n\n")
                    self.close_connection = True
                    return
                if not stream:
                    continue
                finish = {"type": "length", "length": req.max_new} if total >= req.max_new else None
                if openai:
                    chunk = {"id": req.rid, "object": "text_completion", "created": int(time.time()),
                             "model": args.model_path,
                             "choices": [{"index": 0, "text": delta, "logprobs": None,
                                          "finish_reason": finish and "length", "matched_stop": None}]}
                    if usage:
                        chunk["usage"] = {"prompt_tokens": req.prompt_tokens, "completion_tokens": total,
                                          "total_tokens": req.prompt_tokens + total}
                else:
                    meta = {"id": req.rid, "finish_reason": finish, "prompt_tokens": req.prompt_tokens,
                            "completion_tokens": total, "cached_tokens": 0}
                    if req.spec and verify:
                        meta.update(spec_verify_ct=verify, spec_accept_length=total / verify)
                    chunk = {"text": text, "output_ids": [], "meta_info": meta}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            if stream:
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
            else:
                self._send(200, {"text": text, "meta_info": {"id": req.rid, "completion_tokens": req.generated}})

    return Handler


def rendezvous_port(args) -> int:
    return int(args.dist_init_addr.rsplit(":", 1)[1])


def serve_rendezvous(state):
    """Node 0 of several: the followers join through the dist-init address, as SGLang's ranks meet in
    torch's store there (never through node 0's HTTP port, which nodes >= 1 do not know)."""
    server = ThreadingHTTPServer(("0.0.0.0", rendezvous_port(state.args)), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def serve_standby_health(args) -> None:
    """Nodes >= 1: SGLang (engine.py, node_rank >= 1) binds a stand-by health server on the node's own
    --host/--port; a port already taken ends the node as uvicorn does (two nodes of one host must not
    share one)."""
    class Standby(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            pass

        def do_GET(self):
            code = 200 if self.path.split("?")[0] in ("/ping", "/health", "/health_generate", "/metrics") else 404
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    try:
        server = ThreadingHTTPServer((args.host, args.port), Standby)
    except OSError as exc:
        print(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address ({args.host!r}, {args.port}): "
              f"{exc.strerror.lower() if exc.strerror else exc}", flush=True)
        os._exit(1)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def follow_node0(state):
    """Nodes > 0 serve only a stand-by health port; they watch node 0 (through the dist-init address)
    and write their ranks' traces when it exports."""
    serve_standby_health(state.args)
    # Tests bind node 0 to loopback; FAKE_SGLANG_NODE0_HOST points followers there.
    host = os.environ.get("FAKE_SGLANG_NODE0_HOST") or state.args.dist_init_addr.rsplit(":", 1)[0]
    url = f"http://{host}:{rendezvous_port(state.args)}/_fake/events?node={state.args.node_rank}"
    seen, last_ok = 0, time.time()
    while True:
        time.sleep(0.1)
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                events = json.loads(r.read())["events"]
            last_ok = time.time()
        except OSError:
            if time.time() - last_ok > 10:
                print("fatal: lost node 0 (dist-init peer)", flush=True)
                os._exit(5)
            continue
        for event in events[seen:]:
            write_trace_files(state.args, state.args.node_rank, event, state.fail)
        seen = len(events)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    state = State(args)
    print(f"fake sglang {VERSION}: node {args.node_rank}/{args.nnodes} tp={args.tp_size} pp={args.pp_size} "
          f"dp={args.dp_groups} ep={args.ep_size} pid={os.getpid()}", flush=True)
    time.sleep(float(os.environ.get("FAKE_SGLANG_STARTUP_S", "0.3")))
    if state.fail == "exit_at_start":
        print("RuntimeError: fake startup failure (fault injected)", flush=True)
        return 3
    write_capture_traces(args, args.node_rank)
    if args.node_rank > 0:
        if state.fail == "hang_ready":
            time.sleep(3600)
        follow_node0(state)
        return 0
    threading.Thread(target=scheduler_loop, args=(state,), daemon=True).start()
    if args.nnodes > 1:
        serve_rendezvous(state)
    if args.disaggregation_mode == "prefill":
        serve_bootstrap(state)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    print(f"The server is fired up and ready to roll! (port {args.port})", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
