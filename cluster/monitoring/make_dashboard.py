"""Writes grafana/dashboards/moe-harness.json (the provisioned Grafana dashboard).

The JSON is generated so that panels stay uniform; edit the PANELS table here, run
`python cluster/monitoring/make_dashboard.py`, and commit both (a test checks they agree).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).parent / "grafana" / "dashboards" / "moe-harness.json"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
RUN = 'scenario=~"$scenario", run_id=~"$run_id"'
SG = 'model_name=~"$model_name"'

# (row title, [(panel title, kind, unit, stacked, [(expr, legend)])])
PANELS = [
    ("D4 layer breakdown", [
        ("Per-layer busy time by module (stacked by group / module)", "bars", "s", True, [
            (f"avg by (scenario, group, module) (moe_harness_layer_module_busy_seconds{{{RUN}}})",
             "{{scenario}} {{group}}/{{module}}")]),
        ("Per-layer exposed time by module (stacked by group / module)", "bars", "s", True, [
            (f"avg by (scenario, group, module) (moe_harness_layer_module_exposed_seconds{{{RUN}}})",
             "{{scenario}} {{group}}/{{module}}")]),
        ("Per-layer time by group", "bars", "s", True, [
            (f"sum by (scenario, group) (avg by (scenario, group, module) (moe_harness_layer_module_busy_seconds{{{RUN}}}))",
             "{{scenario}} {{group}}")]),
        ("Kernels (per-layer busy time)", "table", "s", False, [
            (f"moe_harness_layer_kernel_busy_seconds{{{RUN}}}", "")]),
    ]),
    ("Steps and throughput", [
        ("Step and all-layers time", "timeseries", "s", False, [
            (f"moe_harness_step_seconds{{{RUN}}}", "step {{run_id}} {{stage}}"),
            (f"moe_harness_all_layers_seconds{{{RUN}}}", "layers {{run_id}} {{stage}}")]),
        ("Decode throughput per GPU", "timeseries", "none", False, [
            (f"moe_harness_decode_throughput_per_gpu_tokens_per_second{{{RUN}}}", "measured {{run_id}}"),
            (f"moe_harness_profile_decode_throughput_per_gpu_tokens_per_second{{{RUN}}}", "profile {{run_id}}")]),
        ("Rank step-time spread", "timeseries", "s", False, [
            (f"moe_harness_rank_step_spread_seconds{{{RUN}}}", "spread {{run_id}} {{stage}}"),
            (f"moe_harness_rank_step_max_seconds{{{RUN}}}", "slowest {{run_id}} {{stage}}"),
            (f"moe_harness_rank_step_min_seconds{{{RUN}}}", "fastest {{run_id}} {{stage}}")]),
        ("MTP accept length", "timeseries", "none", False, [
            (f"moe_harness_mtp_accept_length{{{RUN}}}", "{{run_id}}")]),
    ]),
    ("Request latency (load records)", [
        ("TTFT percentiles", "timeseries", "s", False, [
            (f"moe_harness_request_ttft_seconds{{{RUN}}}", "p{{quantile}} {{run_id}}")]),
        ("ITL percentiles", "timeseries", "s", False, [
            (f"moe_harness_request_itl_seconds{{{RUN}}}", "p{{quantile}} {{run_id}}")]),
        ("TPOT percentiles", "timeseries", "s", False, [
            (f"moe_harness_request_tpot_seconds{{{RUN}}}", "p{{quantile}} {{run_id}}"),
            (f"moe_harness_request_tpot_seconds_sum{{{RUN}}} / moe_harness_request_tpot_seconds_count{{{RUN}}}",
             "mean {{run_id}}")]),
    ]),
    ("Runs and live progress", [
        ("Run status", "table", "none", False, [
            (f"moe_harness_run_status{{{RUN}}} == 1", ""),
            (f"moe_harness_run_info{{{RUN}}}", "")]),
        ("Running batch (live)", "timeseries", "none", False, [
            (f"moe_harness_progress_running_requests{{{RUN}}}", "{{run_id}}")]),
        ("Completed requests per second (live)", "timeseries", "reqps", False, [
            (f"rate(moe_harness_progress_requests_completed_total{{{RUN}}}[$__rate_interval])", "{{run_id}}")]),
        ("Phase (live)", "timeseries", "none", False, [
            (f"moe_harness_progress_phase{{{RUN}}} == 1", "{{run_id}} {{phase}}")]),
    ]),
    ("SGLang servers", [
        ("Running and queued requests", "timeseries", "none", False, [
            (f"sglang:num_running_reqs{{{SG}}}", "running {{instance}}"),
            (f"sglang:num_queue_reqs{{{SG}}}", "queued {{instance}}")]),
        ("Generation throughput", "timeseries", "none", False, [
            (f"sglang:gen_throughput{{{SG}}}", "{{instance}}")]),
        ("TTFT p50 / p99", "timeseries", "s", False, [
            (f"histogram_quantile(0.5, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{{{SG}}}[$__rate_interval])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{{{SG}}}[$__rate_interval])))", "p99")]),
        ("Inter-token latency p50 / p99", "timeseries", "s", False, [
            (f"histogram_quantile(0.5, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket{{{SG}}}[$__rate_interval])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket{{{SG}}}[$__rate_interval])))", "p99")]),
        ("KV cache token usage and prefix cache hit rate", "timeseries", "percentunit", False, [
            (f"sglang:token_usage{{{SG}}}", "token usage {{instance}}"),
            (f"sglang:cache_hit_rate{{{SG}}}", "cache hit {{instance}}")]),
        ("Speculative accept length", "timeseries", "none", False, [
            (f"sglang:spec_accept_length{{{SG}}}", "{{instance}}")]),
    ]),
]


def _variable(name: str, query: str, label: str) -> dict:
    return {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"var_{name}"}, "definition": query,
        "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def _panel(panel_id: int, title: str, kind: str, unit: str, stacked: bool, targets: list, x: int, y: int) -> dict:
    panel = {
        "id": panel_id, "title": title, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend,
             "instant": kind == "table", "range": kind != "table"}
            for i, (expr, legend) in enumerate(targets)
        ],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }
    if kind == "table":
        panel["type"] = "table"
        panel["transformations"] = [{"id": "merge", "options": {}}]
    else:
        panel["type"] = "timeseries"
        custom = {"drawStyle": "bars" if kind == "bars" else "line", "fillOpacity": 80 if kind == "bars" else 10}
        if stacked:
            custom["stacking"] = {"mode": "normal", "group": "A"}
        panel["fieldConfig"]["defaults"]["custom"] = custom
        panel["options"] = {"legend": {"displayMode": "table", "placement": "right", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
    return panel


def build() -> dict:
    panels = []
    next_id, y = 1, 0
    for row_title, row_panels in PANELS:
        panels.append({"id": next_id, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        next_id, y = next_id + 1, y + 1
        for i, (title, kind, unit, stacked, targets) in enumerate(row_panels):
            panels.append(_panel(next_id, title, kind, unit, stacked, targets, x=12 * (i % 2), y=y + 8 * (i // 2)))
            next_id += 1
        y += 8 * ((len(row_panels) + 1) // 2)
    return {
        "uid": "moe-harness", "title": "MoE harness: D4 layers, runs and SGLang", "schemaVersion": 39,
        "version": 1, "editable": True, "tags": ["moe-harness", "sglang"], "timezone": "browser",
        "time": {"from": "now-24h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [
            _variable("scenario", "label_values(moe_harness_run_info, scenario)", "scenario"),
            _variable("run_id", 'label_values(moe_harness_run_info{scenario=~"$scenario"}, run_id)', "run"),
            _variable("model_name", "label_values(sglang:num_running_reqs, model_name)", "SGLang model"),
        ]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {OUT}\n")
