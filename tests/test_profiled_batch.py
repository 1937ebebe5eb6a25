"""The profiled-batch check (analysis/tables/profiled_batch.py) on synthetic step rows with known answers,
and the plan's side of it: the batch per scheduler and SGLang's decode minimum batch."""
from dataclasses import replace

import pytest

from analysis.attribution.rows import StepRow
from analysis.tables.profiled_batch import check_profiled_batch
from harness.commands.plan import load_deployment_spec
from harness.sglang.plan import build_plan


def _row(rank: str, step: int, stage: str, bs: int | None) -> StepRow:
    return StepRow(run="r", rank=rank, step=step, stage=stage, start_us=0.0, end_us=1.0, step_us=1.0, layers_us=1.0,
                   busy_us=1.0, exposed_us=1.0, kernels=1, layers_found=1, layers_expected=1, status="ok",
                   segmented_by="gpu_annotation", batch_size=bs)


def test_steps_at_the_scenario_batch_pass_and_draft_or_extend_steps_are_not_compared():
    rows = [_row("TP0", 0, "draft", 1), _row("TP0", 1, "verify", 64), _row("TP0", 2, "target_verify", 64),
            _row("TP1", 0, "decode", 64), _row("TP1", 1, "extend", 3)]
    check = check_profiled_batch(rows, (64, 64))
    assert (check.status, check.checked, check.off, check.problems()) == ("ok", 3, [], [])
    assert check.note() == ("Profiled batch: all 3 decode/verify steps ran at the scenario's 64 requests per "
                            "scheduler (bs= of SGLang's step labels).")


def test_ramp_up_and_extra_steps_are_named():
    rows = [_row("TP0", 0, "decode", 30), _row("TP0", 1, "decode", 64), _row("TP1", 0, "decode", 65)]
    check = check_profiled_batch(rows, (63, 64))
    assert check.status == "off" and [(s.rank, s.step, s.batch) for s in check.off] == [("TP0", 0, 30), ("TP1", 0, 65)]
    assert check.problems() == [
        ("TP0", "step 0 (decode): bs=30, the scenario's batch per scheduler is 63 to 64: a ramp-up step, or "
                "requests finished inside the window"),
        ("TP1", "step 0 (decode): bs=65, the scenario's batch per scheduler is 63 to 64: more requests than the "
                "scenario's")]
    assert check.note().startswith("Profiled batch: 2 of 3 decode/verify steps did not run at the scenario's 63 to "
                                   "64 requests per scheduler") and "TP0 step 0 bs=30, TP1 step 0 bs=65." in check.note()
    assert check.summary()["off_steps"][0] == {"rank": "TP0", "step": 0, "stage": "decode", "bs": 30}


def test_nothing_to_compare_is_unknown_not_ok():
    unlabelled = check_profiled_batch([_row("TP0", 0, "decode", None)], (8, 8))
    assert (unlabelled.status, unlabelled.unlabelled) == ("unknown", 1)
    assert "not checked: no decode or verify step label gives its batch" in unlabelled.note()
    no_expectation = check_profiled_batch([_row("TP0", 0, "decode", 3)], None)
    assert no_expectation.status == "unknown" and no_expectation.problems() == []


def test_the_batch_per_scheduler_follows_dp_attention():
    spec, _ = load_deployment_spec("b200_mtp")  # 1024 requests over 16 DP-attention groups
    assert spec.batch_size == 1024 and spec.scheduler_batch == (64, 64)
    assert replace(spec, batch_size=1000).scheduler_batch == (62, 63)
    single, _ = load_deployment_spec("sglang_single_gpu")
    assert single.scheduler_batch == (single.batch_size, single.batch_size)
    assert replace(spec, batch_size=None).scheduler_batch is None


@pytest.mark.parametrize("version,profiler,expected", [
    ("0.5.23", "v1", "64"), ("0.5.20", "v1", "64"),
    ("0.5.19", "v1", None),   # the release has no such variable
    ("0.5.23", "v2", None),   # V2 never reads it (profile_utils.py); only the classic profiler does
])
def test_the_decode_minimum_batch_is_set_where_the_release_reads_it(version, profiler, expected):
    spec, _ = load_deployment_spec("b200_mtp")
    plan = build_plan(replace(spec, profiler=profiler), environ={}, version=version)
    assert {n.env.get("SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS") for n in plan.nodes} == {expected}
