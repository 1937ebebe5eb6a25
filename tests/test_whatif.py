import pytest

from analysis.sol.estimate import D4Sol
from analysis.report.whatif import WhatIfError, what_if, what_if_at_sol


def test_amdahl_speedup_and_target():
    # 61 layers x 40 us = 2.44 ms of a 20 ms step; 2x faster saves 1.22 ms
    w = what_if(20.0, 40.0, 61, speedup=2.0)
    assert w.new_row_us == 20.0
    assert w.saving_ms == pytest.approx(1.22)
    assert w.new_step_ms == pytest.approx(18.78)
    assert w.step_speedup == pytest.approx(20.0 / 18.78)
    at = what_if(20.0, 40.0, 58, target_us=10.0)
    assert at.saving_ms == pytest.approx(58 * 30 / 1000)
    # a target slower than measured saves nothing
    assert what_if(20.0, 40.0, 58, target_us=50.0).saving_ms == 0.0


def test_bad_what_if_inputs():
    with pytest.raises(WhatIfError, match="exactly one"):
        what_if(20.0, 40.0, 61)
    with pytest.raises(WhatIfError, match="longer than the step"):
        what_if(1.0, 400.0, 61, speedup=10)


def test_ranking_at_sol_puts_largest_saving_first():
    rows = [D4Sol("attention", "attn_mqa", "mha", 255.0, "mla_attention", 190.0, 74.5, "memory"),
            D4Sol("moe", "combine", "combine", 394.0, "combine", 275.0, 69.8, "network"),
            D4Sol("attention", "sum", "", 388.0, None, None, None, None)]
    ranked = what_if_at_sol(rows, 96.0, lambda r: 58 if r.group == "moe" else 61)
    assert [w.module for w in ranked] == ["combine", "attn_mqa"]
    assert ranked[0].saving_ms == pytest.approx(58 * 119 / 1000)


def test_speedup_ranking_without_sol():
    from analysis.report.whatif import what_if_speedup

    rows = [("attention", "attn", "fmha", 40.0, 61), ("moe", "experts", "gemm", 100.0, 58),
            ("other", "bad", "k", 1000.0, 61)]  # 61 ms of a 20 ms step: wrong layer count
    ranked, notes = what_if_speedup(rows, 20.0, 2.0)
    assert [w.module for w in ranked] == ["experts", "attn"]
    assert ranked[0].saving_ms == pytest.approx(58 * 50 / 1000)
    assert ranked[1].new_step_ms == pytest.approx(20.0 - 61 * 20 / 1000)
    assert len(notes) == 1 and "other/bad" in notes[0]
