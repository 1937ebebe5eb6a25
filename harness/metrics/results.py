"""Turn one run's results (RunData) into Prometheus metric families.

A custom collector rather than client-side instrumentation: the values are already final
numbers in files, and Prometheus summaries with precomputed quantiles are what the per-request
load records give.
"""
from __future__ import annotations

import math

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from harness.metrics import definitions as d
from harness.metrics.load_records import LatencySummary
from harness.metrics.run_data import RunData


def _gauge(metric: d.MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))


def _summary(metric: d.MetricDef, run_labels: dict[str, str], summary: LatencySummary) -> Metric:
    family = Metric(metric.name, metric.help, "summary")
    for q, value in summary.quantiles.items():
        if not math.isnan(value):
            family.add_sample(metric.name, {**run_labels, "quantile": repr(q)}, value)
    family.add_sample(metric.name + "_sum", dict(run_labels), summary.sum)
    family.add_sample(metric.name + "_count", dict(run_labels), float(summary.count))
    return family


class RunResultsCollector(Collector):
    def __init__(self, run: RunData):
        self.run = run

    def collect(self):
        run = self.run
        base = [run.scenario, run.run_id]
        labels = dict(zip(d.RUN_LABELS, base))

        info = InfoMetricFamily(d.RUN_INFO.name.removesuffix("_info"), d.RUN_INFO.help, labels=list(d.RUN_LABELS))
        info.add_metric(base, run.info)
        yield info

        status = _gauge(d.RUN_STATUS)
        for name in sorted(set(d.RUN_STATUSES) | {run.status}):
            status.add_metric(base + [name], 1.0 if name == run.status else 0.0)
        yield status

        if run.started_at_s is not None:
            start = _gauge(d.RUN_START)
            start.add_metric(base, run.started_at_s)
            yield start
            end_s = run.finished_at_s if run.finished_at_s is not None else None
            if end_s is not None:
                duration = _gauge(d.RUN_DURATION)
                duration.add_metric(base, end_s - run.started_at_s)
                yield duration

        for metric, values in ((d.LAYER_MODULE_BUSY, run.module_busy_s), (d.LAYER_MODULE_EXPOSED, run.module_exposed_s)):
            if values:
                family = _gauge(metric)
                for (group, module), seconds in sorted(values.items()):
                    family.add_metric(base + [group, module], seconds)
                yield family
        if run.kernel_busy_s:
            family = _gauge(d.LAYER_KERNEL_BUSY)
            for (group, module, kernel), seconds in sorted(run.kernel_busy_s.items()):
                family.add_metric(base + [group, module, kernel], seconds)
            yield family

        yield from self._step_metrics(base)
        yield from self._load_metrics(base, labels)

        if run.accept_length is not None:
            accept = _gauge(d.MTP_ACCEPT_LENGTH)
            accept.add_metric(base, run.accept_length)
            yield accept

    def _step_metrics(self, base: list[str]):
        run = self.run
        if not run.stages:
            return
        families = {m.name: _gauge(m) for m in (d.STEP_TIME, d.LAYERS_TIME, d.RANK_STEP_MAX, d.RANK_STEP_MIN, d.RANK_STEP_SPREAD, d.RANK_STEP_SPREAD_RATIO)}
        for stage, times in sorted(run.stages.items()):
            families[d.STEP_TIME.name].add_metric(base + [stage], times.step_s)
            families[d.LAYERS_TIME.name].add_metric(base + [stage], times.layers_s)
            rank_s = list(times.rank_step_s.values())
            if rank_s:
                families[d.RANK_STEP_MAX.name].add_metric(base + [stage], max(rank_s))
                families[d.RANK_STEP_MIN.name].add_metric(base + [stage], min(rank_s))
                families[d.RANK_STEP_SPREAD.name].add_metric(base + [stage], max(rank_s) - min(rank_s))
                families[d.RANK_STEP_SPREAD_RATIO.name].add_metric(base + [stage], times.rank_spread_ratio)
        yield from (f for f in families.values() if f.samples)
        ranks = _gauge(d.RANKS)
        ranks.add_metric(base, float(len({r for t in run.stages.values() for r in t.rank_step_s})))
        yield ranks

        decode = run.stages.get(run.decode_stage)
        if decode and decode.mean_batch_size is not None and decode.step_s > 0:
            profile = _gauge(d.PROFILE_THROUGHPUT)
            accept = run.accept_length if run.accept_length is not None else 1.0
            profile.add_metric(base, decode.mean_batch_size * accept / decode.step_s)
            yield profile

    def _load_metrics(self, base: list[str], labels: dict[str, str]):
        load = self.run.load
        if load is None:
            return
        requests = CounterMetricFamily(d.REQUESTS.name, d.REQUESTS.help, labels=list(d.REQUESTS.labels))
        requests.add_metric(base + ["ok"], float(load.requests_ok))
        requests.add_metric(base + ["error"], float(load.requests_error))
        yield requests
        tokens = CounterMetricFamily(d.OUTPUT_TOKENS.name, d.OUTPUT_TOKENS.help, labels=list(d.OUTPUT_TOKENS.labels))
        tokens.add_metric(base, float(load.output_tokens))
        yield tokens
        yield _summary(d.TTFT, labels, load.ttft)
        yield _summary(d.TPOT, labels, load.tpot)
        yield _summary(d.ITL, labels, load.itl)
        if self.run.gpus and load.window_s > 0:
            throughput = _gauge(d.DECODE_THROUGHPUT)
            throughput.add_metric(base, load.output_tokens / load.window_s / self.run.gpus)
            yield throughput


def build_registry(run: RunData) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunResultsCollector(run))
    return registry
