"""The embedded engine's stages in a Ray job: one actor decodes the batch; the driver steps it.

Why the driver steps it: the steady-state rule (harness/steady_state.py) is judged between decode
calls, and every step time comes back to the manifest as it happens. The profile's trace comes
back with the call's reply, so it is written into the run directory at once and analysed there.
"""
from __future__ import annotations

from harness.engines.base import Engine, RunContext, Traces
from harness.engines.embedded.analyse import analyse
from harness.engines.embedded.handle import EngineHandle, start_actor
from harness.run_dir import write_atomic, write_jsonl
from harness.run_errors import RunFailed
from harness.steady_state import NotSteadyError, is_steady
from harness.trace_names import trace_file_name

REQUESTS_TIMEOUT_S = 15.0  # a stopped run waits this long for the actor's request records


class EmbeddedRayEngine(Engine):
    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.log_path = self.run_dir / "engine.log"
        self.handle: EngineHandle | None = None
        self.warmup_step_ms: list[float] = []  # the manifest's own list: a failure keeps the steps so far
        self.profiled_step_ms: list[float] = []

    def start(self) -> None:
        import ray

        s = self.scenario
        with self.progress.phase("start engine"):
            self.handle = start_actor(ray, s, self.log_path)
            engine_info = self.handle.call("ready", timeout_s=s.engine.start_timeout_s)
            self.manifest["engine_info"] = engine_info
            self.progress.note(
                f"{engine_info['num_layers']} layers, {engine_info['parameters'] / 1e6:.1f} M parameters on "
                f"{engine_info['device_name']} (host {engine_info['hostname']})"
            )

    def reach_steady_state(self) -> None:
        """Prefill the batch, then decode one step at a time until the last steps agree."""
        s = self.scenario
        with self.progress.phase("prefill"):
            self.manifest["prefill_ms"] = self.handle.call("prefill", timeout_s=s.profile.timeout_s)
        self.progress.counts(running=s.workload.batch_size)  # the engine decodes the whole batch each step
        with self.progress.phase("warm up to steady state"):
            self.warmup_step_ms = self.manifest.setdefault("warmup_step_ms", [])
            self._decode_until_steady(self.warmup_step_ms)

    def _decode_until_steady(self, step_ms: list[float]) -> None:
        """Decode one step at a time (appending to `step_ms`, so a failure keeps them) until steady."""
        w = self.scenario.workload
        while len(step_ms) < w.max_warmup_steps:
            step_ms += self.handle.call("decode", 1, timeout_s=self.scenario.profile.timeout_s)
            if is_steady(step_ms, w.warmup_steps, w.steady_window, w.steady_rel_spread):
                window = step_ms[-w.steady_window :]
                self.progress.note(f"steady after {len(step_ms)} steps: {sum(window) / len(window):.2f} ms per step")
                return
        raise NotSteadyError(step_ms, w.steady_window, w.steady_rel_spread)

    def profile(self) -> Traces:
        """torch.profiler over `profile.num_steps` decode steps; the trace is written to traces/ at once."""
        p = self.scenario.profile
        prefix = self.scenario.outputs.trace_prefix or self.run_dir.name
        with self.progress.phase(f"profile {p.num_steps} decode steps"):
            profiled = self.handle.call("profile", p.num_steps, prefix, p.record_shapes, p.with_stack,
                                        timeout_s=p.timeout_s)
            self.profiled_step_ms = profiled["step_ms"]
            self.manifest["profiled_step_ms"] = profiled["step_ms"]
            expected = trace_file_name(prefix, "DECODE", 0)
            if expected not in profiled["files"]:
                raise RunFailed(
                    f"the profile wrote no trace: expected {expected} from rank TP-0, got "
                    f"{sorted(profiled['files']) or 'nothing'} (see {self.log_path})"
                )
            return Traces(in_run_dir=[write_atomic(self.run_dir / "traces" / name, data)
                                      for name, data in sorted(profiled["files"].items())])

    def finish(self) -> None:
        """Decode every request to its end, write the request and step records, then stop the actor."""
        with self.progress.phase("finish requests"):
            finished = self.handle.call("finish", timeout_s=self.scenario.profile.timeout_s)
            write_jsonl(self.run_dir / "load" / "requests.jsonl", finished["requests"])
            self._write_steps(finished["step_ms"])
            self.progress.counts(completed_delta=sum(1 for r in finished["requests"] if r["completed"]), running=0)
            incomplete = [r["request_id"] for r in finished["requests"] if not r["completed"]]
            if incomplete:
                raise RunFailed(f"requests {incomplete} did not complete")
        self.stop()

    def _write_steps(self, finish_step_ms: list[float]) -> None:
        steps = [{"phase": "warmup", "step_ms": x} for x in self.warmup_step_ms]
        steps += [{"phase": "profile", "step_ms": x} for x in self.profiled_step_ms]
        steps += [{"phase": "finish", "step_ms": x} for x in finish_step_ms]
        write_jsonl(self.run_dir / "load" / "steps.jsonl", [dict(s, step=i) for i, s in enumerate(steps)])

    def collect(self, traces: Traces) -> Traces:
        """Nothing left to copy: profile() wrote the traces into the run directory."""
        return traces

    def analyse(self, traces: Traces) -> str:
        with self.progress.phase("analyse traces"):
            done = analyse(traces.in_run_dir, self.scenario, self.run_dir.name, self.run_dir / "analysis",
                           device_name=(self.manifest.get("engine_info") or {}).get("device_name"))
            self.manifest["analysis_outputs"] = done.files
        return done.table

    def discard_traces(self, traces: Traces) -> None:
        """With outputs.keep_traces off, the run directory's traces go once analysed."""
        if not self.scenario.outputs.keep_traces:
            for path in traces.in_run_dir:
                path.unlink()
            self.manifest["traces_removed"] = [p.name for p in traces.in_run_dir]

    def stop(self) -> None:
        """The actor goes; a run stopped before finish() (failed, interrupted) keeps its step times and
        request records so far (the actor answers once its current call ends; bounded wait)."""
        if (self.warmup_step_ms or self.profiled_step_ms) and not (self.run_dir / "load" / "steps.jsonl").exists():
            self._write_steps([])
        requests_path = self.run_dir / "load" / "requests.jsonl"
        if self.handle is not None and "prefill_ms" in self.manifest and not requests_path.exists():
            try:
                write_jsonl(requests_path, self.handle.call("requests", timeout_s=REQUESTS_TIMEOUT_S))
            except Exception as exc:  # noqa: BLE001 - best effort: the run's own error must stay the one reported
                self.progress.note(f"request records not kept: {exc}")
        if self.handle is not None:
            self.handle.kill()
            self.handle = None
