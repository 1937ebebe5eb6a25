"""Every Prometheus metric the harness exports, in one table.

One place so that the exporters, docs/metrics.md and the dashboard checks agree on names,
types, units and labels. Names follow Prometheus conventions: one prefix, base units in the
name (`_seconds`), `_total` for counters, `_info` for info metrics. Labels are only ones with a
bounded set of values (scenario, run_id, group, module, kernel label from a signature, stage,
quantile, status, phase); never ranks, request ids or raw kernel names.
"""
from __future__ import annotations

from dataclasses import dataclass

PREFIX = "moe_harness_"

GAUGE = "gauge"
COUNTER = "counter"
SUMMARY = "summary"
INFO = "info"

RUN_LABELS = ("scenario", "run_id")
LATENCY_QUANTILES = (0.5, 0.9, 0.99)
RUN_STATUSES = ("running", "ok", "partial", "failed", "interrupted", "incomplete")
PHASES = ("starting", "warmup", "steady", "profiling", "collecting", "analyzing", "done", "failed")


@dataclass(frozen=True)
class MetricDef:
    name: str  # full exposition name (counters include `_total`, info includes `_info`)
    kind: str  # gauge | counter | summary | info
    help: str
    labels: tuple[str, ...]
    source: str  # where the value comes from (for docs/metrics.md)
    live: bool = False  # exported by the live progress exporter rather than the run results


def _m(name: str, kind: str, help_text: str, labels: tuple[str, ...], source: str, live: bool = False) -> MetricDef:
    return MetricDef(PREFIX + name, kind, help_text, labels, source, live)


RUN_INFO = _m(
    "run_info", INFO, "Run identity: always 1, facts in labels.",
    RUN_LABELS + ("engine", "engine_version", "model", "signature", "harness_version", "gpus"), "manifest.json")
RUN_STATUS = _m(
    "run_status", GAUGE, "1 for the run's status, 0 for the other statuses.",
    RUN_LABELS + ("status",), "manifest.json status")
RUN_START = _m(
    "run_start_timestamp_seconds", GAUGE, "When the run started (Unix time).",
    RUN_LABELS, "manifest.json started_at")
RUN_DURATION = _m(
    "run_duration_seconds", GAUGE, "Wall time of the whole run.",
    RUN_LABELS, "manifest.json started_at / finished_at")

LAYER_MODULE_BUSY = _m(
    "layer_module_busy_seconds", GAUGE,
    "Per-layer kernel busy time of one module (D4 cell): sum of kernel durations per layer, averaged "
    "over the profiled steps and layers, ranks combined by the rank policy.",
    RUN_LABELS + ("group", "module"), "analysis/d4_detail.csv value_us, summed over the module's kernels")
LAYER_MODULE_EXPOSED = _m(
    "layer_module_exposed_seconds", GAUGE,
    "Per-layer exposed time of one module: the part of its kernels' time not hidden under kernels "
    "on other streams, averaged like layer_module_busy_seconds.",
    RUN_LABELS + ("group", "module"), "analysis/d4_detail.csv exposed_us, summed over the module's kernels")
LAYER_KERNEL_BUSY = _m(
    "layer_kernel_busy_seconds", GAUGE,
    "Per-layer busy time of one signature kernel label inside a module (D4 row).",
    RUN_LABELS + ("group", "module", "kernel"), "analysis/d4_detail.csv value_us")
STEP_TIME = _m(
    "step_seconds", GAUGE, "Wall time of one profiled forward step of the D4 stage (the D4 table's end-to-end row).",
    RUN_LABELS + ("stage",), "analysis/analysis.json d4.step_ms")
LAYERS_TIME = _m(
    "all_layers_seconds", GAUGE,
    "Wall time from the first layer kernel's start to the last layer kernel's end in a step (D4 table).",
    RUN_LABELS + ("stage",), "analysis/analysis.json d4.layers_ms")
RANK_STEP_MAX = _m(
    "rank_step_max_seconds", GAUGE, "Slowest rank's step time.",
    RUN_LABELS + ("stage",), "analysis/analysis.json d4.rank_step_ms")
RANK_STEP_MIN = _m(
    "rank_step_min_seconds", GAUGE, "Fastest rank's step time.",
    RUN_LABELS + ("stage",), "analysis/analysis.json d4.rank_step_ms")
RANK_STEP_SPREAD = _m(
    "rank_step_spread_seconds", GAUGE, "Slowest minus fastest rank's step time.",
    RUN_LABELS + ("stage",), "analysis/analysis.json d4.rank_step_ms")
RANK_STEP_SPREAD_RATIO = _m(
    "rank_step_spread_ratio", GAUGE, "Slowest minus fastest rank's step time, over the median rank's.",
    RUN_LABELS + ("stage",), "analysis/analysis.json d4.rank_spread_pct / 100")
RANKS = _m(
    "ranks", GAUGE, "Number of ranks in the D4 column.", RUN_LABELS, "analysis/analysis.json d4.rank_step_ms")

DECODE_THROUGHPUT = _m(
    "decode_throughput_per_gpu_tokens_per_second", GAUGE,
    "Measured output tokens per second per GPU over the load window (all requests' output tokens "
    "divided by the window's wall time and the run's GPU count).",
    RUN_LABELS, "load/requests.jsonl + manifest.json gpus")
PROFILE_THROUGHPUT = _m(
    "profile_decode_throughput_per_gpu_tokens_per_second", GAUGE,
    "Decode tokens per second per GPU implied by the profile: per-rank batch size times MTP "
    "accept length (1 without MTP) divided by the mean decode step time.",
    RUN_LABELS, "analysis/steps.csv batch_size; analysis.json d4.step_ms; accept length")
MTP_ACCEPT_LENGTH = _m(
    "mtp_accept_length", GAUGE,
    "Mean tokens emitted per verify step with multi-token prediction (1 = no speculative gain).",
    RUN_LABELS, "load/summary.json accept_length, else analysis.json d4.accept_length")

TTFT = _m(
    "request_ttft_seconds", SUMMARY, "Time to first token per request (quantiles over the run).",
    RUN_LABELS, "load/requests.jsonl ttft_ms")
TPOT = _m(
    "request_tpot_seconds", SUMMARY,
    "Time per output token after the first, per request: (latency - ttft) / (output_len - 1).",
    RUN_LABELS, "load/requests.jsonl")
ITL = _m(
    "request_itl_seconds", SUMMARY, "Inter-token latency: every gap between streamed chunks.",
    RUN_LABELS, "load/requests.jsonl itl_ms")
REQUESTS = _m(
    "requests_total", COUNTER, "Requests sent during the run, by outcome (ok | error).",
    RUN_LABELS + ("outcome",), "load/requests.jsonl")
OUTPUT_TOKENS = _m(
    "output_tokens_total", COUNTER, "Output tokens received over all successful requests.",
    RUN_LABELS, "load/requests.jsonl output_len")

PROGRESS_REQUESTS = _m(
    "progress_requests_completed_total", COUNTER, "Requests completed so far in the running run.",
    RUN_LABELS, "live exporter", live=True)
PROGRESS_RUNNING = _m(
    "progress_running_requests", GAUGE, "Requests in flight right now (the running batch).",
    RUN_LABELS, "live exporter", live=True)
PROGRESS_PHASE = _m(
    "progress_phase", GAUGE, "1 for the run's current phase, 0 for the other phases.",
    RUN_LABELS + ("phase",), "live exporter", live=True)
PROGRESS_UPDATED = _m(
    "progress_last_update_timestamp_seconds", GAUGE, "When the driver last reported progress.",
    RUN_LABELS, "live exporter", live=True)

ALL: tuple[MetricDef, ...] = tuple(v for v in list(globals().values()) if isinstance(v, MetricDef))
RESULT_METRICS = tuple(m for m in ALL if not m.live)
LIVE_METRICS = tuple(m for m in ALL if m.live)


def exposed_names(metric: MetricDef) -> set[str]:
    """Every series name a metric produces in the exposition format (what PromQL can select)."""
    if metric.kind == SUMMARY:
        return {metric.name, metric.name + "_sum", metric.name + "_count"}
    if metric.kind == COUNTER:
        # prometheus-client also writes a `_created` series for counters it owns.
        return {metric.name, metric.name.removesuffix("_total") + "_created"}
    return {metric.name}


def all_exposed_names() -> set[str]:
    names: set[str] = set()
    for metric in ALL:
        names |= exposed_names(metric)
    return names
