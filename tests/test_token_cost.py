"""What a token costs with MTP against a plain decode step of the same deployment.

The bundled real pairs (SGLang 0.5.17, the same server with and without EAGLE/NextN: one H200 with
CUDA graphs, two H100s with DeepEP and CUDA graphs, one H200 eager) are compared, and the graph
pairs' parts are checked against the raw traces' own step annotations read without the analysis.
Their accept length is 1.0 (random weights; the server's /get_server_info, docs/gpu-runs.md): the
load of the bundled MTP recordings did not complete, so none measured it. A SYNTHETIC MTP trace with
known step times checks the arithmetic.
"""
from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze, render_markdown
from analysis.attribution.signature import load_signature
from harness.cli import main
from synthetic_deepseek import write_rank_trace

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests/data/sglang-real"
MODEL = str(ROOT / "benchmarks/gpu/sglang_ray/dsv3_4l_model.yaml")
EP = "ep/sglang-0.5.17-dsv3-4l-fp8-h100x2-deepep-ll"
PAIRS = {  # (plain, MTP) traces of one deployment
    "h200-graph": (["sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"],
                   ["sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz"]),
    "h100x2-deepep-graph": ([f"{EP}-graph-TP-{r}-EP-{r}-decode.trace.json.gz" for r in (0, 1)],
                            [f"{EP}-mtp-graph-TP-{r}-EP-{r}-decode.trace.json.gz" for r in (0, 1)]),
    "h200-eager": (["eager/sglang-0.5.17-dsv3-4l-fp8-h200-eager-fused-moe-TP-0-decode.trace.json.gz"],
                   ["eager/sglang-0.5.17-dsv3-4l-fp8-h200-eager-mtp-TP-0-decode.trace.json.gz"]),
}
ACCEPT = 1.0
TOLERANCE = 0.05


def _raw_spans(path: Path) -> dict[str, list[float]]:
    """Per step annotation kind, each step's GPU span, read as docs/signatures.md defines a step: the
    kernels starting inside its GPU annotation window (same-named windows that overlap are one: a
    step is annotated on every stream it uses), and those starting outside every window joined to
    the window that began last before them."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    kinds = {"step[TARGET_VERIFY": "target_verify", "step[DECODE": "decode", "draft_extend": "draft_extend",
             "draft": "draft"}
    windows: dict[str, list[list[float]]] = {}
    for ev in sorted((e for e in events if e.get("cat") == "gpu_user_annotation"), key=lambda e: e["ts"]):
        kind = next((k for prefix, k in kinds.items() if ev["name"] == prefix or ev["name"].startswith(prefix + " ")),
                    None)
        if kind is None:
            continue
        own = windows.setdefault(kind, [])
        if own and ev["ts"] <= own[-1][1]:
            own[-1][1] = max(own[-1][1], ev["ts"] + ev["dur"])
        else:
            own.append([ev["ts"], ev["ts"] + ev["dur"]])
    steps = sorted((start, end, kind, []) for kind, own in windows.items() for start, end in own)
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    for k in kernels:
        holder = next((st for st in steps if st[0] <= k[0] <= st[1]), None)
        if holder is None:
            before = [st for st in steps if st[0] <= k[0]]
            holder = before[-1] if before else steps[0]
        holder[3].append(k)
    spans: dict[str, list[float]] = {}
    for _start, _end, kind, inside in steps:
        if inside:
            spans.setdefault(kind, []).append(max(k[1] for k in inside) - min(k[0] for k in inside))
    return spans


def _columns(pair: str):
    plain, mtp = ([str(REAL / f) for f in files] for files in PAIRS[pair])
    a = analyze(plain, model=MODEL, options=AnalysisOptions(run="plain", jobs=1))
    b = analyze(mtp, model=MODEL, options=AnalysisOptions(run="mtp", jobs=1, accept_length=ACCEPT))
    return a.d4, b.d4


@pytest.mark.parametrize("pair", ["h200-graph", "h100x2-deepep-graph"])
def test_a_real_mtp_run_against_its_plain_twin_per_token(pair):
    plain, mtp = _columns(pair)
    assert (plain.stage, mtp.stage) == ("decode", "target_verify")
    # the parts from the raw traces: per rank the mean step of each kind times its steps per verify
    # step, then the mean over ranks (the default rank policy)
    want: dict[str, list[float]] = {}
    for name in PAIRS[pair][1]:
        raw = _raw_spans(REAL / name)
        verifies = len(raw["target_verify"])
        for kind, part in (("target_verify", "verify"), ("draft", "draft"), ("draft_extend", "draft_extend")):
            want.setdefault(part, []).append(statistics.fmean(raw[kind]) * len(raw[kind]) / verifies)
    for part, per_rank in want.items():
        assert mtp.token_cost.parts_us[part] == pytest.approx(statistics.fmean(per_rank), rel=TOLERANCE), part
    decode = [statistics.fmean(_raw_spans(REAL / name)["decode"]) for name in PAIRS[pair][0]]
    assert plain.token_cost.parts_us["decode"] == pytest.approx(statistics.fmean(decode), rel=TOLERANCE)
    # every draft step counts, whatever layers the cut found in it (the DeepEP one finds 6 in a NextN step)
    assert mtp.step_ms * 1000 == pytest.approx(mtp.token_cost.span_us)
    assert "draft" in mtp.token_cost.parts_us
    text = render_markdown([plain, mtp])
    span = mtp.token_cost.span_us / ACCEPT / 1000
    assert f"| per token (ms) | all steps of a token | GPU span | {plain.step_ms:.2f}ms | {span:.2f}ms |" in text
    assert f"| per token (ms) | verify step | per accepted token |  | " \
           f"{mtp.token_cost.parts_us['verify'] / ACCEPT / 1000:.2f}ms |" in text
    ratio = span / plain.step_ms
    assert f"mtp against plain, per token: {span:.2f} ms per accepted token at accept length 1 " in text
    assert f": {ratio:.2f}x (GPU span)" in text
    assert "per accepted token (ms) |  |  |  |" in text  # the plain column is not divided by the accept length


def test_the_eager_pair_compares_too():
    plain, mtp = _columns("h200-eager")
    assert plain.token_cost.parts_us.keys() == {"decode"}
    assert {"verify", "draft_extend"} <= mtp.token_cost.parts_us.keys()
    assert mtp.token_cost.period_us > mtp.token_cost.parts_us["verify"]  # an iteration is more than its verify
    assert "mtp against plain, per token" in render_markdown([plain, mtp])


def test_synthetic_mtp_parts_per_accepted_token_and_the_plain_step(tmp_path):
    sig = load_signature("sglang-sm100-deepep-ll")
    mtp_path, plain_path = tmp_path / "mtp-TP-0-DECODE.trace.json.gz", tmp_path / "plain-TP-0-DECODE.trace.json.gz"
    mtp_known = write_rank_trace(mtp_path, sig, steps=2, mtp_draft_steps=2)
    plain_known = write_rank_trace(plain_path, sig, steps=2)
    mtp = analyze([str(mtp_path)], signature=sig.name, model="deepseek-v3",
                  options=AnalysisOptions(run="mtp", accept_length=2.5)).d4
    plain = analyze([str(plain_path)], signature=sig.name, model="deepseek-v3",
                    options=AnalysisOptions(run="plain", accept_length=2.5)).d4
    verify, draft = statistics.fmean(mtp_known.step_us), statistics.fmean(mtp_known.draft_step_us)
    extend = statistics.fmean(mtp_known.draft_extend_us)
    assert mtp.token_cost.tokens == 2.5
    assert mtp.token_cost.parts_us == pytest.approx({"verify": verify, "draft": 2 * draft, "draft_extend": extend})
    assert plain.token_cost.tokens == 1.0 and plain.per_token_ms is None  # a decode step is not divided
    assert plain.token_cost.parts_us == pytest.approx({"decode": statistics.fmean(plain_known.step_us)})
    text = render_markdown([plain, mtp])
    assert f"| per token (ms) | draft steps | per accepted token |  | {2 * draft / 2.5 / 1000:.2f}ms |" in text
    ratio = (verify + 2 * draft + extend) / 2.5 / statistics.fmean(plain_known.step_us)
    assert f"{ratio:.2f}x (GPU span)" in text


def test_compare_divides_only_the_mtp_column_by_the_accept_length(capsys):
    plain, mtp = PAIRS["h200-graph"]
    assert main(["compare", f"plain={REAL / plain[0]}", f"mtp={REAL / mtp[0]}", "--model", MODEL,
                 "--accept-length", "2"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("| per accepted token (ms) |"))
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    assert cells[3] == "" and cells[4].endswith("ms")
    assert "accept length 2 " in out
