"""A synthetic run directory with known numbers (not from a trace), for metrics and export tests.

Two ranks, two decode steps, three layers. Each layer runs the same kernels with fixed busy and
exposed times per rank, so every expected metric value can be computed by hand (see EXPECTED).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from analysis.attribution.rows import KernelRow, StepRow

SCENARIO = "synthetic"
RUN_ID = "synthetic-20250101T000000"
RANKS = ("TP0", "TP1")
STEPS = (0, 1)
LAYERS = (0, 1, 2)
# (group, module, kernel, busy_us by rank, exposed_us by rank)
KERNELS = (
    ("attention", "attn_core", "flash_mla", (40.0, 44.0), (40.0, 44.0)),
    ("attention", "o_proj", "gemm", (10.0, 10.0), (8.0, 6.0)),
    ("gate", "router", "topk", (5.0, 7.0), (5.0, 7.0)),
    ("moe", "experts", "grouped_gemm", (100.0, 120.0), (90.0, 100.0)),
    ("moe", "dispatch", "deepep_dispatch", (30.0, 30.0), (10.0, 20.0)),
)
STEP_US = {"TP0": (1000.0, 1100.0), "TP1": (1200.0, 1300.0)}
LAYERS_US = {"TP0": (900.0, 1000.0), "TP1": (1000.0, 1100.0)}
BATCH_SIZE = 8
GPUS = 2
ACCEPT_LENGTH = 1.5
# requests: (start_s, end_s, ttft_s, itl_s, output_tokens, error)
REQUESTS = (
    (100.0, 101.0, 0.1, [0.1] * 9, 10, None),
    (100.5, 102.5, 0.2, [0.2] * 9, 10, None),
    (101.0, 104.0, 0.3, [0.3] * 9, 10, None),
    (101.0, 101.2, None, [], 0, "connection reset"),
)


def expected() -> dict:
    busy_module = {}
    exposed_module = {}
    for group, module, _kernel, busy, exposed in KERNELS:
        busy_module[(group, module)] = busy_module.get((group, module), 0.0) + sum(busy) / len(RANKS) * 1e-6
        exposed_module[(group, module)] = exposed_module.get((group, module), 0.0) + sum(exposed) / len(RANKS) * 1e-6
    all_steps = [v for r in RANKS for v in STEP_US[r]]
    all_layers = [v for r in RANKS for v in LAYERS_US[r]]
    rank_means = [sum(STEP_US[r]) / len(STEPS) * 1e-6 for r in RANKS]
    step_s = sum(all_steps) / len(all_steps) * 1e-6
    return {
        "module_busy_s": busy_module,
        "module_exposed_s": exposed_module,
        "step_s": step_s,
        "layers_s": sum(all_layers) / len(all_layers) * 1e-6,
        "rank_max_s": max(rank_means),
        "rank_min_s": min(rank_means),
        "rank_spread_s": max(rank_means) - min(rank_means),
        # two ranks: the median is their mean
        "rank_spread_ratio": (max(rank_means) - min(rank_means)) / (sum(rank_means) / len(rank_means)),
        "ttft_p50_s": 0.2,
        "tpot_p50_s": (2.0 - 0.2) / 9,
        "itl_p50_s": 0.2,
        "requests_ok": 3,
        "requests_error": 1,
        "output_tokens": 30,
        # 30 tokens over the 100.0 .. 104.0 window on 2 GPUs
        "decode_throughput_per_gpu": 30 / 4.0 / GPUS,
        "profile_throughput_per_gpu": BATCH_SIZE * ACCEPT_LENGTH / step_s,
        "accept_length": ACCEPT_LENGTH,
    }


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def build(root: Path, run_id: str = RUN_ID, scenario: str = SCENARIO, kernel_table: str = "parquet") -> Path:
    """kernel_table: "parquet" (kernels_long.parquet, as analyses write it now) or "csv" (the
    kernels_long.csv of a run analysed before the Parquet table)."""
    run_dir = Path(root) / run_id
    (run_dir / "analysis").mkdir(parents=True)
    (run_dir / "load").mkdir()
    long_rows = []
    for rank_index, rank in enumerate(RANKS):
        for step in STEPS:
            t = step * 10_000.0
            for layer in LAYERS:
                for group, module, kernel, busy, exposed in KERNELS:
                    long_rows.append(KernelRow(
                        run=SCENARIO, rank=rank, step=step, stage="decode", section="layer", layer=layer,
                        micro_batch=0, group=group, module=module, kernel=kernel, kernel_name=f"{kernel}_kernel",
                        stream=7, start_us=t, busy_us=busy[rank_index], exposed_us=exposed[rank_index],
                        source="signature"))
                    t += busy[rank_index]
            # a post-layer kernel that must not count in per-layer figures
            long_rows.append(KernelRow(
                run=SCENARIO, rank=rank, step=step, stage="decode", section="post", layer=-1, micro_batch=0,
                group="other", module="lm_head", kernel="gemm", kernel_name="lm_head_gemm", stream=7,
                start_us=t, busy_us=50.0, exposed_us=50.0, source="signature"))
    long_fields = list(KernelRow.__struct_fields__)
    if kernel_table == "csv":
        _write_csv(run_dir / "analysis" / "kernels_long.csv", long_fields,
                   [{f: getattr(r, f) for f in long_fields} for r in long_rows])
    else:
        from analysis.pipeline import KERNEL_TABLE, write_kernel_table_file

        write_kernel_table_file(run_dir / "analysis" / KERNEL_TABLE, long_rows)

    step_rows = []
    for rank in RANKS:
        for step in STEPS:
            step_rows.append(StepRow(
                run=SCENARIO, rank=rank, step=step, stage="decode", start_us=step * 10_000.0,
                end_us=step * 10_000.0 + STEP_US[rank][step], step_us=STEP_US[rank][step],
                layers_us=LAYERS_US[rank][step], busy_us=0.0, exposed_us=0.0, kernels=16,
                layers_found=3, layers_expected=3, status="ok", segmented_by="gpu_annotation",
                batch_size=BATCH_SIZE))
    step_fields = list(StepRow.__struct_fields__)
    _write_csv(run_dir / "analysis" / "steps.csv", step_fields,
               [{f: getattr(r, f) for f in step_fields} for r in step_rows])

    detail_fields = ["column", "group", "module", "kernel", "layers", "value_us", "median_us", "p90_us", "exposed_us"]
    d4_rows = [{"column": run_id, "group": g, "module": m, "kernel": k, "layers": len(LAYERS),
                "value_us": sum(b) / len(RANKS), "median_us": sum(b) / len(RANKS), "p90_us": sum(b) / len(RANKS),
                "exposed_us": sum(e) / len(RANKS)} for g, m, k, b, e in KERNELS]
    _write_csv(run_dir / "analysis" / "d4_detail.csv", detail_fields, d4_rows)
    want = expected()
    rank_ms = {r: sum(STEP_US[r]) / len(STEPS) / 1000 for r in RANKS}
    median_ms = sorted(rank_ms.values())[len(RANKS) // 2 - 1:len(RANKS) // 2 + 1]
    median_ms = sum(median_ms) / len(median_ms)
    (run_dir / "analysis" / "analysis.json").write_text(json.dumps({
        "run": run_id, "signature": "synthetic", "model": None, "steps": len(step_rows),
        "d4": {"name": run_id, "stage": "decode", "stat": "mean", "rank_policy": "mean",
               "step_ms": want["step_s"] * 1e3, "layers_ms": want["layers_s"] * 1e3, "num_layers": len(LAYERS),
               "pre_ms": 0.0, "post_ms": 0.05, "rows": [], "accept_length": None,
               "ranks": list(RANKS), "rank_step_ms": rank_ms,
               "rank_spread_pct": 100 * (max(rank_ms.values()) - min(rank_ms.values())) / median_ms}}))

    with open(run_dir / "load" / "requests.jsonl", "w", encoding="utf-8") as handle:
        for i, (start, end, ttft, itl, tokens, error) in enumerate(REQUESTS):
            record = {"request_id": i, "input_len": 16, "output_len": tokens, "submitted_ts": start,
                      "finished_ts": end, "ttft_ms": None if ttft is None else ttft * 1e3,
                      "itl_ms": [v * 1e3 for v in itl], "completed": error is None}
            if error:
                record["error"] = error
            handle.write(json.dumps(record) + "\n")
    (run_dir / "load" / "summary.json").write_text(json.dumps({"accept_length": ACCEPT_LENGTH}))
    (run_dir / "scenario.yaml").write_text(
        f"name: {scenario}\ncluster: {{nodes: 1, gpus_per_node: {GPUS}}}\nmodel: {{name: none}}\n"
        "analysis: {signature: synthetic, rank_policy: mean}\n")
    seal(run_dir, {"scenario": scenario, "status": "ok", "engine": "synthetic",
                   "started_at": 1735689600.0, "finished_at": 1735689720.0, "versions": {"moe-harness": "0.1.0"}})
    return run_dir


def seal(run_dir: Path, manifest: dict | None = None) -> None:
    """The manifest a run writes last (every file's size and sha256): again after a test changed a
    file on purpose, so the change is the run's own and not a cut file."""
    from harness.run_dir import write_manifest

    if manifest is None:
        manifest = {k: v for k, v in json.loads((run_dir / "manifest.json").read_text()).items() if k != "files"}
    write_manifest(run_dir, manifest)
