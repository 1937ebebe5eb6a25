"""Which row of a real D4 table takes each SOL term: the kernel that does the module's work.

The traces are real ones recorded for this project (tests/data/sglang-real): a DeepEP normal-mode
prefill on two H100s, a one-GPU decode whose MoE runs DeepGEMM without an all-to-all, and expert
parallelism on two H100s without an all-to-all. Which row is right is read off what each kernel is
by its name (a cuBLAS memset is not the W_UK GEMM, DeepEP's layout kernel moves no tokens), written
out below by hand, not taken from the module map under test.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import AnalysisOptions, analyze
from analysis.sol.estimate import Deployment, SolSettings, sol_for_d4_rows

DATA = Path(__file__).parent / "data" / "sglang-real"
# kernels that never do a module's own work: their rows must never carry a term
HELPERS = ("Memset", "Memcpy", "per_token_group_quant_flat", "set_mla_kv_buffer", "get_dispatch_layout",
           "notify_dispatch", "notify_combine", "_fwd_kernel_ep_gather", "_fwd_kernel_ep_scatter",
           "fused_moe_dispatch_index", "post_reorder", "direct_copy_kernel")


def _terms(paths: list[Path], ep: int, hardware: str) -> tuple[dict[str, str], list]:
    """term -> the kernel of the row that took it, and the SOL rows, for the real table of `paths`
    (its rows given to the SOL map directly: a prefill table gets no SOL columns, test below)."""
    analysis = analyze([str(p) for p in paths], model="deepseek-v3", options=AnalysisOptions(layers=4))
    rows = sol_for_d4_rows(analysis.d4.rows, Deployment(batch_per_rank=8, kv_len=1024, ep=ep), hardware)
    taken = {row.term: row.kernel for row in rows if row.term}
    return taken, rows


def _no_helper_takes_a_term(rows) -> None:
    for row in rows:
        if row.term:
            assert not any(h in row.kernel for h in HELPERS), (row.term, row.module, row.kernel[:80])


PREFILL = sorted((DATA / "pd").glob("*prefill-nostack-TP-*.trace.json.gz"))


def test_deepep_prefill_terms_go_to_the_kernels_that_do_the_work():
    assert len(PREFILL) == 2
    taken, rows = _terms(PREFILL, ep=2, hardware="h100")
    # each module's first row is a helper here: the memset before the GEMM, a copy before DeepEP's
    # layout kernel, the KV-cache write before the attention, a local gather before DeepEP's combine
    assert taken["w_uk_bmm"].startswith("nvjet_sm90_tst_256x152"), taken["w_uk_bmm"]
    assert taken["w_uv_bmm"].startswith("nvjet_sm90_tst_128x256"), taken["w_uv_bmm"]
    assert taken["mla_attention"] == "_fwd_kernel"  # SGLang's Triton prefill attention
    assert taken["dispatch"].startswith("deep_ep::intranode::dispatch<"), taken["dispatch"]
    assert taken["combine"].startswith("deep_ep::intranode::combine<"), taken["combine"]
    _no_helper_takes_a_term(rows)
    over = [(r.module, r.sol_pct) for r in rows if r.sol_pct is not None and r.sol_pct > 100]
    assert not over  # the memsets read 405-569% of SOL before: a table crying wolf


def test_one_gpu_local_moe_kernels_take_no_all_to_all_term():
    path = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"
    taken, rows = _terms([path], ep=1, hardware="h200")
    # its MoE's index and reorder kernels carry "dispatch" and "combine" in their names but move no
    # token between GPUs (there is one)
    assert "dispatch" not in taken and "combine" not in taken, taken
    assert taken["experts_up_gate"].startswith("deep_gemm::") and taken["mla_attention"].startswith("sm90::flash")
    _no_helper_takes_a_term(rows)


def test_expert_parallelism_without_all_to_all_has_no_combine_row():
    paths = sorted((DATA / "ep").glob("*h100x2-ep-noa2a-eager-TP-*.trace.json.gz"))
    assert len(paths) == 2
    taken, rows = _terms(paths, ep=2, hardware="h100")
    combine_rows = [r.kernel for r in rows if r.module == "combine" and r.group == "moe"]
    assert combine_rows and all("CUDAFunctor_add" in k for k in combine_rows)  # a local add, not a transfer
    assert "combine" not in taken and "dispatch" not in taken, taken
    _no_helper_takes_a_term(rows)


@pytest.mark.parametrize("ep, pct_shown", [(1, False), (8, True)])
def test_a_term_without_work_shows_no_percentage(ep, pct_shown):
    # synthetic row (the embedded engine's module-range combine row): with one GPU the combine moves
    # nothing, so its SOL is 0 and "0% of SOL" would read as a kernel at none of its limit
    out = sol_for_d4_rows([("moe", "combine", 2.0, "combine")], Deployment(batch_per_rank=8, kv_len=1024, ep=ep,
                                                                           dp=ep), "h200")
    assert out[0].term == "combine"
    assert (out[0].bound == "none") is not pct_shown
    assert (out[0].sol_pct is not None) is pct_shown


def test_a_prefill_table_gets_no_sol_and_says_why():
    """The SOL model counts a decode step (one new token a request against its KV length); the
    prefill steps above compute 4000 prompt tokens each, so every figure would read far below 100%
    (the attention at 0% of a decode step's work): the cells stay empty and the note says why."""
    sol = SolSettings(hardware="h100", deployment=Deployment(batch_per_rank=8, kv_len=1024, ep=2))
    analysis = analyze([str(p) for p in PREFILL], model="deepseek-v3", options=AnalysisOptions(sol=sol, layers=4))
    assert analysis.d4.stage == "extend" and analysis.d4.sol == sol
    assert all(r.sol_us is None and r.sol_pct is None and r.sol_term is None for r in analysis.d4.rows)
    assert "NO SOL FOR PREFILL" in analysis.markdown()


def test_the_report_of_a_prefill_table_has_no_sol_rows():
    from analysis.pipeline.report_inputs import report_source_from_traces
    from analysis.report.report_pipeline import ReportOptions, kernel_report

    got = report_source_from_traces(PREFILL, "generic")
    assert got.stage == "extend" and got.d4_rows
    sol = SolSettings(hardware="h100", deployment=Deployment(batch_per_rank=8, kv_len=1024, ep=2))
    blocks = repr(kernel_report(got, ReportOptions(sol=sol)).blocks)
    assert "No SOL rows" in blocks and "% of SOL" not in blocks
