"""The benchmark's synthetic trace generator: N shifted copies of a real decode step, valid JSON,
ids that never collide across copies, and the loader sees exactly N times the step's content."""
from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

from analysis.ingest.trace_loader import load_trace
from benchmarks.make_large_trace import write_large_trace
from benchmarks.real_traces import QWEN3_DECODE
from conftest import real_trace


def test_copies_are_shifted_and_loadable(tmp_path: Path) -> None:
    DEFAULT_SOURCE = Path(real_trace(QWEN3_DECODE))  # noqa: N806 - the benchmark's default source
    json_path, gz_path = write_large_trace(DEFAULT_SOURCE, tmp_path, size_mb=3.0, write_gzip=True)
    source = json.loads(gzip.decompress(DEFAULT_SOURCE.read_bytes()))["traceEvents"]
    made = json.loads(json_path.read_bytes())
    assert gzip.decompress(gz_path.read_bytes()) == json_path.read_bytes()

    once = [e for e in source if e.get("ph") in ("M", "i") or e.get("cat") == "Trace"]
    copies = (len(made["traceEvents"]) - len(once)) // (len(source) - len(once))
    assert copies >= 2 and len(made["traceEvents"]) == len(once) + copies * (len(source) - len(once))
    assert f"synthetic-{copies}steps-" in json_path.name

    source_cats = collections.Counter(e.get("cat") for e in source if e not in once)
    made_cats = collections.Counter(e.get("cat") for e in made["traceEvents"])
    for cat, count in source_cats.items():
        assert made_cats[cat] == copies * count + sum(1 for e in once if e.get("cat") == cat)

    kernels = [e for e in made["traceEvents"] if e.get("cat") == "kernel"]
    per_copy = len(kernels) // copies
    first, second = kernels[:per_copy], kernels[per_copy : 2 * per_copy]
    period = second[0]["ts"] - first[0]["ts"]
    assert period > 0
    assert all(abs((b["ts"] - a["ts"]) - period) < 1e-3 for a, b in zip(first, second))
    assert not {a["args"]["correlation"] for a in first} & {b["args"]["correlation"] for b in second}

    step = load_trace(str(DEFAULT_SOURCE))
    big = load_trace(str(json_path))
    assert len(big.kernels) == copies * len(step.kernels)
    assert len(big.gpu_annotations) == copies * len(step.gpu_annotations)
    assert collections.Counter(k.launcher for k in big.kernels) == collections.Counter(
        {name: copies * n for name, n in collections.Counter(k.launcher for k in step.kernels).items()}
    )
    assert big.device_name == step.device_name


def test_varied_steps_never_repeat_a_chain_and_keep_the_analysis_whole(tmp_path: Path) -> None:
    """--steps vary: each step its own batch size (labels) and GEMM names, so no two steps share a
    chain, while every kernel keeps its class: the analysis finds the same layers and roles."""
    from analysis.pipeline import AnalysisOptions, analyze

    source = Path(real_trace(QWEN3_DECODE))
    (tmp_path / "repeat").mkdir()
    (tmp_path / "vary").mkdir()
    plain = write_large_trace(source, tmp_path / "repeat", size_mb=4.0, write_gzip=False)[0]
    varied = write_large_trace(source, tmp_path / "vary", size_mb=4.0, write_gzip=False, steps="vary")[0]
    assert "-varied-TP-0-" in varied.name
    trace = load_trace(str(varied))
    assert len(trace.kernels) == len(load_trace(str(plain)).kernels)
    same, other = (analyze([str(p)], options=AnalysisOptions(jobs=1)) for p in (plain, varied))
    chains = {}
    for row in other.kernel_rows:
        chains.setdefault(row.step, []).append(row.kernel_name)
    assert len({tuple(names) for names in chains.values()}) == len(chains) > 2
    assert [s.batch_size for s in other.step_rows] == list(range(1, len(other.step_rows) + 1))
    assert [(r.step, r.layer, r.group, r.module, r.role) for r in other.kernel_rows] == \
        [(r.step, r.layer, r.group, r.module, r.role) for r in same.kernel_rows]
    assert any(r.kernel_name.endswith("_b3") and r.kernel_name.startswith("nvjet_") for r in other.kernel_rows)
