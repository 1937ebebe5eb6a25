"""Plans that survive on real hardware: what the runs on four H100s showed (docs/gpu-runs.md, 2026-11-26).

- DeepEP's low-latency mode asserts when a prefill puts more tokens on a rank than its dispatch
  budget: the plan chunks prefill within the budget (SGLang divides the chunk by dp under DP attention).
- Two Ray nodes sharing a host: every node >= 1 binds a stand-by health server on its --port.
- DP attention keeps one request of a full group waiting: validate asks for the room.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.load.background import BackgroundLoad
from harness.load.client import describe_loads
from harness.scenario import ScenarioError, load_scenario
from harness.sglang.plan import DeploymentSpec, PlanError, SpeculativeSpec, build_plan
from tests.ports import free_port_run

REPO = Path(__file__).resolve().parent.parent
FAKE = str(REPO / "tests" / "fake_sglang" / "server.py")


def _argv_value(argv, flag):
    argv = list(argv)
    return argv[argv.index(flag) + 1] if flag in argv else None


def _ll(**kw):
    base = dict(model_path="m", nodes=1, gpus_per_node=2, tp=2, ep=2, moe_a2a_backend="deepep",
                deepep_mode="low_latency", max_running_requests=16)
    base.update(kw)
    return DeploymentSpec(**base)


def test_low_latency_prefill_is_chunked_within_the_dispatch_budget():
    node = build_plan(_ll(), environ={}, version="0.5.17").nodes[0]
    assert node.env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "128"
    assert _argv_value(node.argv, "--chunked-prefill-size") == "128"
    assert node.flag_keys["--chunked-prefill-size"] == "engine.chunked_prefill_size"


def test_dp_attention_chunk_is_the_budget_per_group_since_sglang_divides_it_by_dp():
    # Seen: --chunked-prefill-size 128 with dp 4 became 32, and SGLang asserted "chunked_prefill_size must
    # be divisible by page_size" (64 for FlashMLA).
    node = build_plan(_ll(nodes=2, gpus_per_node=2, tp=4, ep=4, dp=4, dp_attention=True, max_running_requests=20),
                      environ={}, version="0.5.17").nodes[0]
    assert _argv_value(node.argv, "--chunked-prefill-size") == str(128 * 4)
    assert int(node.env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"]) % 128 == 0


def test_budget_is_a_multiple_of_128_so_the_chunk_stays_a_multiple_of_the_page():
    plan = build_plan(_ll(nodes=2, gpus_per_node=8, tp=16, ep=16, dp=16, dp_attention=True,
                          max_running_requests=2064), environ={})
    assert plan.nodes[0].env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "256"
    mtp = build_plan(_ll(speculative=SpeculativeSpec("EAGLE", 1, 1, 2)), environ={})
    assert mtp.nodes[0].env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "128"


@pytest.mark.parametrize("how", ["field", "extra_args"])
def test_a_longer_chunk_than_the_budget_is_refused_naming_the_key(how):
    spec = _ll(chunked_prefill_size=4096) if how == "field" else _ll(extra_args=("--chunked-prefill-size", "4096"))
    with pytest.raises(PlanError, match=r"chunked.prefill.size.*4096.*at most 128"):
        build_plan(spec, environ={})


def test_a_chunk_within_the_budget_and_other_modes_are_left_alone():
    assert _argv_value(build_plan(_ll(chunked_prefill_size=64), environ={}).nodes[0].argv, "--chunked-prefill-size") == "64"
    kept = build_plan(_ll(extra_args=("--chunked-prefill-size=96",)), environ={}).nodes[0].argv
    assert list(kept).count("--chunked-prefill-size=96") == 1 and "--chunked-prefill-size" not in kept
    auto = build_plan(_ll(deepep_mode="auto"), environ={}).nodes[0].argv
    assert "--chunked-prefill-size" not in auto
    raised = build_plan(_ll(env={"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "512"}), environ={}).nodes[0]
    assert _argv_value(raised.argv, "--chunked-prefill-size") == "512"


def test_each_node_binds_its_own_port():
    plan = build_plan(_ll(nodes=2, gpus_per_node=2, tp=4, ep=4, port=31000), environ={})
    assert [_argv_value(n.argv, "--port") for n in plan.nodes] == ["31000", "31001"]


def _scenario_text(max_running: int) -> str:
    return f"""name: dp
description: dp attention
cluster: {{nodes: 1, gpus_per_node: 4}}
engine: {{kind: sglang, model_path: m, tp: 4, dp: 4, ep: 4, dp_attention: true, max_running_requests: {max_running}}}
model: {{name: m}}
workload: {{batch_size: 16, input_len: 8, output_len: 64}}
profile: {{num_steps: 2, stages: [DECODE]}}
"""


def test_validate_asks_dp_attention_for_one_more_request_per_group(tmp_path):
    path = tmp_path / "dp.yaml"
    path.write_text(_scenario_text(16))
    with pytest.raises(ScenarioError, match=r"engine.max_running_requests \(16\).*keeps one.*at least 20"):
        load_scenario(str(path))
    path.write_text(_scenario_text(20))
    assert load_scenario(str(path))[0].engine.max_running_requests == 20


def test_a_short_dp_batch_names_each_groups_running_and_waiting(tmp_path):
    """The fake keeps one request of a full DP group waiting, as SGLang 0.5.17 did on two H100s; the
    load's view of /v1/loads then says where the batch is short."""
    port = free_port_run(1)
    proc = subprocess.Popen([sys.executable, FAKE, "--port", str(port), "--tp-size", "2", "--dp-size", "2",
                             "--enable-dp-attention", "--ep-size", "2", "--max-running-requests", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"FAKE_SGLANG_STEP_MS": "10", "PATH": "/usr/bin:/bin"})
    url = f"http://127.0.0.1:{port}"
    try:
        load = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                load = BackgroundLoad(url, 8, 8, 2000, str(tmp_path / "requests.jsonl"))
                if load.running_batch() is not None:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        seen = None
        for _ in range(30):
            seen = load.running_batch()
            time.sleep(0.1)
        assert seen == 6
        text = describe_loads(load.last_loads)
        assert text.startswith("DP rank 0: 3 running, 1 waiting (max 8); DP rank 1: 3 running, 1 waiting")
        load.stop()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
