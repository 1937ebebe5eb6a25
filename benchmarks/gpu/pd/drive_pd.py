"""Prefill profiled on real SGLang, alone or as one half of a prefill/decode (PD) pair on one machine.

Two servers through the harness's plan: prefill (TP/EP over --prefill-gpus, DeepEP normal mode,
eager) and decode (over --decode-gpus, DeepEP low-latency, CUDA graphs), joined by SGLang's
disaggregation (`--disaggregation-mode prefill|decode`, one transfer backend, the prefill server's
bootstrap port). This script plays the router's part: each request goes to both servers with the same
bootstrap host, port and room (what SGLang's router adds), and the decode server's answer is the
request's. Profiles, in order:
  1. prefill, by stage (EXTEND), with Python stacks (module ranges: the truth), prefix prefill-stack;
  2. the same without stacks (what a production profile looks like), prefix prefill-nostack;
  3. decode on the decode server (PD mode only), a plain num_steps window once the batch is full (by
     stage would meet the decode server's PREBUILT batches, which the classic profiler refuses).
A prefill step is kept busy by bursts of requests: prompts of --input-len tokens, chunked by
--chunked-prefill-size, so steps hold whole prompts and chunks of longer ones.
Where the pair does not come up (--fallback), the prefill server is started again alone (no
disaggregation) and profiles 1-2 are still recorded. Everything SGLang answered is kept in OUT/facts,
every request with its timings and meta_info in OUT/requests.jsonl (TTFT split: bootstrap, transfer).

    python3 drive_pd.py --model-dir M --out OUT --transfer fake|mooncake|none [--prefill-tbo] [--fallback]
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sglang_real"))
from drive import SERVER_ENV, http_get, server_flags  # noqa: E402  (the one-server driver's own)

from harness.node.process import ServerProcess, ServerStartError  # noqa: E402
from harness.node.trace_files import TraceWaitError, wait_for_traces  # noqa: E402
from harness.sglang.http_post import post_json  # noqa: E402
from harness.sglang.plan import DeploymentSpec, build_plan, expected_rank_labels  # noqa: E402

BOOTSTRAP_PORT = 8998


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--prefill-gpus", default="0,1")
    p.add_argument("--decode-gpus", default="2,3")
    p.add_argument("--transfer", choices=("fake", "mooncake", "nixl", "none"), default="fake",
                   help="--disaggregation-transfer-backend; none: the prefill server alone, no decode server")
    p.add_argument("--prefill-tbo", action="store_true", help="--enable-two-batch-overlap on the prefill server")
    p.add_argument("--fallback", action="store_true", help="if the pair does not come up, prefill alone")
    p.add_argument("--input-len", type=int, default=3000)
    p.add_argument("--chunked-prefill-size", type=int, default=4096)
    p.add_argument("--burst", type=int, default=8, help="requests per burst while a prefill profile runs")
    p.add_argument("--prefill-steps", type=int, default=4)
    p.add_argument("--decode-batch", type=int, default=16)
    p.add_argument("--decode-steps", type=int, default=5)
    p.add_argument("--ready-timeout-s", type=float, default=400)
    p.add_argument("--profile-timeout-s", type=float, default=90)
    p.add_argument("--launcher", default=None, help="replaces `python3 -m sglang.launch_server` (the fake server)")
    return p.parse_args(argv)


def spec_for(a, role: str, trace_dir: str) -> DeploymentSpec:
    gpus = a.prefill_gpus if role == "prefill" else a.decode_gpus
    n = len(gpus.split(","))
    extra = server_flags("triton", "flashmla") + ["--ep-dispatch-algorithm", "fake",
                                                  "--nccl-port", str(31000 if role == "prefill" else 31100)]
    if a.transfer != "none" or role == "decode":
        extra += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", a.transfer]
        if role == "prefill":
            extra += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    env = {**SERVER_ENV, "CUDA_VISIBLE_DEVICES": gpus}
    if a.transfer == "mooncake":
        env["MOONCAKE_PROTOCOL"] = "tcp"  # one host, no RDMA card
    prefill = role == "prefill"
    if prefill:
        extra.append("--disable-cuda-graph")  # DeepEP normal mode runs eager anyway
    return DeploymentSpec(
        model_path=str(Path(a.model_dir).resolve()), gpus_per_node=n, tp=n, ep=n, moe_a2a_backend="deepep",
        deepep_mode="normal" if prefill else "low_latency", deepgemm=True, moe_runner_backend="deep_gemm",
        two_batch_overlap=prefill and a.prefill_tbo, load_format="dummy",
        cuda_graph_max_bs=None if prefill else a.decode_batch,
        max_running_requests=64 if prefill else a.decode_batch,
        chunked_prefill_size=a.chunked_prefill_size if prefill else None,
        context_length=8192, mem_fraction_static=0.75, trust_remote_code=False, host="127.0.0.1",
        port=30000 if prefill else 30100, dist_init_port=5000 if prefill else 5100, extra_args=tuple(extra),
        env=env, profiler="v1", **({"launcher": tuple(shlex.split(a.launcher))} if a.launcher else {}))  # the classic profiler: EXTEND files by stage, and a plain window on decode


class Pair:
    """The servers of one attempt and the router's part: each request to every server with one room."""

    def __init__(self, a, out: Path):
        self.a, self.out = a, out
        self.trace_dir = out / "traces"
        self.facts = out / "facts"
        self.servers: dict[str, tuple] = {}
        self.records = open(out / "requests.jsonl", "a")
        self.lock = threading.Lock()
        self.pd = a.transfer != "none"
        self.last_ok: dict[str, bool] = {}

    def start(self, roles: list[str]) -> None:
        for role in roles:
            spec = spec_for(self.a, role, str(self.trace_dir))
            plan = build_plan(spec, profile_dir=str(self.trace_dir), version="0.5.17")
            (self.out / f"plan-{role}.sh").write_text(plan.render())
            node = plan.nodes[0]
            proc = ServerProcess(list(node.argv), node.env, str(self.out / f"server-{role}.log"), tail_lines=60)
            proc.start()
            self.servers[role] = (proc, plan, f"http://127.0.0.1:{spec.port}")
            time.sleep(20)  # the second server's ports are taken after the first's
        t0 = time.monotonic()
        for role, (proc, _plan, url) in self.servers.items():
            left = self.a.ready_timeout_s - (time.monotonic() - t0)
            try:
                proc.wait_ready(url + "/health", left, poll_s=1.0)
            except ServerStartError as exc:
                raise RuntimeError(f"{role}: {exc}\n{proc.log_tail()}") from None
            print(f"{role} ready after {time.monotonic() - t0:.0f} s", flush=True)

    def stop(self) -> None:
        for proc, _plan, _url in self.servers.values():
            proc.stop(grace_s=10)
        self.servers.clear()

    def keep_facts(self, tag: str) -> None:
        for role, (_proc, _plan, url) in self.servers.items():
            for name in ("metrics", "get_server_info"):
                code, text = http_get(f"{url}/{name}")
                (self.facts / f"{tag}-{role}-{name}.txt").write_text(f"HTTP {code}\n{text}")

    def request(self, input_len: int, new_tokens: int) -> None:
        ids = [random.randrange(100, 120000) for _ in range(input_len)]
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0,
                                                      "ignore_eos": True}}
        room = random.randrange(1 << 62)
        if self.pd:
            body.update(bootstrap_host="127.0.0.1", bootstrap_port=BOOTSTRAP_PORT, bootstrap_room=room)
        sent = time.time()
        answers = {}

        def one(role):
            url = self.servers[role][2]
            t = time.time()
            code, text = post_json(url + "/generate", body, 60.0)
            answers[role] = {"code": code, "start": t, "end": time.time(), "answer": text[-1500:]}
            self.last_ok[role] = code == 200

        roles = [r for r in ("prefill", "decode") if r in self.servers]
        threads = [threading.Thread(target=one, args=(r,)) for r in roles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self.lock:
            self.records.write(json.dumps({"room": room, "sent": sent, "input_len": input_len,
                                           "new_tokens": new_tokens, **answers}) + "\n")
            self.records.flush()

    def profile_prefill(self, prefix: str, with_stack: bool) -> list[str]:
        """A plain window of --prefill-steps forward passes while bursts of prompts keep the prefill
        queue full (the classic by-stage profiler left a prefill-only server's EXTEND capture holding
        decode steps and a DECODE capture open: seen on 0.5.17). The steps keep SGLang's labels
        (step[EXTEND bs= toks=]); a file without a stage suffix."""
        proc, plan, url = self.servers["prefill"]
        new_tokens = 4 if "decode" in self.servers else 1
        body = {"output_dir": str(self.trace_dir), "num_steps": self.a.prefill_steps, "activities": ["CPU", "GPU"],
                "with_stack": with_stack, "record_shapes": True, "profile_prefix": prefix}
        labels = expected_rank_labels(plan.spec)[0]
        deadline = time.monotonic() + self.a.profile_timeout_s
        with ThreadPoolExecutor(self.a.burst * 2) as pool:
            futures = [pool.submit(self.request, self.a.input_len, new_tokens) for _ in range(self.a.burst)]
            time.sleep(0.5)  # the queue holds prompts before the window opens
            code, answer = post_json(url + "/start_profile", body, 30.0)
            (self.facts / f"start_profile-{prefix}.txt").write_text(f"HTTP {code}\n{answer}")
            while time.monotonic() < deadline:
                futures += [pool.submit(self.request, self.a.input_len, new_tokens) for _ in range(self.a.burst)]
                try:
                    return wait_for_traces(str(self.trace_dir), labels, prefix, 6.0,
                                           alive=lambda: proc.exit_code() is None)
                except TraceWaitError:
                    if proc.exit_code() is not None:
                        raise RuntimeError(f"prefill server exited\n{proc.log_tail()}") from None
                    if all(f.done() for f in futures) and not any(self.last_ok.values()):
                        raise RuntimeError("no prefill request answered 200")
        raise RuntimeError(f"no traces for {prefix} in {self.a.profile_timeout_s} s")

    def profile_decode(self) -> list[str]:
        proc, plan, url = self.servers["decode"]
        stop = threading.Event()

        def steady():
            while not stop.is_set():
                self.request(512, 1500)

        threads = [threading.Thread(target=steady, daemon=True) for _ in range(self.a.decode_batch)]
        for t in threads:
            t.start()
            time.sleep(0.3)
        deadline, running = time.monotonic() + 90, 0.0
        while time.monotonic() < deadline:
            code, text = http_get(url + "/metrics")
            running = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("sglang:num_running_reqs"))
            if running >= self.a.decode_batch:
                break
            time.sleep(0.5)
        self.keep_facts("decode-loaded")
        stop.set()  # no new request: the profiled steps are decode steps of the full batch
        body = {"output_dir": str(self.trace_dir), "num_steps": self.a.decode_steps, "activities": ["CPU", "GPU"],
                "with_stack": True, "record_shapes": True, "profile_prefix": "decode"}
        code, answer = post_json(url + "/start_profile", body, 30.0)
        (self.facts / "start_profile-decode.txt").write_text(f"HTTP {code}\nrunning {running}\n{answer}")
        labels = expected_rank_labels(plan.spec)[0]
        return wait_for_traces(str(self.trace_dir), labels, "decode", self.a.profile_timeout_s,
                               alive=lambda: proc.exit_code() is None)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    a = parse(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    out = Path(a.out).resolve()
    for d in (out / "traces", out / "facts"):
        d.mkdir(parents=True, exist_ok=True)
    status: dict = {"transfer": a.transfer, "steps": [], "attempts": []}
    pair = Pair(a, out)
    t0 = time.monotonic()
    done: set[str] = set()
    modes = [a.transfer] + (["none"] if a.fallback and a.transfer != "none" else [])
    try:
        for mode in modes:
            a.transfer, pair.pd = mode, mode != "none"
            try:
                pair.start(["prefill", "decode"] if pair.pd else ["prefill"])
                status["attempts"].append({"transfer": mode, "ready_s": time.monotonic() - t0})
                with ThreadPoolExecutor(4) as pool:  # warm-up: JIT and the bootstrap handshake first
                    list(pool.map(lambda _: pair.request(a.input_len, 4 if pair.pd else 1), range(4)))
                pair.keep_facts(f"warm-{mode}")
                for prefix, stack in (("prefill-stack", True), ("prefill-nostack", False)):
                    if prefix in done:
                        continue
                    paths = pair.profile_prefill(f"{prefix}-{mode}", stack)
                    done.add(prefix)
                    status["steps"].append({prefix: [Path(p).name for p in paths], "at_s": time.monotonic() - t0})
                    print(prefix, paths, flush=True)
                pair.keep_facts(f"after-prefill-{mode}")
                if pair.pd:
                    paths = pair.profile_decode()
                    status["steps"].append({"decode": [Path(p).name for p in paths], "at_s": time.monotonic() - t0})
                    pair.keep_facts("after-decode")
                status["ok"] = True
                return 0
            except (RuntimeError, TraceWaitError) as exc:
                status["attempts"].append({"transfer": mode, "error": str(exc)[-3000:], "at_s": time.monotonic() - t0})
                print(f"{mode} failed: {str(exc)[-1500:]}", flush=True)
                pair.stop()
        return 1
    except KeyboardInterrupt as exc:
        status["error"] = str(exc)
        return 1
    finally:
        pair.stop()
        status["files"] = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        (out / "status.json").write_text(json.dumps(status, indent=1))


if __name__ == "__main__":
    sys.exit(main())
