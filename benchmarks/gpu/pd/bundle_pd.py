"""Copy a drive_pd.py run folder (as record_pd.sh brings it back) into a test-data folder.

Traces keep SGLang's names after `<prefix>-<label>-`: the prefill windows
(`prefill-stack` / `prefill-nostack`, no stage suffix: a plain window of EXTEND steps) and the decode
window; `<prefix>-<label>.run.json` keeps both launch plans, the status, every request's timings and
SGLang's meta_info fields that time it, the server logs' error lines, and the PD metrics SGLang exported
(per-stage request latency, KV-transfer histograms, TTFT) at each scrape, as text lines.

    python benchmarks/gpu/pd/bundle_pd.py --prefix sglang-0.5.17-dsv3-4l-fp8-h100x4 --out tests/data/sglang-real/pd RUN_DIR
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

_TRACE = re.compile(r"^(prefill-stack|prefill-nostack|decode)(?:-[a-z]+)?-[0-9.]+-(TP-\d+(?:-DP-\d+)?(?:-EP-\d+)?)"
                    r"((?:-[A-Z]+)?\.trace\.json\.gz)$")
_PD_METRICS = re.compile(r"^sglang:(per_stage_req_latency_seconds|kv_transfer_\w+_ms|time_to_first_token_seconds|queue_time_seconds)"
                         r"_(sum|count)\{")
_META = ("prompt_tokens", "completion_tokens", "queue_time", "forward_entry_time", "prefill_finished_time",
         "request_received_ts", "request_finished_ts", "e2e_latency")


def request_rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        row = {k: rec[k] for k in ("room", "sent", "input_len", "new_tokens")}
        for role in ("prefill", "decode"):
            if role not in rec:
                continue
            ans = rec[role]
            one = {"code": ans["code"], "start": ans["start"], "end": ans["end"]}
            try:
                meta = json.loads(ans["answer"]).get("meta_info", {})
                one.update({k: meta[k] for k in _META if k in meta})
            except (json.JSONDecodeError, AttributeError):
                one["answer_tail"] = ans["answer"][-300:]
            row[role] = one
        rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("run_dir")
    a = p.parse_args(argv)
    run, out = Path(a.run_dir), Path(a.out)
    label = run.name
    out.mkdir(parents=True, exist_ok=True)
    for trace in sorted((run / "traces").glob("*.trace.json.gz")):
        m = _TRACE.match(trace.name)
        if not m:
            raise SystemExit(f"bundle_pd.py: unexpected trace name {trace.name}")
        shutil.copyfile(trace, out / f"{a.prefix}-{label}-{m[1]}-{m[2]}{m[3]}")
    metrics = {}
    for f in sorted((run / "facts").glob("*-metrics.txt")):
        metrics[f.name.removesuffix("-metrics.txt")] = [l for l in f.read_text().splitlines() if _PD_METRICS.match(l)]
    errors = {}
    for log in sorted(run.glob("server-*.log")):
        errors[log.stem] = [l[:300] for l in log.read_text(errors="replace").splitlines()
                            if "Error" in l or "Traceback" in l][:20]
    doc = {"status": json.loads((run / "status.json").read_text()),
           "plans": {f.stem: f.read_text() for f in sorted(run.glob("plan-*.sh"))},
           "requests": request_rows(run / "requests.jsonl") if (run / "requests.jsonl").is_file() else [],
           "server_log_errors": errors, "pd_metrics": metrics}
    (out / f"{a.prefix}-{label}.run.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{label}: {len(list(out.glob(f'{a.prefix}-{label}-*.trace.json.gz')))} traces")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
