"""Run metrics through a real Pushgateway and a real Prometheus (Debian packages, loopback)."""
from __future__ import annotations

import csv
import json
import logging
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

import prom_servers
import synthetic_run
from prom_fixture import prom_stack  # noqa: F401  (session fixture)
from promql_names import metric_names, substitute_grafana

from harness.metrics import definitions as d
from harness.metrics.live import LiveProgressExporter
from harness.exports.tables import export_run
from harness.metrics.push import push_run

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "cluster/monitoring/grafana/dashboards/moe-harness.json"
SGLANG_NAMES = REPO / "cluster/monitoring/sglang_metrics.yaml"

pytestmark = pytest.mark.timeout(120)


def _dashboard_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"]
        inner = query[len("label_values("):-1].rsplit(",", 1)[0] if query.startswith("label_values(") else query
        exprs.append((f"variable {variable['name']}", inner))
    return exprs


def _sglang_names() -> set[str]:
    names = set()
    for metric in yaml.safe_load(SGLANG_NAMES.read_text())["metrics"]:
        name = metric["name"]
        names.add(name)
        if metric["type"] == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def _module_values_from_d4_detail_csv(run_dir: Path) -> dict[tuple[str, str], float]:
    values: dict[tuple[str, str], float] = {}
    with open(run_dir / "analysis" / "d4_detail.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            key = (row["group"], row["module"])
            values[key] = values.get(key, 0.0) + float(row["value_us"]) * 1e-6
    return values


def _assert_prometheus_holds_the_csv_modules(prom_stack, run_dir: Path) -> dict[tuple[str, str], float]:
    """Every module's busy time in Prometheus (after a push) equals the run's d4_detail.csv."""
    expected = _module_values_from_d4_detail_csv(run_dir)
    assert expected and all(v >= 0 for v in expected.values())
    series = prom_servers.wait_for_series(
        prom_stack["prometheus"], f'moe_harness_layer_module_busy_seconds{{run_id="{run_dir.name}"}}', len(expected))
    got = {(s["metric"]["group"], s["metric"]["module"]): float(s["value"][1]) for s in series}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        # d4_detail.csv holds microseconds to 3 decimals: a module's sum may differ by its rounding.
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-8), key
    return expected


def test_pushed_module_values_equal_the_csv(prom_stack, tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    result = push_run(run_dir, prom_stack["pushgateway"])
    assert result.ok, result.message
    expected = _module_values_from_d4_detail_csv(run_dir)
    series = prom_servers.wait_for_series(
        prom_stack["prometheus"],
        f'moe_harness_layer_module_busy_seconds{{run_id="{synthetic_run.RUN_ID}"}}', len(expected))
    got = {(s["metric"]["group"], s["metric"]["module"]): float(s["value"][1]) for s in series}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-9), key
    # grouping key and labels survive the scrape (honor_labels)
    assert {s["metric"]["job"] for s in series} == {"moe_harness"}
    assert {s["metric"]["scenario"] for s in series} == {synthetic_run.SCENARIO}

    want = synthetic_run.expected()
    checks = {
        f'moe_harness_layer_module_exposed_seconds{{run_id="{synthetic_run.RUN_ID}",module="dispatch"}}':
            want["module_exposed_s"][("moe", "dispatch")],
        f'moe_harness_step_seconds{{run_id="{synthetic_run.RUN_ID}",stage="decode"}}': want["step_s"],
        f'moe_harness_rank_step_spread_seconds{{run_id="{synthetic_run.RUN_ID}"}}': want["rank_spread_s"],
        f'moe_harness_request_ttft_seconds{{run_id="{synthetic_run.RUN_ID}",quantile="0.5"}}': want["ttft_p50_s"],
        f'moe_harness_request_tpot_seconds{{run_id="{synthetic_run.RUN_ID}",quantile="0.5"}}': want["tpot_p50_s"],
        f'moe_harness_mtp_accept_length{{run_id="{synthetic_run.RUN_ID}"}}': want["accept_length"],
        f'moe_harness_run_status{{run_id="{synthetic_run.RUN_ID}",status="ok"}}': 1.0,
    }
    for expr, value in checks.items():
        (sample,) = prom_servers.wait_for_series(prom_stack["prometheus"], expr, 1)
        assert float(sample["value"][1]) == pytest.approx(value, rel=1e-9), expr
    assert (run_dir / "metrics.prom").is_file()


def test_delete_old_groups_removes_only_same_scenario(prom_stack, tmp_path):
    gateway = prom_stack["pushgateway"]
    runs = {}
    for scenario, run_id in (("keepme", "keepme-1"), ("sweep", "sweep-1"), ("sweep", "sweep-2"), ("sweep", "sweep-3")):
        runs[run_id] = synthetic_run.build(tmp_path, run_id=run_id, scenario=scenario)
    for run_id in ("keepme-1", "sweep-1", "sweep-2"):
        assert push_run(runs[run_id], gateway).ok
    result = push_run(runs["sweep-3"], gateway, delete_old_groups=True)
    assert result.ok, result.message
    assert sorted(result.deleted_groups) == ["sweep-1", "sweep-2"]
    groups = prom_servers.http_get_json(f"{gateway}/api/v1/metrics")["data"]
    run_ids = {g["labels"].get("run_id") for g in groups}
    assert {"keepme-1", "sweep-3"} <= run_ids
    assert not run_ids & {"sweep-1", "sweep-2"}


def test_pushgateway_down_warns_and_keeps_files(tmp_path, caplog):
    run_dir = synthetic_run.build(tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    closed_port = prom_servers.free_port()  # nothing listens here
    with caplog.at_level(logging.WARNING, logger="harness.metrics.push"):
        result = push_run(run_dir, f"127.0.0.1:{closed_port}", deadline_s=2.0)
    assert result is not None and not result.ok
    assert str(closed_port) in result.message
    assert any("not pushed" in r.getMessage() for r in caplog.records)
    for path, content in before.items():
        assert path.read_bytes() == content, f"{path} changed"
    assert "moe_harness_layer_module_busy_seconds" in (run_dir / "metrics.prom").read_text()


def test_dashboard_queries_parse_in_prometheus_and_promtool(prom_stack, tmp_path):
    exprs = _dashboard_exprs()
    assert len(exprs) >= 20
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": substitute_grafana(expr)} for i, (_title, expr) in enumerate(exprs)]}]}
    rules_path = tmp_path / "dashboard_rules.yml"
    rules_path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run([prom_servers.PROMTOOL_BIN, "check", "rules", str(rules_path)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for title, expr in exprs:
        answer = prom_servers.query(prom_stack["prometheus"], substitute_grafana(expr))
        assert answer["status"] == "success", f"{title}: {expr}: {answer.get('error')}"


def test_dashboard_uses_only_exported_metric_names():
    allowed = d.all_exposed_names() | _sglang_names()
    used = set()
    for title, expr in _dashboard_exprs():
        names = metric_names(expr)
        assert names, f"{title}: no metric name found in {expr!r}"
        unknown = names - allowed
        assert not unknown, f"{title}: {sorted(unknown)} is neither a harness nor a listed SGLang metric"
        used |= names
    # the dashboard covers the results the issue asks for
    for metric in (d.LAYER_MODULE_BUSY, d.LAYER_MODULE_EXPOSED, d.STEP_TIME, d.DECODE_THROUGHPUT, d.TTFT, d.ITL,
                   d.MTP_ACCEPT_LENGTH, d.RANK_STEP_SPREAD, d.RUN_STATUS, d.PROGRESS_RUNNING):
        assert metric.name in used, metric.name
    assert any(name.startswith("sglang:") for name in used)


def test_harness_panels_return_data_after_a_push(prom_stack, tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    assert push_run(run_dir, prom_stack["pushgateway"]).ok
    prom_servers.wait_for_series(prom_stack["prometheus"], f'moe_harness_run_info{{run_id="{synthetic_run.RUN_ID}"}}', 1)
    result_names = {n for m in d.RESULT_METRICS for n in d.exposed_names(m)}
    for title, expr in _dashboard_exprs():
        if metric_names(expr) <= result_names:
            series = prom_servers.wait_for_series(prom_stack["prometheus"], substitute_grafana(expr), 1)
            assert series, f"{title}: {expr}"


def test_live_exporter_is_scraped_by_prometheus(prom_stack):
    with LiveProgressExporter("livetest", "livetest-1") as live:
        live.update(phase="steady", completed_delta=5, running=3)
        live.update(completed_delta=2, running=4)
        prom_stack["file_sd"].write_text(json.dumps([{"targets": [f"127.0.0.1:{live.port}"]}]))
        prom = prom_stack["prometheus"]
        (done,) = prom_servers.wait_for_series(prom, 'moe_harness_progress_requests_completed_total{run_id="livetest-1"}', 1)
        (running,) = prom_servers.wait_for_series(prom, 'moe_harness_progress_running_requests{run_id="livetest-1"}', 1)
        (phase,) = prom_servers.wait_for_series(prom, 'moe_harness_progress_phase{run_id="livetest-1"} == 1', 1)
        assert float(done["value"][1]) == 7.0
        assert float(running["value"][1]) == 4.0
        assert phase["metric"]["phase"] == "steady"
        port = live.port
    prom_stack["file_sd"].write_text("[]")
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_the_parse_checks_catch_a_broken_query(prom_stack, tmp_path):
    """Guards the dashboard checks above: a malformed query must fail both of them."""
    broken = 'sum by (group (moe_harness_step_seconds{run_id=~".*"})'
    answer = prom_servers.query(prom_stack["prometheus"], broken)
    assert answer["status"] == "error" and answer["errorType"] == "bad_data"
    rules_path = tmp_path / "broken_rules.yml"
    rules_path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "x:y", "expr": broken}]}]}))
    checked = subprocess.run([prom_servers.PROMTOOL_BIN, "check", "rules", str(rules_path)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode != 0


# (trace, signature): a real SGLang MoE decode trace, and the CPU demo's trace of the embedded engine
REAL_TRACES = [
    ("real:nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz", "generic"),
    (str(REPO / "tests/data/embedded-cpu-demo-TP-0-DECODE.trace.json.gz"), "embedded-hf-deepseek-v3-cpu"),
]


@pytest.mark.parametrize("trace,signature", REAL_TRACES, ids=["sglang-qwen3-moe", "embedded-demo"])
def test_real_trace_analysis_pushed_equals_its_csv(prom_stack, tmp_path, trace, signature):
    """A run directory from analysis.api on a real trace, through the real servers."""
    from analysis import api
    from conftest import real_trace

    if trace.startswith("real:"):  # a public real trace (tests/real_traces.py)
        trace = real_trace(trace[len("real:"):])

    run_dir = tmp_path / f"realtrace-{signature}-20250101-000000"
    result = api.analyze([str(trace)], signature=signature, options=api.AnalysisOptions(run=run_dir.name))
    api.write_outputs(result, run_dir / "analysis")
    from harness.run_dir import write_manifest

    write_manifest(run_dir, {"scenario": "realtrace", "status": "ok", "engine": "sglang", "started_at": 1735689600.0})
    assert push_run(run_dir, prom_stack["pushgateway"]).ok
    _assert_prometheus_holds_the_csv_modules(prom_stack, run_dir)
    (step,) = prom_servers.wait_for_series(prom_stack["prometheus"], f'moe_harness_step_seconds{{run_id="{run_dir.name}"}}', 1)
    assert float(step["value"][1]) == pytest.approx(result.d4.step_ms * 1e-3, rel=1e-9)
    exported = export_run(run_dir, "parquet")
    assert {p.name for p in exported} == {"kernels_long.parquet", "steps.parquet", "d4.parquet"}


@pytest.mark.timeout(300)
def test_demo_run_pushes_its_d4_to_a_real_pushgateway(prom_stack, tmp_path):
    """The main job with a Pushgateway configured: Prometheus then holds the run's own CSV values."""
    import sys

    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, str(REPO / "harness" / "run.py"), "--scenario", "demo", "--runs-dir", str(runs),
         "--pushgateway", prom_stack["pushgateway"], "--metrics-port", "0", "--quiet"],
        capture_output=True, text=True, timeout=280, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = list(runs.iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert manifest["metrics"]["pushed"] is True and (run_dir / "metrics.prom").stat().st_size > 0
    assert "metrics.prom" in {f["path"] for f in manifest["files"]}
    expected = _assert_prometheus_holds_the_csv_modules(prom_stack, run_dir)
    assert {("attention", "attn_core"), ("moe", "up_gate_gemm"), ("gate", "router")} <= set(expected)
    (status,) = prom_servers.wait_for_series(
        prom_stack["prometheus"], f'moe_harness_run_status{{run_id="{run_dir.name}", status="ok"}}', 1)
    assert float(status["value"][1]) == 1.0


def test_run_progress_feeds_the_live_exporter():
    """The run's progress hooks move the live exporter's phase and request counts."""
    from harness.run import Progress, _report_counts, _report_phase

    live = LiveProgressExporter("demo", "live-hooks-1", port=0)
    progress = Progress(quiet=True)
    progress.listeners.append(lambda name: _report_phase(live, name))
    progress.count_listeners.append(lambda done, running: _report_counts(live, done, running))
    with progress.phase("warm up to steady state"):
        progress.counts(running=4)
    progress.counts(completed_delta=4, running=0)
    from prometheus_client import generate_latest

    text = generate_latest(live.registry).decode()
    assert 'moe_harness_progress_requests_completed_total{run_id="live-hooks-1",scenario="demo"} 4.0' in text
    assert 'moe_harness_progress_running_requests{run_id="live-hooks-1",scenario="demo"} 0.0' in text
    assert 'phase="warmup"' in text


def test_credentials_in_the_pushgateway_url_are_sent_never_shown(prom_stack, tmp_path, capsys):
    """user:password in the URL: urllib took them for part of the host name (no push), and the URL was
    printed and stored with the password."""
    from harness.cli import main

    password = "pw-in-pushgateway-url-77"
    run_dir = synthetic_run.build(tmp_path, run_id="with-credentials-1")
    host = prom_stack["pushgateway"].split("://", 1)[1]
    assert main(["metrics", str(run_dir), "--quiet", "--pushgateway", f"http://pusher:{password}@{host}"]) == 0
    err = capsys.readouterr().err
    assert "pushed run with-credentials-1" in err and password not in err
    groups = prom_servers.http_get_json(f"{prom_stack['pushgateway']}/api/v1/metrics")["data"]
    assert "with-credentials-1" in {g["labels"].get("run_id") for g in groups}
