"""SGLang's stages: plan, place and start a server per node, steady load, profile every rank, analyse.

Paths: each node writes its server log and its ranks' traces under a node-local folder
(harness/node/node_dir.py). Nodes share no file system, so logs and, with `outputs.keep_traces`,
traces come back to the run directory through Ray. Each node analyses its own ranks; the driver
combines their rows into the D4 column (harness/node/node_analysis.py). Node-local decode traces
are removed once copied and analysed (after a failure they stay); the CUDA-graph capture traces stay
in the node folder, and with `profile.capture_traces` are copied into the run directory at start.
The helpers of each stage live in harness/sglang/; this module sequences them and records what the
run keeps (manifest entries, analysis/ with the calibration files).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import ray

from harness.engines.base import Engine, RunContext, Traces
from harness.load.background import BackgroundLoad
from harness.load.summary import summarize
from harness.run_dir import write_atomic
from harness.run_errors import RunFailed, actor_error
from harness.sglang import expert_load
from harness.sglang.capture_traces import capture_use, copy_capture_traces
from harness.node.node_analysis import analyse_nodes, analysis_options, own_capture_files
from harness.node.node_dir import node_dir_for
from harness.node.node_files import fetch_node_file
from harness.sglang.plan import build_plan
from harness.sglang.profile import profile_decode, profile_extend
from harness.sglang.running_batch import wait_for_running_batch
from harness.sglang.server_actor import Deployment, DeploymentError, launch
from harness.sglang.run_analysis import RunFacts, finish_analysis, load_window_start, shared_experts_apart
from harness.sglang.spec import scenario_deployment


def load_api(extra_args) -> str:
    """The load's request form: token ids when the server has no tokenizer (`--skip-tokenizer-init`,
    which a model directory without tokenizer files needs), else text prompts."""
    return "generate_ids" if "--skip-tokenizer-init" in tuple(extra_args or ()) else "generate"


def end_load(load: BackgroundLoad, run_dir: Path, timeout_s: float, num_gpus: int, accept_length: float | None,
             deployments: list) -> dict:
    """Stop the load and let its requests end; load/summary.json written first, so a failure keeps it. A dead
    server (of `deployments`), requests outlasting timeout_s, or a failed request is a RunFailed. Returns the
    summary."""
    finished = load.stop_and_wait(timeout_s)
    records = [asdict(r) for r in load.records]
    summary = summarize(records, num_gpus=num_gpus, accept_length=accept_length)
    write_atomic(run_dir / "load" / "summary.json", json.dumps(summary, indent=2) + "\n")
    for dep in deployments:
        dep.check_alive()
    if not finished:
        raise RunFailed(f"requests still running {timeout_s:.0f} s after the load stopped")
    failure = load.first_failure()
    if failure:
        raise RunFailed(f"{summary['failed']} of {summary['requests']} requests failed; first: {failure}")
    return summary


class SGLangEngine(Engine):
    expected_errors = (DeploymentError,)

    def __init__(self, ctx: RunContext, sglang_version: str | None = None, run_name: str | None = None):
        """sglang_version: the release the plan is spelled for (versions.yaml; None: the one installed on
        the nodes, asked before any server starts). run_name: the name of the node folders, the traces' prefix
        and the D4 column (default the run directory's; a PD role's is the run's with the role)."""
        super().__init__(ctx)
        self.sglang_version = sglang_version
        self.run_name = run_name or self.run_dir.name
        self.node_dir = node_dir_for(self.run_name)
        self.trace_dir = f"{self.node_dir}/traces"
        self.spec = self.plan = None
        self.dep: Deployment | None = None
        self.load: BackgroundLoad | None = None

    def start(self) -> None:
        """Plan (plan.sh), then every node's SGLang checks the command and starts; node 0 answers
        /health_generate. With profile.capture_traces, the capture traces the start wrote are copied."""
        s, m = self.scenario, self.manifest
        m["node_dir"] = self.node_dir
        with self.progress.phase("plan"):
            self.spec = scenario_deployment(s)
            self._use_plan(build_plan(self.spec, profile_dir=self.trace_dir, version=self.sglang_version),
                           "--sglang-version" if self.sglang_version else "default (until the nodes say theirs)")
        with self.progress.phase(f"start SGLang on {self.spec.nodes} node(s)"):
            try:
                self.dep = launch(self.plan, f"{self.node_dir}/logs", ready_timeout_s=s.engine.ready_timeout_s,
                                  logs_to=self.run_dir / "logs",
                                  replan=None if self.sglang_version else self._plan_for_installed)
            except DeploymentError as exc:
                raise RunFailed(str(exc)) from None
            m["node_check"] = {str(r): c for r, c in (self.dep.node_checks or {}).items()}
            m["nodes"] = ray.get([a.where.remote() for a in self.dep.actors], timeout=60)
            m["server_url"] = self.dep.url
            self.progress.note(f"node 0 at {self.dep.url}; " + ", ".join(f"node {n['node_rank']} on {n['ip']}"
                                                                        for n in m["nodes"]))
        if self.spec.capture_traces:
            with self.progress.phase("copy CUDA-graph capture traces"):
                m["capture_traces"] = copy_capture_traces(self.dep, self.trace_dir, self.run_dir)

    def _use_plan(self, plan, chosen_by: str) -> None:
        """The plan the run follows: in the manifest (secrets masked) and plan.sh, with its release's warning."""
        m = self.manifest
        self.plan = plan
        m["sglang_version"], m["sglang_version_from"] = plan.sglang.version, chosen_by
        m["plan"] = plan.to_manifest()  # secrets masked
        write_atomic(self.run_dir / "plan.sh", plan.render())
        if plan.sglang.assumption:
            m["sglang_assumed_as"] = plan.sglang.assumed_from
            self.progress.note(f"warning: {plan.sglang.assumption}")

    def _plan_for_installed(self, release: str):
        """No --sglang-version: the plan is spelled for the release the nodes have installed."""
        self._use_plan(build_plan(self.spec, profile_dir=self.trace_dir, version=release), "installed on the nodes")
        self.progress.note(f"SGLang {release} is installed on the nodes: the plan is spelled for it")
        return self.plan

    def reach_steady_state(self) -> None:
        """`workload.batch_size` streaming requests in flight until the server reports them all running."""
        w = self.scenario.workload
        with self.progress.phase(f"load to a running batch of {w.batch_size}"):
            self.load = BackgroundLoad(self.dep.url, w.batch_size, w.input_len, w.output_len,
                                       str(self.run_dir / "load" / "requests.jsonl"),
                                       ramp_s=min(10.0, 0.01 * w.batch_size),
                                       api=load_api(self.spec.extra_args),
                                       loads_path=self.plan.sglang.endpoints["loads"])
            self.manifest["running_batch"] = wait_for_running_batch(self.dep, self.load, w.batch_size,
                                                                    self.scenario.profile.timeout_s, self.progress)

    def profile(self) -> Traces:
        """A decode-only window, or for EXTEND a plain window under the running load (harness/sglang/profile.py);
        each node's ranks' traces stay on that node."""
        prof, spec, m = self.scenario.profile, self.spec, self.manifest
        prefix = self.scenario.outputs.trace_prefix or self.run_name
        extend = spec.profile_stage == "EXTEND"
        what = f"{prof.num_steps} forward passes (prefills among them)" if extend else f"{prof.num_steps} decode steps"
        with self.progress.phase(f"profile {what} on every rank"):
            self.progress.note(("the load keeps arriving" if extend else "new requests paused")
                               + f"; SGLang profiler {self.plan.profiler}")
            window = profile_extend if extend else profile_decode
            try:
                outcome = window(self.dep, self.load, self.trace_dir, prefix, prof.num_steps, prof.timeout_s,
                                 with_stack=prof.with_stack, record_shapes=prof.record_shapes)
            except DeploymentError as exc:
                self.dep.check_alive()
                raise RunFailed(str(actor_error(exc))) from None
            m["profile"] = {"profiler": self.plan.profiler, "stage": spec.profile_stage, "window_s": outcome.window_s,
                            "running_at_start": outcome.running_at_start,
                            "running_at_end": outcome.running_at_end, "stop_profile": outcome.stop_profile,
                            "whole_batch_outlasts_window": outcome.whole_batch,
                            "window_load_s": outcome.window_load_s}
            m["node_traces"] = {str(r): [Path(p).name for p in ps] for r, ps in outcome.traces.items()}
            m["accept_length"] = outcome.accept_length if spec.speculative else None
            if spec.expert_load:
                m["expert_load"] = self._dump_expert_load(outcome.expert_record)
            if spec.speculative:
                self.progress.note(f"MTP accept length over the profiled window: "
                                   f"{outcome.accept_length if outcome.accept_length is not None else 'not reported'}")
        return Traces(on_nodes=outcome.traces)

    def _dump_expert_load(self, recorded: str | None) -> dict:
        """expert_load/ (SGLang's dump and expert_load.json), or why there is none (said under the table)."""
        if recorded != "recorded":
            return {"error": recorded or "not recorded"}
        try:
            dump = expert_load.dump(self.dep, self.trace_dir, self.run_dir)
            doc = expert_load.record_files(dump, self.spec.ep, self.spec.extra_args)
        except expert_load.ExpertRecordError as exc:
            self.dep.check_alive()
            return {"error": str(exc)}
        self.progress.note(f"expert load over the profiled window: {doc.relative_to(self.run_dir)}")
        return {"dump": str(dump.relative_to(self.run_dir)), "file": str(doc.relative_to(self.run_dir))}

    def finish(self) -> None:
        """The load stops and its requests end (load/summary.json); every server stops and its log is fetched.
        The node actors stay: they still hold the traces."""
        with self.progress.phase("finish requests"):
            summary = end_load(self.load, self.run_dir, self.scenario.profile.timeout_s, self.spec.world_size,
                               self.manifest["accept_length"], [self.dep])
            self.progress.counts(completed_delta=summary["completed"], running=0)
            self.progress.note(f"{summary['completed']} requests, "
                               f"{summary.get('output_tok_per_s_per_gpu') or 0:.1f} output tokens/s per GPU")
        with self.progress.phase("stop servers"):
            self.dep.stop_servers(logs_to=self.run_dir / "logs")

    def collect(self, traces: Traces) -> Traces:
        """With outputs.keep_traces, every rank's trace into traces/ (read through its node's actor)."""
        if not self.scenario.outputs.keep_traces:
            return traces
        with self.progress.phase("copy traces to the run directory"):
            kept = []
            for rank, paths in sorted(traces.on_nodes.items()):
                for p in paths:
                    actor = self.dep.actors[rank]
                    kept.append(fetch_node_file(lambda offset, size, actor=actor, p=p: actor.read_file.remote(p, offset, size),
                                                self.run_dir / "traces" / Path(p).name, self.scenario.profile.timeout_s))
            self.manifest["traces"] = [p.name for p in kept]
        return Traces(in_run_dir=kept, on_nodes=traces.on_nodes)

    def analyse(self, traces: Traces) -> str:
        """Each node analyses its own ranks (after calibrating the signature against its capture traces,
        where usable); the driver combines the rows into the D4 column and writes analysis/
        (harness/sglang/run_analysis.py, which `moe-harness analyze RUN_DIR` runs too)."""
        timeout_s = self.scenario.profile.timeout_s
        with self.progress.phase("analyse each node's ranks"):
            capture_dir, capture_note = capture_use(self.dep.plan, self.trace_dir)
            options = analysis_options(self.scenario, self.run_name)
            captures = None
            if capture_dir:
                self.progress.note(f"calibrating {options['signature']} against each node's capture traces")
                kept = self.manifest.get("capture_traces") or []
                captures = {rank: own_capture_files(kept, rank, capture_dir) for rank in traces.on_nodes}

            def on_every_node(method: str):
                def call(jobs: dict) -> list:
                    refs = [getattr(self.dep.actors[rank], method).remote(paths, opts) for rank, (paths, opts) in jobs.items()]
                    try:
                        return ray.get(refs, timeout=timeout_s)
                    except DeploymentError as exc:
                        raise RunFailed(str(actor_error(exc))) from None
                return call

            parts, calibrations = analyse_nodes({rank: list(paths) for rank, paths in traces.on_nodes.items()}, options,
                                                captures, on_every_node("calibrate_signature"),
                                                on_every_node("analyze_traces"))
            done = finish_analysis(parts, options, calibrations, self._facts(capture_note), self.run_dir / "analysis")
            self.manifest.update(done.manifest)
            self.manifest["analysis_outputs"] = done.files
        return done.table

    def _facts(self, capture_note: str) -> RunFacts:
        """What the analysis' end reads off this run (harness/sglang/run_analysis.py)."""
        return RunFacts(scenario=self.scenario, run_name=self.run_name, run_dir=self.run_dir,
                        accept_length=self.manifest["accept_length"], expert_load=self.manifest.get("expert_load") or {},
                        sglang_version=self.plan.sglang.version,
                        shared_experts_apart=shared_experts_apart(self.plan.nodes[0].flag_keys),
                        scheduler_batch=self.spec.scheduler_batch, capture_note=capture_note,
                        load_window_s=load_window_start(self.manifest))

    def discard_traces(self, traces: Traces) -> None:
        """Every node-local trace goes: copied (keep_traces) or not, each has been analysed."""
        ray.get([self.dep.actors[rank].remove_files.remote(paths) for rank, paths in traces.on_nodes.items()],
                timeout=60)
        self.manifest["node_traces_removed"] = True

    def stop(self) -> None:
        """The load, then every server still running (logs fetched once they are complete), then the
        actors and the placement group."""
        load, dep = self.load, self.dep
        self.load = self.dep = None
        if load is not None:
            load.stop()
        if dep is not None:
            dep.stop(logs_to=self.run_dir / "logs")
        if load is not None:
            load.thread.join(timeout=30)
