"""Profile decode steps on every rank while the load runs, robustly (docs/sglang.md, "Profiling").

Why a window: SGLang's classic by-stage profiler handles only "prefill, then decode"; started
mid-decode under a load that keeps admitting requests, the next prefill starts it a second time and
the decode capture is lost or written as -EXTEND. Profile V2 stops at the first prefill instead. So
the harness first stops admitting requests and waits until every running request has its first
token: from then on the server runs decode batches only, and both profilers see exactly those.
V2 (SGLANG_PROFILE_V2=1, where the release has it) profiles `profile_stages: ["decode"]` and stops
itself; it has no manual stop (/stop_profile would raise in the scheduler), so it is never called.
The classic profiler (profile.sglang_profiler: v1) is stopped with /stop_profile on every exit path,
so a capture left running never makes the next /start_profile answer 500.
A plain window (profile.sglang_profiler: plain, a PD decode role's choice) is the classic profiler
without stages after the same pause: it never meets the batches a PD decode server builds from
transferred KV, which the by-stage profilers were not made for.
The MTP accept length is measured over the same window, from the load's own chunks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.load.client import window_accept_length
from harness.sglang import expert_load
from harness.sglang.http_post import post_json
from harness.run_errors import RunFailed, actor_error

if TYPE_CHECKING:  # Ray only where a deployment runs through actors: the request bodies need none
    from harness.sglang.server_actor import Deployment

FAST_POLL_S = 0.01   # between the pause and the profile start only: decode steps can be this short


@dataclass
class ProfileOutcome:
    traces: dict[int, list[str]] = field(default_factory=dict)
    accept_length: float | None = None      # tokens per verify step over the window (MTP), None without
    window_s: float = 0.0
    running_at_start: float | None = None
    running_at_end: float | None = None
    stop_profile: str | None = None          # v1: what /stop_profile answered
    expert_record: str | None = None         # profile.expert_load: "recorded", or why not
    whole_batch: bool | None = None          # every request in flight at the pause outlasts the window
    window_load_s: list[float] | None = None  # the window's start and end on the load records' clock


def start_profile_body(output_dir: str, num_steps: int, prefix: str, profiler: str, decode_stage: str,
                       with_stack: bool = True, record_shapes: bool = True, detailed_annotations: bool = False) -> dict:
    """Field names as SGLang's ProfileReq has them (managers/io_struct.py). `detailed_annotations`
    only where the release has the field (versions.yaml): the step labels then say each step's own
    batch and KV lengths."""
    body = {"output_dir": output_dir, "num_steps": num_steps, "activities": ["CPU", "GPU"],
            "profile_by_stage": True, "with_stack": with_stack, "record_shapes": record_shapes,
            "profile_prefix": prefix}
    if detailed_annotations:
        body["detailed_annotations"] = True
    if profiler == "v2":
        body["profile_stages"] = [decode_stage]   # lower case: V2 matches "prefill" / "decode"
    return body


def _server_says(dep: "Deployment") -> str:
    """The RuntimeError lines of node 0's log: SGLang's reason behind a bare HTTP 500."""
    import ray

    tail = ray.get(dep.actors[0].log_tail.remote(), timeout=30)
    lines = [l for l in tail.splitlines() if "Error" in l or "rror:" in l]
    return lines[-1].strip() if lines else "(no reason in node 0's log tail)"


AGES_LINE_UP_WAIT_S = 60.0  # the most the window waits for running requests' ages to line up by themselves


def _wait(dep: "Deployment", load, done, timeout_s: float, too_long: str) -> None:
    """Poll `done()` fast; a dead node or a failed request ends the wait at once (checked every 0.25 s)."""
    deadline, polls = time.monotonic() + timeout_s, 0
    while not done():
        if polls % 25 == 0:
            dep.check_alive()
            if load.first_failure():
                raise RunFailed(f"the load failed while the profile window opened: {load.first_failure()}")
        if time.monotonic() > deadline:
            raise RunFailed(too_long)
        polls += 1
        time.sleep(FAST_POLL_S)


def drain_prefills(dep: "Deployment", load, timeout_s: float, tokens_needed: int = 0,
                   window_tokens: int = 0, batch: int = 0) -> bool:
    """Stop admitting requests, then wait until every running request has its first token.

    The pause waits first for the whole batch (`batch` requests in flight) to have `window_tokens` still
    to come each, so no request ends inside the profiled window and every step runs the scenario's
    batch; where request ages are spread too widely for such a moment to come soon (up to a third of
    timeout_s, at most a minute), it lets the batch finish and admits it again all at once (SGLang
    0.5.20+'s classic profiler starts a decode capture only at a whole batch); only where the output is
    shorter than the window does it settle for a young request (`tokens_needed` still to come). Returns
    whether the whole batch outlasts the window."""
    def whole_batch_lasts() -> bool:
        in_flight, fewest = load.fewest_tokens_left()
        return in_flight >= batch > 0 and fewest >= window_tokens

    try:
        _wait(dep, load, whole_batch_lasts, min(timeout_s / 3, AGES_LINE_UP_WAIT_S), "")
        steady = True
    except RunFailed as exc:
        if str(exc):  # a dead node or a failed request, not the time-out
            raise
        steady = False
    if not steady and window_tokens and load.output_len >= window_tokens:
        # Ages never lined up (a prefill-heavy load keeps them spread): let the batch run out, then admit
        # it whole at once, so every request starts together and outlasts the window.
        load.pause()
        _wait(dep, load, lambda: load.fewest_tokens_left()[0] == 0, timeout_s,
              f"the running requests did not finish within {timeout_s:.0f} s of new ones being paused "
              "(profile.timeout_s)")
        load.resume()
        _wait(dep, load, whole_batch_lasts, timeout_s,
              f"the load did not bring {batch} requests back in flight within {timeout_s:.0f} s (profile.timeout_s)")
        steady = True
    if not steady:
        _wait(dep, load, lambda: load.most_tokens_left() >= tokens_needed, timeout_s,
              f"no running request had {tokens_needed} tokens still to come within {timeout_s:.0f} s "
              "(profile.timeout_s): raise workload.output_len")
    load.pause()
    _wait(dep, load, lambda: load.awaiting_first_token() == 0, timeout_s,
          f"{load.awaiting_first_token()} request(s) still had no first token {timeout_s:.0f} s after new "
          "requests were paused (profile.timeout_s)")
    return steady


def collect_traces(dep: "Deployment", trace_dir: str, prefix: str, timeout_s: float, stage: str | None = None,
                   rename_to: str | None = None) -> dict[int, list[str]]:
    """{node_rank: trace paths on that node}; the first node missing a rank raises DeploymentError."""
    import ray

    labels = dep.plan.expected_rank_files()
    refs = {rank: dep.actors[rank].wait_for_traces.remote(trace_dir, labels[rank], prefix, timeout_s, stage, rename_to)
            for rank in labels}
    return {rank: ray.get(ref, timeout=timeout_s + 30) for rank, ref in refs.items()}


def _expert_record(call, dep: "Deployment") -> str:
    """ "recorded", or why the recorder failed (the profile goes on: the table says what is missing)."""
    try:
        call(dep)
        return "recorded"
    except expert_load.ExpertRecordError as exc:
        dep.check_alive()
        return str(exc)


def profile_decode(dep: "Deployment", load, trace_dir: str, prefix: str, num_steps: int, timeout_s: float,
                   with_stack: bool = True, record_shapes: bool = True) -> ProfileOutcome:
    """The decode-only window, then num_steps profiled decode steps on every rank, traces found on every node."""
    plan = dep.plan
    profile = plan.sglang.profile
    outcome = ProfileOutcome()
    # Both profilers stop at the step after the last profiled one, and a verify step yields up to
    # num_draft_tokens tokens; half an output leaves room for the round trips before the first step.
    tokens_per_step = plan.spec.speculative.num_draft_tokens if plan.spec.speculative else 1
    outcome.whole_batch = drain_prefills(dep, load, timeout_s,
                                         tokens_needed=max((num_steps + 2) * tokens_per_step, load.output_len // 2),
                                         window_tokens=(num_steps + 2) * tokens_per_step, batch=load.concurrency)
    before, started, opened_s = load.spec_snapshot(), time.monotonic(), load.clock_s()
    if plan.profiler == "plain":  # decode passes only from here on (the drain): a plain window holds just them
        body = plain_window_body(trace_dir, num_steps, prefix, with_stack, record_shapes)
    else:
        body = start_profile_body(trace_dir, num_steps, prefix, plan.profiler, profile["v2_decode_stage"],
                                  with_stack, record_shapes, bool(profile.get("detailed_annotations")))
    if plan.spec.expert_load:  # the expert load of the same steps (harness/sglang/expert_load.py)
        outcome.expert_record = _expert_record(expert_load.start, dep)
    # the batch the window opens on, read before the start call: on a busy host that call can outlast
    # the drained requests' remaining tokens (a run of the suite read 2 of 8 after it)
    outcome.running_at_start = load.running_batch()
    try:
        # A classic capture left running (by-stage state outlives /stop_profile: a later prefill starts an
        # EXTEND capture) refuses every start with a bare 500: stop it, try once more.
        _start_window(dep, body, retry_after_stop=plan.profiler == "v1")
        try:
            outcome.traces = collect_traces(dep, trace_dir, prefix, timeout_s, stage=plan.decode_stage,
                                            rename_to=profile["v1_decode_suffix"] if plan.decode_stage else None)
            if outcome.expert_record == "recorded":
                outcome.expert_record = _expert_record(expert_load.stop, dep)
        except Exception as exc:
            min_bs_env = profile.get("decode_min_bs_env")
            if plan.profiler == "v1" and min_bs_env and min_bs_env in plan.nodes[0].env:
                raise RunFailed(f"{actor_error(exc)}; the classic profiler starts its decode capture only at a "
                                f"decode batch of {plan.nodes[0].env[min_bs_env]} requests ({min_bs_env}), and the "
                                f"running batch was {load.running_batch()} over every scheduler") from None
            if load.running_batch() == 0:
                raise RunFailed(f"{actor_error(exc)}; by then the running batch had drained, before {num_steps} decode steps "
                                "were profiled (is workload.output_len long enough for profile.num_steps?)") from None
            raise
    finally:
        if plan.profiler in ("v1", "plain"):  # never leave a classic capture running: the next start gets a 500
            _stop_classic(dep, outcome)
    _close_window(outcome, load, started, opened_s)
    outcome.accept_length = window_accept_length(before, load.spec_snapshot())
    return outcome


def _start_window(dep: "Deployment", body: dict, retry_after_stop: bool = False) -> None:
    """POST /start_profile on node 0; a refusal (after one /stop_profile and a second try where
    `retry_after_stop`) or no answer is a RunFailed with the server's own reason."""
    endpoints = dep.plan.sglang.endpoints
    try:
        status, text = post_json(dep.url + endpoints["start_profile"], body, 30.0)
        if status != 200 and retry_after_stop:
            post_json(dep.url + endpoints["stop_profile"], None, 60.0)
            status, text = post_json(dep.url + endpoints["start_profile"], body, 30.0)
    except OSError as exc:
        dep.check_alive()  # a dead node explains it best
        raise RunFailed(f"{endpoints['start_profile']} not answered by node 0: {exc}") from None
    if status != 200:
        dep.check_alive()
        raise RunFailed(f"{endpoints['start_profile']} answered HTTP {status} ({text.strip()[:200]}); "
                        f"node 0 says: {_server_says(dep)}")


def _stop_classic(dep: "Deployment", outcome: ProfileOutcome) -> None:
    """/stop_profile, its answer (or why none came) kept in the outcome."""
    try:
        status, text = post_json(dep.url + dep.plan.sglang.endpoints["stop_profile"], None, 60.0)
        outcome.stop_profile = f"HTTP {status}: {text.strip()[:200]}"
    except OSError as exc:
        outcome.stop_profile = f"not answered: {exc}"


def _close_window(outcome: ProfileOutcome, load, started: float, opened_s: float | None) -> None:
    """The window's length, its start and end on the load records' clock, the batch running at its end."""
    outcome.window_s = round(time.monotonic() - started, 3)
    closed_s = load.clock_s()
    if opened_s is not None and closed_s is not None:
        outcome.window_load_s = [round(opened_s, 6), round(closed_s, 6)]
    outcome.running_at_end = load.running_batch()


def plain_window_body(output_dir: str, num_steps: int, prefix: str, with_stack: bool = True,
                      record_shapes: bool = True) -> dict:
    """The classic profiler's plain window: num_steps forward passes of whatever stage, from the next one
    (no profile_by_stage: its EXTEND capture stops at the first decode step and opens a DECODE one)."""
    return {"output_dir": output_dir, "num_steps": num_steps, "activities": ["CPU", "GPU"],
            "with_stack": with_stack, "record_shapes": record_shapes, "profile_prefix": prefix}


def profile_extend(dep: "Deployment", load, trace_dir: str, prefix: str, num_steps: int, timeout_s: float,
                   with_stack: bool = True, record_shapes: bool = True) -> ProfileOutcome:
    """A plain window of num_steps forward passes on every rank while the load keeps arriving (new
    requests are never paused: their prefills are what the window is for). The traces keep SGLang's
    step labels (step[EXTEND bs= toks=]); the analysis describes their extend steps (AnalysisOptions.stage)."""
    outcome = ProfileOutcome()
    started, opened_s = time.monotonic(), load.clock_s()
    try:
        _start_window(dep, plain_window_body(trace_dir, num_steps, prefix, with_stack, record_shapes))
        outcome.running_at_start = load.running_batch()
        outcome.traces = collect_traces(dep, trace_dir, prefix, timeout_s)
    finally:  # a window that never closed (the server stopped stepping) must not refuse the next start
        _stop_classic(dep, outcome)
    _close_window(outcome, load, started, opened_s)
    return outcome
