"""One real SGLang server on one machine, through the harness's own SGLang path, without Ray.

plan (harness.sglang.plan) -> ServerProcess (process group, log, /health_generate) -> the harness's
streaming load (token ids: the model directory has no tokenizer) until /metrics shows the running
batch -> POST /start_profile (profile_by_stage, num_steps decode steps) -> the DECODE trace of every
rank (harness.node.trace_files) -> stop. Also keeps what the fake server should imitate: the
responses of /metrics, /get_server_info, /server_info, /v1/loads and /start_profile, and the names
of every file the profiler wrote. The stages run in the harness's order (harness/stages.py).

    python3 drive.py --model-dir model --out OUT [--decode-attn flashmla] [--mtp] [--tp 2 --ep 2 ...]
"""
from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from harness.load.background import BackgroundLoad
from harness.load.client import describe_loads
from harness.load.summary import summarize
from harness.sglang.plan import DeploymentSpec, SpeculativeSpec, build_plan, expected_rank_labels
from harness.node.process import ServerProcess, ServerStartError
from harness.sglang.profile import post_json, start_profile_body
from harness.stages import run_stages
from harness.node.trace_files import TraceWaitError, wait_for_traces


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--label", default="sglang-real")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--ep", type=int, default=1)
    p.add_argument("--dp", type=int, default=1, help="DP attention over this many groups (>1: --enable-dp-attention); "
                   "the trace names then carry -DP-<d>")
    p.add_argument("--a2a", default=None, help="--moe-a2a-backend (deepep, ...); none: no all-to-all")
    p.add_argument("--prefill-attn", default="triton")
    p.add_argument("--decode-attn", default="flashmla")
    p.add_argument("--mtp", action="store_true", help="EAGLE with the model's own NextN layer")
    p.add_argument("--tbo", action="store_true", help="two-batch overlap (--enable-two-batch-overlap; needs --a2a deepep)")
    p.add_argument("--routing", choices=("model", "fake"), default="model",
                   help="fake: --ep-dispatch-algorithm fake, SGLang's own stand-in for a trained gate (router logits "
                        "drawn uniform per token, the correction bias zeroed: tokens spread over every expert); model: "
                        "the dummy gate's own (identical random weights in every layer send nearly every token to "
                        "the same experts)")
    p.add_argument("--expert-load", action="store_true",
                   help="SGLang's expert-distribution recorder over the profiled steps -> expert_load/ (the dump and "
                        "expert_load.json); a failure to record is kept in status.json, never fatal")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=2048)
    p.add_argument("--num-steps", type=int, default=5)
    p.add_argument("--no-cuda-graph", action="store_true")
    p.add_argument("--no-stack", action="store_true",
                   help="profile without Python stacks (with_stack false): the trace as a user who leaves them "
                        "off records it, with no nn.Module ranges")
    p.add_argument("--capture-trace", action="store_true",
                   help="0.5.17: --enable-profile-cuda-graph with SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1 (the env "
                        "alone writes nothing) -> graph_capture_profile/cuda_graph_capture-<runner>-TP-<t>.json.gz")
    p.add_argument("--moe-runner", default=None, help="--moe-runner-backend (deep_gemm, triton, ...)")
    p.add_argument("--ready-timeout-s", type=float, default=420)
    p.add_argument("--profile-timeout-s", type=float, default=120)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--extra", default="", help="more launch_server flags, space-separated")
    p.add_argument("--launcher", default=None, help="replaces `python3 -m sglang.launch_server` (tests: the fake server)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    p.add_argument("--sglang-version", default="0.5.17", help="the release the plan is spelled for (the run used 0.5.17)")
    return p.parse_args(argv)


# Every recording's server: token ids in (no tokenizer), no grammar or radix cache, DeepGEMM compiled on
# first use, NVLink multicast off (it can take a shared host's GPUs out of service).
SERVER_ENV = {"SGLANG_JIT_DEEPGEMM_PRECOMPILE": "0", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
              "NVSHMEM_DISABLE_NVLS": "1"}


def server_flags(prefill_attn: str, decode_attn: str) -> list[str]:
    return ["--skip-tokenizer-init", "--sampling-backend", "pytorch", "--grammar-backend", "none",
            "--prefill-attention-backend", prefill_attn, "--decode-attention-backend", decode_attn,
            "--disable-radix-cache", "--log-level", "info"]


def deployment(a: argparse.Namespace, trace_dir: str) -> DeploymentSpec:
    extra = server_flags(a.prefill_attn, a.decode_attn)
    if a.no_cuda_graph:
        extra.append("--disable-cuda-graph")
    if a.routing == "fake":
        extra += ["--ep-dispatch-algorithm", "fake"]
    extra += a.extra.split()
    env = dict(SERVER_ENV)
    if a.capture_trace:
        env["SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE"] = "1"
        extra.append("--enable-profile-cuda-graph")
    spec = SpeculativeSpec("EAGLE", num_steps=1, eagle_topk=1, num_draft_tokens=2) if a.mtp else None
    return DeploymentSpec(model_path=str(Path(a.model_dir).resolve()), gpus_per_node=a.tp, tp=a.tp, ep=a.ep, dp=a.dp,
                          dp_attention=a.dp > 1, moe_a2a_backend=a.a2a,
                          deepep_mode="low_latency" if a.a2a == "deepep" else None, deepgemm=True, moe_runner_backend=a.moe_runner,
                          two_batch_overlap=a.tbo, expert_load=a.expert_load,
                          load_format="dummy", cuda_graph_max_bs=None if a.no_cuda_graph else a.batch,
                          # DP attention keeps one request of a full group waiting: one more slot per group
                          max_running_requests=a.batch if a.dp < 2 else a.dp * (-(-a.batch // a.dp) + 1),
                          context_length=4096, mem_fraction_static=0.8,
                          speculative=spec, trust_remote_code=False, host="127.0.0.1", port=a.port,
                          extra_args=tuple(extra), env=env,
                          **({"launcher": tuple(shlex.split(a.launcher))} if a.launcher else {}))


def http_get(url: str, timeout_s: float = 30) -> tuple[int, str]:
    """(status, text) of one GET; errors as status -1 with the reason (POSTs go through the harness's post_json)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - recorded as a fact, never fatal
        return -1, f"{type(exc).__name__}: {exc}"


def keep_facts(url: str, facts: Path, tag: str) -> None:
    """What SGLang answers on the endpoints the harness (and its fake server) use."""
    for name, path in (("metrics", "/metrics"), ("get_server_info", "/get_server_info"),
                       ("server_info", "/server_info"), ("v1_loads", "/v1/loads"), ("model_info", "/get_model_info"),
                       ("health", "/health")):
        code, text = http_get(url + path)
        (facts / f"{tag}-{name}.txt").write_text(f"HTTP {code}\n{text}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # a time-out's SIGTERM still stops the server group


class OneServer:
    """This script's stage bodies on one server, called in the harness's order (harness/stages.py).

    status["phase"] names the stage a failure happened in (status.json); the traces stay in OUT/traces
    (nothing collected, analysed or discarded: the files are what this run is for)."""

    def __init__(self, a: argparse.Namespace, plan, server: ServerProcess, out: Path, trace_dir: Path, facts: Path):
        self.a, self.plan, self.server, self.out, self.trace_dir, self.facts = a, plan, server, out, trace_dir, facts
        self.url = f"http://127.0.0.1:{a.port}"
        self.timings: dict[str, float] = {}
        self.t0 = time.monotonic()
        self.load = None
        self.paths: list[str] = []
        self.status = {"ok": False, "phase": "start"}

    def start(self) -> None:
        a, server = self.a, self.server
        try:
            server.wait_ready(self.url + "/health_generate", a.ready_timeout_s, poll_s=1.0)
        except ServerStartError as exc:
            raise RuntimeError(f"{exc}\n--- log tail ---\n{server.log_tail()}") from None
        self.timings["ready_s"] = time.monotonic() - self.t0
        print(f"ready after {self.timings['ready_s']:.0f} s", flush=True)
        keep_facts(self.url, self.facts, "idle")

    def reach_steady_state(self) -> None:
        a, server = self.a, self.server
        self.status["phase"] = "load"
        load = self.load = BackgroundLoad(self.url, a.batch, a.input_len, a.output_len, str(self.out / "requests.jsonl"),
                                          ramp_s=1.0, api="generate_ids")
        deadline, seen = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            if load.first_failure():
                raise RuntimeError(load.first_failure())
            if server.exit_code() is not None:
                raise RuntimeError(f"server exited ({server.exit_code()}) under load\n{server.log_tail()}")
            seen = load.running_batch()
            if seen is not None and seen >= a.batch:
                break
            time.sleep(0.5)
        else:
            keep_facts(self.url, self.facts, "short-batch")
            raise RuntimeError(f"running batch {seen} never reached {a.batch}: {describe_loads(load.last_loads)}")
        self.timings["batch_s"] = time.monotonic() - self.t0
        time.sleep(2.0)  # a few decode steps past the last prefill
        keep_facts(self.url, self.facts, "loaded")

    def profile(self) -> list[str]:
        a, plan, server = self.a, self.plan, self.server
        self.status["phase"] = "profile"
        prefix = a.label
        if a.expert_load:
            self._expert_call("start_expert_record")
        # the profiler the plan chose (V2 where the release has it: its env is in the plan), so the
        # request and the file names agree: V2 writes -decode, the classic one -DECODE
        body = start_profile_body(str(self.trace_dir), a.num_steps, prefix, plan.profiler,
                                  plan.sglang.profile["v2_decode_stage"], with_stack=not a.no_stack)
        status_code, answer = post_json(self.url + plan.sglang.endpoints["start_profile"], body, 30.0)
        (self.facts / "start_profile-response.txt").write_text(f"HTTP {status_code}\n{answer}")
        labels = expected_rank_labels(plan.spec)[0]
        paths = wait_for_traces(str(self.trace_dir), labels, prefix, a.profile_timeout_s, stage=plan.decode_stage,
                                alive=lambda: server.exit_code() is None)
        self.timings["traces_s"] = time.monotonic() - self.t0
        print("traces:", paths, flush=True)
        self.paths = paths
        if a.expert_load:
            self.record_expert_load()
        return paths

    def _expert_call(self, endpoint: str) -> bool:
        """The harness's call of a recorder endpoint (harness/sglang/expert_load.py), its answer kept in
        status.json; False where it failed (never raised: the traces are what this run is for)."""
        from harness.sglang.expert_load import ExpertRecordError, _call

        try:
            answer = _call(self, endpoint)
        except ExpertRecordError as exc:
            self.status.setdefault("expert_load", []).append(f"{endpoint}: {exc}")
            return False
        self.status.setdefault("expert_load", []).append(f"{endpoint}: {answer[:200]}")
        return True

    def record_expert_load(self) -> None:
        """Stop and dump the recorder; copy rank 0's dump into OUT/expert_load/ with expert_load.json beside it.
        Never fatal: what went wrong is kept in status.json (the traces are what this run is for)."""
        from harness.sglang.expert_load import ExpertRecordError, record_files
        from harness.sglang.plan import expert_record_dir

        try:
            folder = Path(expert_record_dir(str(self.trace_dir)))
            pattern = self.plan.sglang.expert_record["pattern"]
            before = set(folder.glob(pattern)) if folder.is_dir() else set()
            if not (self._expert_call("stop_expert_record") and self._expert_call("dump_expert_record")):
                return
            deadline = time.monotonic() + 30
            while not (new := sorted(set(folder.glob(pattern)) - before)) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not new:
                self.status["expert_load"].append(f"no {pattern} in {folder} 30 s after the dump")
                return
            dest = self.out / "expert_load"
            dest.mkdir(exist_ok=True)
            copy = dest / new[-1].name
            copy.write_bytes(new[-1].read_bytes())
            written = record_files(copy, self.plan.spec.ep, self.plan.spec.extra_args)
            self.status["expert_load"].append(f"written {written.relative_to(self.out)}")
        except (ExpertRecordError, OSError, KeyError) as exc:
            self.status["expert_load"].append(f"{type(exc).__name__}: {exc}")

    def finish(self) -> None:
        self.status["phase"] = "finish"
        self.load.stop()
        time.sleep(1.0)
        self.status.update(ok=True, traces=[Path(p).name for p in self.paths])

    def collect(self, traces: list[str]) -> list[str]:
        return traces

    def analyse(self, traces: list[str]) -> None:
        return None

    def discard_traces(self, traces: list[str]) -> None:
        pass

    def stop(self) -> None:
        self.server.stop(grace_s=10)
        load = self.load
        if load is not None:
            load.stop()
            load.thread.join(timeout=5)
            records = [asdict(r) for r in load.records]
            (self.out / "load-summary.json").write_text(json.dumps(summarize(records, num_gpus=self.a.tp), indent=1))


def main(argv=None) -> int:
    a = parse(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    out = Path(a.out).resolve()
    trace_dir, facts = out / "traces", out / "facts"
    for d in (trace_dir, facts):
        d.mkdir(parents=True, exist_ok=True)
    plan = build_plan(deployment(a, str(trace_dir)), profile_dir=str(trace_dir), version=a.sglang_version)
    (out / "plan.sh").write_text(plan.render())
    print(plan.render(), flush=True)
    if a.dry_run:
        return 0
    node = plan.nodes[0]
    server = ServerProcess(list(node.argv), node.env, str(out / "server.log"), tail_lines=80)
    stages = OneServer(a, plan, server, out, trace_dir, facts)
    server.start()
    try:
        run_stages(stages)  # the harness's own stage order; stop() on every exit
        return 0
    except (RuntimeError, TraceWaitError, KeyboardInterrupt) as exc:
        stages.status["error"] = str(exc)[-4000:]
        print(f"FAILED in {stages.status['phase']}: {exc}", flush=True)
        return 1
    finally:
        status = stages.status
        status["timings_s"] = stages.timings
        status["files"] = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        (out / "status.json").write_text(json.dumps(status, indent=1))
        print(json.dumps({k: v for k, v in status.items() if k != "files"}, indent=1)[-3000:], flush=True)


if __name__ == "__main__":
    sys.exit(main())
