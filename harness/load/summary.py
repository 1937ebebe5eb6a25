"""Summary of load records: percentiles per metric and output throughput per GPU."""
from __future__ import annotations

import numpy as np


def load_records(path: str) -> list[dict]:
    """Each line of a load/requests.jsonl, read line by line through the input door (a table:
    TABLE_LIMIT_BYTES); a line that is not JSON is an InputFileError naming file and line."""
    from analysis.api import TABLE_LIMIT_BYTES, read_json_lines

    return [record for _, record in read_json_lines(path, TABLE_LIMIT_BYTES, "the load records")]


def summarize(records: list[dict], num_gpus: int, accept_length: float | None = None) -> dict:
    ok = [r for r in records if r["ok"]]
    out: dict = {"requests": len(records), "completed": len(ok), "failed": len(records) - len(ok),
                 "accept_length": accept_length}
    if not ok:
        return out
    series = {"ttft_ms": [r["ttft_ms"] for r in ok], "e2e_ms": [r["e2e_ms"] for r in ok],
              "tpot_ms": [r["tpot_ms"] for r in ok if r["tpot_ms"] is not None],
              "itl_ms": [x for r in ok for x in r["itl_ms"]]}
    for name, values in series.items():
        if values:
            arr = np.asarray(values)
            out[name] = {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)),
                         "p90": float(np.percentile(arr, 90)), "p99": float(np.percentile(arr, 99))}
    begin = min(r["start_s"] for r in ok)
    end = max(r["start_s"] + r["e2e_ms"] / 1e3 for r in ok)
    tokens = sum(r["output_tokens"] for r in ok)
    out["duration_s"] = end - begin
    out["output_tokens"] = tokens
    out["output_tok_per_s"] = tokens / (end - begin) if end > begin else None
    out["output_tok_per_s_per_gpu"] = out["output_tok_per_s"] / num_gpus if out["output_tok_per_s"] else None
    return out
