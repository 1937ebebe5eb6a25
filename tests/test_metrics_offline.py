"""Run metrics built from a run directory's files, without servers."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import synthetic_run
from harness.metrics import definitions as d
from harness.metrics.errors import RunDataError
from harness.metrics.live import LiveProgressExporter
from harness.metrics.load_records import quantile
from harness.metrics.results import build_registry
from harness.metrics.run_data import read_run

REPO = Path(__file__).resolve().parent.parent


def _samples(run_dir: Path) -> dict[tuple, float]:
    text = generate_latest(build_registry(read_run(run_dir))).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("scenario", "run_id")))
            out[(s.name, labels)] = s.value
    return out


def test_metrics_equal_the_hand_computed_synthetic_values(tmp_path):
    samples = _samples(synthetic_run.build(tmp_path))
    want = synthetic_run.expected()
    for (group, module), value in want["module_busy_s"].items():
        assert samples[(d.LAYER_MODULE_BUSY.name, (("group", group), ("module", module)))] == pytest.approx(value)
    for (group, module), value in want["module_exposed_s"].items():
        assert samples[(d.LAYER_MODULE_EXPOSED.name, (("group", group), ("module", module)))] == pytest.approx(value)
    decode = (("stage", "decode"),)
    assert samples[(d.STEP_TIME.name, decode)] == pytest.approx(want["step_s"])
    assert samples[(d.LAYERS_TIME.name, decode)] == pytest.approx(want["layers_s"])
    assert samples[(d.RANK_STEP_MAX.name, decode)] == pytest.approx(want["rank_max_s"])
    assert samples[(d.RANK_STEP_MIN.name, decode)] == pytest.approx(want["rank_min_s"])
    assert samples[(d.RANK_STEP_SPREAD.name, decode)] == pytest.approx(want["rank_spread_s"])
    assert samples[(d.RANK_STEP_SPREAD_RATIO.name, decode)] == pytest.approx(want["rank_spread_ratio"])
    assert samples[(d.TTFT.name, (("quantile", "0.5"),))] == pytest.approx(want["ttft_p50_s"])
    assert samples[(d.TPOT.name, (("quantile", "0.5"),))] == pytest.approx(want["tpot_p50_s"])
    assert samples[(d.ITL.name, (("quantile", "0.5"),))] == pytest.approx(want["itl_p50_s"])
    assert samples[(d.TTFT.name + "_count", ())] == want["requests_ok"]
    assert samples[(d.REQUESTS.name, (("outcome", "ok"),))] == want["requests_ok"]
    assert samples[(d.REQUESTS.name, (("outcome", "error"),))] == want["requests_error"]
    assert samples[(d.OUTPUT_TOKENS.name, ())] == want["output_tokens"]
    assert samples[(d.DECODE_THROUGHPUT.name, ())] == pytest.approx(want["decode_throughput_per_gpu"])
    assert samples[(d.PROFILE_THROUGHPUT.name, ())] == pytest.approx(want["profile_throughput_per_gpu"])
    assert samples[(d.MTP_ACCEPT_LENGTH.name, ())] == want["accept_length"]
    assert samples[(d.RUN_STATUS.name, (("status", "ok"),))] == 1.0
    assert samples[(d.RUN_STATUS.name, (("status", "failed"),))] == 0.0
    assert samples[(d.RUN_DURATION.name, ())] == 120.0


def test_every_exported_name_is_defined_and_labels_are_bounded(tmp_path):
    samples = _samples(synthetic_run.build(tmp_path))
    defined = d.all_exposed_names()
    allowed_labels = {"scenario", "run_id", "group", "module", "kernel", "stage", "quantile", "status", "outcome",
                      "phase", "engine", "engine_version", "model", "signature", "harness_version", "gpus"}
    for name, labels in samples:
        assert name in defined, name
        assert {k for k, _ in labels} <= allowed_labels, (name, labels)
    for metric in d.ALL:
        assert metric.name.startswith(d.PREFIX)
        assert re.fullmatch(r"[a-z_]+", metric.name), metric.name
        assert (metric.kind == d.COUNTER) == metric.name.endswith("_total"), metric.name
        assert (metric.kind == d.INFO) == metric.name.endswith("_info"), metric.name
        assert "rank" not in metric.labels and "request_id" not in metric.labels


def test_quantile_matches_numpy_linear():
    rng = np.random.default_rng(7)
    values = sorted(rng.exponential(0.05, size=101).tolist())
    for q in d.LATENCY_QUANTILES:
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))


def test_malformed_load_record_names_file_and_line(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    records = run_dir / "load" / "requests.jsonl"
    lines = records.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["ttft_ms"] = "fast"
    lines[1] = json.dumps(bad)
    records.write_text("\n".join(lines) + "\n")
    synthetic_run.seal(run_dir)  # written so by the run (a record cut or edited later is another error)
    with pytest.raises(RunDataError, match=r"requests\.jsonl:2: field 'ttft_ms' must be a number"):
        read_run(run_dir)


def test_missing_d4_column_is_a_clear_error(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    d4 = run_dir / "analysis" / "d4_detail.csv"
    d4.write_text(d4.read_text().replace("exposed_us", "exp"))
    synthetic_run.seal(run_dir)
    with pytest.raises(RunDataError, match=r"d4_detail\.csv: missing column\(s\) exposed_us"):
        read_run(run_dir)


def test_run_without_analysis_exports_only_what_it_has(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    for name in ("d4_detail.csv", "analysis.json", "kernels_long.parquet", "steps.csv"):
        (run_dir / "analysis" / name).unlink()
    data = read_run(run_dir, status="failed")
    samples = _samples(run_dir)
    assert not any(name == d.LAYER_MODULE_BUSY.name for name, _ in samples)
    assert not any(name == d.STEP_TIME.name for name, _ in samples)
    assert data.status == "failed" and data.problems


def test_live_exporter_serves_progress_and_stops(tmp_path):
    live = LiveProgressExporter("unit", "unit-1").start()
    try:
        live.update(phase="profiling", completed_delta=3, running=2)
        with urllib.request.urlopen(live.url, timeout=5) as response:
            text = response.read().decode()
        values = {(s.name, tuple(sorted(s.labels.items()))): s.value
                  for f in text_string_to_metric_families(text) for s in f.samples}
        base = (("run_id", "unit-1"), ("scenario", "unit"))
        assert values[(d.PROGRESS_REQUESTS.name, base)] == 3
        assert values[(d.PROGRESS_RUNNING.name, base)] == 2
        assert values[(d.PROGRESS_PHASE.name, tuple(sorted(base + (("phase", "profiling"),))))] == 1
        assert values[(d.PROGRESS_PHASE.name, tuple(sorted(base + (("phase", "warmup"),))))] == 0
        with pytest.raises(ValueError, match="unknown phase"):
            live.update(phase="teatime")
        with pytest.raises(ValueError, match="completed_delta"):
            live.update(completed_delta=-1)
    finally:
        url = live.url
        live.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
    live.stop()  # a second stop is harmless


def test_docs_list_every_metric():
    text = (REPO / "docs/metrics.md").read_text()
    documented = set(re.findall(r"`(moe_harness_[a-z_]+)`", text))
    assert {m.name for m in d.ALL} <= documented
    assert documented <= d.all_exposed_names(), documented - d.all_exposed_names()


def test_dashboard_json_is_the_generator_output():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_dashboard", REPO / "cluster/monitoring/make_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.OUT.read_text() == module.render(), "run python cluster/monitoring/make_dashboard.py"


def test_load_client_records_give_the_same_quantiles_as_the_load_summary(tmp_path):
    """Records in the HTTP load client's format: our summaries agree with harness/load/summary.py."""
    from harness.load.summary import summarize as load_summary
    from harness.metrics.load_records import load_stats, read_records

    rng = np.random.default_rng(3)
    records = []
    for i in range(40):
        itl = rng.uniform(5, 15, size=9).tolist()
        ttft = float(rng.uniform(50, 200))
        e2e = ttft + sum(itl)
        records.append({"rid": i, "ok": i % 10 != 0, "error": None if i % 10 else "HTTP 500", "start_s": i * 0.1,
                        "ttft_ms": ttft, "itl_ms": itl, "tpot_ms": (e2e - ttft) / 9, "e2e_ms": e2e,
                        "output_tokens": 10})
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    stats = load_stats(read_records(path), d.LATENCY_QUANTILES)
    reference = load_summary(records, num_gpus=1)
    assert stats.requests_ok == reference["completed"] and stats.requests_error == reference["failed"]
    assert stats.output_tokens == reference["output_tokens"]
    assert stats.window_s == pytest.approx(reference["duration_s"])
    for ours, theirs in ((stats.ttft, "ttft_ms"), (stats.tpot, "tpot_ms"), (stats.itl, "itl_ms")):
        assert ours.quantiles[0.5] * 1e3 == pytest.approx(reference[theirs]["p50"])
        assert ours.quantiles[0.99] * 1e3 == pytest.approx(reference[theirs]["p99"])
