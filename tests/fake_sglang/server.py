"""Fake SGLang server: real HTTP endpoints, no model. See README.md in this folder."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TEMPLATE = Path(__file__).with_name("template-TP-0-DECODE.trace.json.gz")


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", "--model", default="fake")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tensor-parallel-size", "--tp-size", dest="tp_size", type=int, default=1)
    p.add_argument("--data-parallel-size", "--dp-size", dest="dp_size", type=int, default=1)
    p.add_argument("--expert-parallel-size", "--ep-size", "--ep", dest="ep_size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    args, _ = p.parse_known_args(argv)  # every other SGLang flag is accepted and ignored
    return args


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.running = 0
        self.started_requests = 0
        self.gen_tokens = 0
        self.decode_steps = 0
        self.profile = None          # dict of the pending /start_profile request
        self.profile_seq = 0         # bumps on every /start_profile (followers poll it)
        fail = os.environ.get("FAKE_SGLANG_FAIL", "")
        only = os.environ.get("FAKE_SGLANG_FAIL_NODE")
        self.fail = fail if (only is None or int(only) == args.node_rank) else ""
        self.step_s = float(os.environ.get("FAKE_SGLANG_STEP_MS", "20")) / 1000.0


def rank_labels(args, node_rank):
    """This node's TP ranks, named as SGLang's profiler names them (TP-t[-DP-d][-EP-e])."""
    per_node = args.tp_size // args.nnodes
    labels = []
    for tp in range(node_rank * per_node, (node_rank + 1) * per_node):
        parts = [f"TP-{tp}"]
        if args.dp_size > 1:
            parts.append(f"DP-{tp // (args.tp_size // args.dp_size)}")
        if args.ep_size > 1:
            parts.append(f"EP-{tp // (args.tp_size // args.ep_size)}")
        labels.append("-".join(parts))
    return labels


def write_traces(state, node_rank, request, profile_id):
    if state.fail == "no_profile_file":
        print("profile: trace export skipped (fault injected)", flush=True)
        return
    out = Path(request.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    prefix = request.get("profile_prefix")
    stage = "-DECODE" if request.get("profile_by_stage") else ""
    for label in rank_labels(state.args, node_rank):
        name = (f"{prefix}-" if prefix else "") + f"{profile_id}-{label}{stage}.trace.json.gz"
        tmp = out / (name + ".tmp")
        shutil.copyfile(TEMPLATE, tmp)
        tmp.rename(out / name)
        print(f"profile: wrote {out / name}", flush=True)


def profile_after_steps(state, node_rank, request, profile_id):
    """Write traces once num_steps decode steps have run (steps run only while requests are)."""
    start = state.decode_steps
    need = int(request.get("num_steps") or 1)
    deadline = time.time() + 120
    while state.decode_steps - start < need and time.time() < deadline:
        time.sleep(state.step_s / 2)
    write_traces(state, node_rank, request, profile_id)


def decode_clock(state):
    """One decode step every step_s while any request runs (what the profiler counts)."""
    while True:
        time.sleep(state.step_s)
        with state.lock:
            if state.running:
                state.decode_steps += 1


def make_handler(state):
    args = state.args
    spec = args.speculative_algorithm is not None
    accept_len = 2.6 if spec else None

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
            if self.path == "/health":
                return self._send(200, b"", "text/plain")
            if self.path == "/health_generate":
                if state.fail == "hang_ready":
                    time.sleep(3600)
                return self._send(200, b"", "text/plain")
            if self.path in ("/get_server_info", "/server_info"):
                internal = {"last_gen_throughput": state.gen_tokens / max(1e-9, time.time() - START),
                            "effective_max_running_requests_per_dp": args.max_running_requests}
                if accept_len is not None and state.decode_steps:
                    internal["avg_spec_accept_length"] = accept_len
                info = {"model_path": args.model_path, "tp_size": args.tp_size, "dp_size": args.dp_size,
                        "ep_size": args.ep_size, "enable_dp_attention": args.enable_dp_attention,
                        "nnodes": args.nnodes, "node_rank": args.node_rank,
                        "speculative_algorithm": args.speculative_algorithm,
                        "internal_states": [internal], "version": "0.5.13.post1-fake"}
                return self._send(200, info)
            if self.path == "/metrics":
                labels = f'model_name="{args.model_path}",engine_type="unified",tp_rank="0",pp_rank="0"'
                lines = [
                    "# TYPE sglang:num_running_reqs gauge", f"sglang:num_running_reqs{{{labels}}} {state.running}",
                    "# TYPE sglang:num_queue_reqs gauge", f"sglang:num_queue_reqs{{{labels}}} 0",
                    "# TYPE sglang:gen_throughput gauge",
                    f"sglang:gen_throughput{{{labels}}} {state.running / state.step_s:.1f}",
                ]
                if accept_len is not None:
                    lines += ["# TYPE sglang:spec_accept_length gauge", f"sglang:spec_accept_length{{{labels}}} {accept_len}"]
                return self._send(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4")
            if self.path == "/_fake/profile":  # followers (node_rank > 0) poll this
                return self._send(200, {"seq": state.profile_seq, "request": state.profile,
                                        "profile_id": getattr(state, "profile_id", None)})
            return self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self):
            if self.path == "/start_profile":
                req = self._json_body()
                with state.lock:
                    state.profile = req
                    state.profile_seq += 1
                    state.profile_id = str(time.time())
                threading.Thread(target=profile_after_steps, args=(state, 0, req, state.profile_id),
                                 daemon=True).start()
                return self._send(200, "Start profiling.\n", "text/plain")
            if self.path in ("/generate", "/v1/completions"):
                return self._generate(self._json_body(), openai=self.path == "/v1/completions")
            return self._send(404, {"error": f"no route {self.path}"})

        def _generate(self, body, openai):
            if openai:
                max_new = int(body.get("max_tokens") or 16)
                stream = bool(body.get("stream"))
            else:
                max_new = int((body.get("sampling_params") or {}).get("max_new_tokens") or 16)
                stream = bool(body.get("stream"))
            with state.lock:
                state.started_requests += 1
                state.running += 1
                started = state.started_requests
            if state.fail.startswith("die_mid_load:") and started >= int(state.fail.split(":")[1]):
                print("fatal: scheduler died (fault injected)", flush=True)
                os._exit(4)
            try:
                if stream:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                text = ""
                for i in range(max_new):
                    time.sleep(state.step_s)
                    text += " tok"
                    with state.lock:
                        state.gen_tokens += 1
                    if stream:
                        if openai:
                            chunk = {"id": "cmpl-fake", "object": "text_completion",
                                     "choices": [{"index": 0, "text": " tok", "finish_reason": None}]}
                        else:
                            chunk = {"text": text, "meta_info": {"completion_tokens": i + 1,
                                                                 "prompt_tokens": 8}}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                if stream:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._send(200, {"text": text, "meta_info": {"completion_tokens": max_new}})
            finally:
                with state.lock:
                    state.running -= 1

    return Handler


def follow_node0(state):
    """Nodes > 0 serve nothing; they watch node 0 and write their ranks' traces when it profiles."""
    # Tests bind node 0 to loopback; FAKE_SGLANG_NODE0_HOST points followers there.
    host = os.environ.get("FAKE_SGLANG_NODE0_HOST") or state.args.dist_init_addr.split(":")[0]
    url = f"http://{host}:{state.args.port}/_fake/profile"
    seen, last_ok = 0, time.time()
    while True:
        time.sleep(0.1)
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                info = json.loads(r.read())
            last_ok = time.time()
        except OSError:
            if time.time() - last_ok > 10:
                print("fatal: lost node 0 (dist-init peer)", flush=True)
                os._exit(5)
            continue
        if info["seq"] > seen:
            seen = info["seq"]
            req = info["request"]
            time.sleep(state.step_s * int(req.get("num_steps") or 1))
            write_traces(state, state.args.node_rank, req, info["profile_id"])


START = time.time()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    state = State(args)
    print(f"fake sglang: node {args.node_rank}/{args.nnodes} tp={args.tp_size} dp={args.dp_size} "
          f"ep={args.ep_size} pid={os.getpid()}", flush=True)
    time.sleep(float(os.environ.get("FAKE_SGLANG_STARTUP_S", "0.3")))
    if state.fail == "exit_at_start":
        print("RuntimeError: fake startup failure (fault injected)", flush=True)
        return 3
    if args.node_rank > 0:
        if state.fail == "hang_ready":
            time.sleep(3600)
        follow_node0(state)
        return 0
    threading.Thread(target=decode_clock, args=(state,), daemon=True).start()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    print(f"The server is fired up and ready to roll! (port {args.port})", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
