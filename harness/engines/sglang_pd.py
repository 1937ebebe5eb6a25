"""A prefill/decode (PD) pair: a prefill server and a decode server over their own nodes, SGLang's
router in front, one load through the router, each role profiled and analysed, TTFT split.

Why two one-server runs: each role is an SGLang deployment like any other (harness/engines/sglang.py
plans, checks, starts, profiles and analyses it), so each gets a folder of the run that is a run
directory of its own (RUN/prefill, RUN/decode: scenario.yaml, manifest.json, plan.sh, logs/, traces/,
analysis/, table.md), which analyze / report / compare / export read as any run. What the pair adds
lives here: both roles start at once, the router starts once both answer, the load goes through the
router while the decode server says what runs, the prefill window is taken under the arriving load
before the decode window pauses it, and the servers' own per-stage metrics are scraped before the
load's first request and after its last for the TTFT split (every request of the load, none other) (RUN/ttft_split.md, harness/metrics/ttft_split.py).
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from harness.engines.base import Engine, RunContext, Traces
from harness.engines.sglang import SGLangEngine, end_load, load_api
from harness.http_deadline import Deadline, request
from harness.load.background import BackgroundLoad
from harness.run_dir import write_atomic, write_manifest
from harness.run_errors import RunFailed
from harness.run_secrets import run_secrets
from harness.scenario import scenario_to_yaml
from harness.pd_roles import ROLES, profiled_roles, role_scenarios
from harness.sglang.router import RouterLaunch, router_argv, start_router, stop_router
from harness.sglang.running_batch import wait_for_running_batch
from harness.sglang.server_actor import DeploymentError

SCRAPE_TIMEOUT_S = 10.0


@dataclass
class RoleTraces(Traces):
    """Each profiled role's traces (on its nodes, or copied into its folder)."""
    roles: dict[str, Traces] = field(default_factory=dict)


class SGLangPDEngine(Engine):
    expected_errors = (DeploymentError,)

    def __init__(self, ctx: RunContext, sglang_version: str | None = None):
        super().__init__(ctx)
        self.pd = self.scenario.engine.disaggregation
        self.secrets = run_secrets(self.scenario, os.environ)
        self.profiled = profiled_roles(self.scenario)
        self.roles: dict[str, SGLangEngine] = {}
        self.manifest["pd_roles"] = {role: role for role in ROLES}  # role -> its folder
        self.manifest["transfer_backend"] = self.pd.transfer_backend
        for role, scenario in role_scenarios(self.scenario).items():
            folder = self.run_dir / role
            write_atomic(folder / "scenario.yaml", scenario_to_yaml(scenario, self.secrets))
            manifest = {"status": "failed", "scenario": scenario.name, "run_dir": str(folder),
                        "run_name": f"{self.run_dir.name}-{role}", "engine": "sglang", "pd_role": role,
                        "pd_run_dir": str(self.run_dir)}
            self.roles[role] = SGLangEngine(RunContext(scenario, folder, manifest, self.progress.part(role)),
                                            sglang_version, run_name=manifest["run_name"])
        self.router = self.router_url = None
        self.load: BackgroundLoad | None = None
        self.scrapes: dict[str, list[str]] = {role: [] for role in ROLES}
        self.analysed: set[str] = set()

    def start(self) -> None:
        """Both roles at once (each: plan, node checks, servers, readiness), then the router over them."""
        with ThreadPoolExecutor(max_workers=len(ROLES), thread_name_prefix="pd-start") as pool:
            futures = {role: pool.submit(self.roles[role].start) for role in ROLES}
            errors = {role: f.exception() for role, f in futures.items()}
        for role, exc in errors.items():
            if exc is not None:
                message = str(exc) if isinstance(exc, (RunFailed, DeploymentError)) else f"{type(exc).__name__}: {exc}"
                raise RunFailed(f"{role} role: {message}")
        prefill, decode = self.roles["prefill"], self.roles["decode"]
        router = self.pd.router
        argv = router_argv(router.launcher, router.port, [prefill.dep.url], self.pd.bootstrap_port, [decode.dep.url],
                           router.extra_args, router.prometheus_port)
        with self.progress.phase("start the router"):
            self.router, self.router_url = start_router(RouterLaunch(argv), f"{decode.node_dir}/logs/router.log",
                                                        router.port, [prefill.dep.url, decode.dep.url],
                                                        router.ready_timeout_s)
            self.manifest["router"] = {"url": self.router_url, "argv": list(self.secrets.argv(argv))}
            self.progress.note(f"router at {self.router_url}: prefill {prefill.dep.url}, decode {decode.dep.url}")

    def reach_steady_state(self) -> None:
        """Each role's /metrics (the TTFT split's window starts here, before the load's first request), then
        the load through the router, until the decode server reports the whole batch running."""
        w, decode = self.scenario.workload, self.roles["decode"]
        with self.progress.phase(f"load through the router to a running batch of {w.batch_size}"):
            self._scrape("start")
            self.load = BackgroundLoad(self.router_url, w.batch_size, w.input_len, w.output_len,
                                       str(self.run_dir / "load" / "requests.jsonl"),
                                       ramp_s=min(10.0, 0.01 * w.batch_size), api=load_api(decode.spec.extra_args),
                                       loads_path=decode.plan.sglang.endpoints["loads"], loads_url=decode.dep.url)
            for role in self.roles.values():
                role.load = self.load
            self.manifest["running_batch"] = wait_for_running_batch(decode.dep, self.load, w.batch_size,
                                                                    self.scenario.profile.timeout_s, self.progress)

    def profile(self) -> RoleTraces:
        """The prefill window first, while requests keep arriving; then the decode window, which pauses them."""
        traces = RoleTraces()
        for role in self.profiled:
            traces.roles[role] = self.roles[role].profile()
        return traces

    def finish(self) -> None:
        """Every request ends (load/summary.json); each role's /metrics again and the TTFT split; the
        servers and the router stop, their logs fetched into each role's logs/ and logs/router.log."""
        with self.progress.phase("finish requests"):
            summary = end_load(self.load, self.run_dir, self.scenario.profile.timeout_s,
                               sum(role.spec.world_size for role in self.roles.values()),
                               self.roles["decode"].manifest.get("accept_length"),
                               [role.dep for role in self.roles.values()])
            self.progress.counts(completed_delta=summary["completed"], running=0)
            self.progress.note(f"{summary['completed']} requests through the router")
        with self.progress.phase("split the time to first token"):
            self._scrape("end")
            self._ttft_split()
        with self.progress.phase("stop servers and router"):
            for role in self.roles.values():
                role.dep.stop_servers(logs_to=role.run_dir / "logs")
            self._stop_router()

    def collect(self, traces: RoleTraces) -> RoleTraces:
        return RoleTraces(roles={role: self.roles[role].collect(t) for role, t in traces.roles.items()})

    def analyse(self, traces: RoleTraces) -> str:
        """Each profiled role's tables in its folder; the run's table: each role's, then the TTFT split."""
        parts = []
        for role, role_traces in traces.roles.items():
            engine = self.roles[role]
            table = engine.analyse(role_traces)
            write_atomic(engine.run_dir / "table.md", table)
            self.analysed.add(role)
            parts.append(f"## {role} role ({engine.run_dir.name}/: {engine.scenario.profile.stages[0]} steps)\n\n{table}")
        split = self.run_dir / "ttft_split.md"
        if split.is_file():
            parts.append("## Time to first token, split (SGLang's own per-stage metrics, over the load)\n\n"
                         + split.read_text(encoding="utf-8"))
        elif "ttft_split" in self.manifest:
            parts.append(f"No TTFT split: {self.manifest['ttft_split'].get('error')}\n")
        return "\n".join(parts)

    def discard_traces(self, traces: RoleTraces) -> None:
        for role, role_traces in traces.roles.items():
            self.roles[role].discard_traces(role_traces)

    def stop(self) -> None:
        """The load, the router, every role's servers and actors; then each role's manifest.json (status ok
        once its tables are written), so a role's folder reads as a run directory after any exit."""
        load, self.load = self.load, None
        if load is not None:
            load.stop()
        self._stop_router()
        for role, engine in self.roles.items():
            engine.load = None
            try:
                engine.stop()
            finally:
                self._write_role_manifest(role, engine)
        if load is not None:
            load.thread.join(timeout=30)

    def _stop_router(self) -> None:
        router, self.router = self.router, None
        if router is not None:
            stop_router(router, logs_to=self.run_dir / "logs")

    def _write_role_manifest(self, role: str, engine: SGLangEngine) -> None:
        manifest = engine.manifest
        if role in self.analysed:
            manifest["status"] = "ok"
        elif role not in self.profiled:
            manifest["status"] = "not profiled"
            manifest["error"] = {"message": f"profile.stages of the PD scenario names no {role} window"}
        write_manifest(engine.run_dir, manifest, self.secrets.data)

    def _scrape(self, when: str) -> None:
        """Each role's node-0 /metrics into metrics/<role>-<when>.prom (kept for `moe-harness ttft-split`)."""
        for role, engine in self.roles.items():
            url = engine.dep.url + "/metrics"
            try:
                status, body = request(url, Deadline(SCRAPE_TIMEOUT_S))
            except OSError as exc:
                self.manifest.setdefault("metrics_scrapes_failed", []).append(f"{role} {when}: {exc}")
                continue
            if status != 200:
                self.manifest.setdefault("metrics_scrapes_failed", []).append(f"{role} {when}: HTTP {status}")
                continue
            text = body.decode("utf-8", "replace")
            write_atomic(self.run_dir / "metrics" / f"{role}-{when}.prom", text)
            self.scrapes[role].append(text)

    def _ttft_split(self) -> None:
        """ttft_split.md and .json from the two scrapes of each role, or why not (the run goes on)."""
        from harness.metrics.ttft_split import TtftSplitError, markdown, split

        try:
            parts = split({role: texts for role, texts in self.scrapes.items() if texts})
        except TtftSplitError as exc:
            self.manifest["ttft_split"] = {"error": str(exc)}
            self.progress.note(f"no TTFT split: {exc}")
            return
        write_atomic(self.run_dir / "ttft_split.md", markdown(parts))
        write_atomic(self.run_dir / "ttft_split.json", json.dumps([asdict(p) for p in parts], indent=2) + "\n")
        self.manifest["ttft_split"] = {"file": "ttft_split.md",
                                       "parts_ms": {p.name: p.mean_ms for p in parts if not p.context}}
        self.progress.note("TTFT split: " + ", ".join(f"{p.name} {p.mean_ms:.1f} ms" for p in parts
                                                      if not p.context and p.mean_ms is not None))
