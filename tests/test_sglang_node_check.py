"""The node check: the node's Python builds SGLang's own parser and judges the planned argv.

Here the node's Python imports the fake's `sglang` package (its parser read from the real release's
wheel); tests/test_sglang_node_check_real.py runs the same against a real SGLang where one is given.
"""
import sys
from pathlib import Path

from harness.sglang.node_check import describe, run_node_check
from harness.sglang.plan import DeploymentSpec, build_plan

REPO = Path(__file__).resolve().parent.parent
FAKE_ENV = {"PYTHONPATH": f"{REPO / 'tests' / 'fake_sglang'}:{REPO}"}


def _plan(**kw):
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=8, dp=8, dp_attention=True, cuda_graph_max_bs=64,
                          launcher=(sys.executable, "-m", "sglang.launch_server"), passthrough_env=(), **kw)
    return build_plan(spec, environ={})


def test_planned_argv_passes_and_planted_flags_are_named_with_their_keys(sglang_sources):
    plan = _plan(extra_args=("--enable-dp-atention", "--trust-remote", "--moe-a2a-backend", "deep_ep"))
    node = plan.nodes[0]
    result = run_node_check(sys.executable, node.server_args(plan.launcher_len), {**node.env, **FAKE_ENV})
    assert result["sglang_version"] == "0.5.23"
    assert describe({0: result}, plan) == [
        "node 0: --enable-dp-atention (from engine.extra_args): unknown: SGLang 0.5.23 says: not a flag of this "
        "SGLang",
        "node 0: --trust-remote (from engine.extra_args): unknown: SGLang 0.5.23 says: not a flag of this SGLang "
        "(argparse would take it as an abbreviation of --trust-remote-code; spell it out)",
        "node 0: --moe-a2a-backend (from engine.extra_args): invalid: SGLang 0.5.23 says: argument "
        "--moe-a2a-backend: invalid choice: 'deep_ep' (choose from 'none', 'deepep', 'mooncake', 'nixl', 'mori', "
        "'ascend_fuseep', 'flashinfer', 'megamoe', 'deepep_v2', 'pplx', 'ascend_tp', 'flashinfer_megamoe')"]
    clean = _plan()
    ok = run_node_check(sys.executable, clean.nodes[0].server_args(clean.launcher_len), FAKE_ENV)
    assert ok == {"sglang_version": "0.5.23", "problems": []} and describe({0: ok}, clean) == []


def test_deprecated_flags_carry_sglangs_own_warning(sglang_sources):
    plan = _plan(extra_args=("--enable-dp-attention",))
    result = run_node_check(sys.executable, plan.nodes[0].server_args(plan.launcher_len), FAKE_ENV)
    assert result["problems"] == [{"flag": "--enable-dp-attention", "kind": "deprecated", "message":
                                   "'--enable-dp-attention' is deprecated and will be removed in a future release. "
                                   "Use '--attn-dp-size <dp-size>' instead."}]


def test_a_node_without_sglang_says_so():
    plan = _plan()
    result = run_node_check(sys.executable, plan.nodes[0].server_args(plan.launcher_len), {"PYTHONPATH": str(REPO)})
    assert describe({0: result}, plan) == [
        "node 0: cannot build SGLang's parser: ModuleNotFoundError: No module named 'sglang'"]
    missing = run_node_check("/nonexistent/python3", ["--tp-size", "1"], {})
    assert missing["error"].startswith("cannot run the check with /nonexistent/python3:")
