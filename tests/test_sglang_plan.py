from pathlib import Path

import pytest

from harness.sglang.plan import (NODE0_PLACEHOLDER, DeploymentSpec, PlanError, SpeculativeSpec, build_plan,
                                 expected_rank_labels)
from harness.node.secrets import Secrets, mask_argv, mask_env
from harness.sglang.spec import deployment_spec

REPO = Path(__file__).resolve().parent.parent


def _spec(**kw):
    base = dict(model_path="m", nodes=2, gpus_per_node=4, dp=8, ep=8, dp_attention=True,
                moe_a2a_backend="deepep", deepep_mode="low_latency", max_running_requests=512)
    base.update(kw)
    return DeploymentSpec(**base)


def test_each_node_gets_its_rank_and_node0_placeholder():
    plan = build_plan(_spec(), environ={})
    assert [n.node_rank for n in plan.nodes] == [0, 1]
    for n in plan.nodes:
        argv = list(n.argv)
        assert argv[argv.index("--node-rank") + 1] == str(n.node_rank)
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--dist-init-addr") + 1] == f"{NODE0_PLACEHOLDER}:5000"
        assert argv[argv.index("--tp-size") + 1] == "8"
    filled = plan.nodes[1].with_node0_ip("10.0.0.7")
    assert "10.0.0.7:5000" in filled.argv


def test_deepep_env_sized_from_running_requests_and_mtp():
    # 512 requests over dp 8 = 64 per rank, x 4 draft tokens = 256 tokens per rank per step.
    plan = build_plan(_spec(speculative=SpeculativeSpec("EAGLE", 3, 1, 4)), environ={})
    env = plan.nodes[0].env
    assert env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "256"
    assert env["NVSHMEM_IB_ENABLE_IBGDA"] == "1"
    single = build_plan(DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1), environ={})
    assert "--nnodes" not in single.nodes[0].argv
    assert "NVSHMEM_IB_ENABLE_IBGDA" not in single.nodes[0].env


def test_secrets_pass_through_but_are_masked_when_printed():
    plan = build_plan(_spec(env={"MY_API_KEY": "k-12345"}, extra_args=("--api-key", "sk-999")),
                      environ={"HF_TOKEN": "hf_abcdef", "UNRELATED": "x"})
    node = plan.nodes[0]
    assert node.env["HF_TOKEN"] == "hf_abcdef" and node.env["MY_API_KEY"] == "k-12345"
    assert "UNRELATED" not in node.env
    text = plan.render() + str(plan.to_manifest())
    for secret in ("hf_abcdef", "k-12345", "sk-999"):
        assert secret not in text
    assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=" in plan.render().replace("'", "")
    assert mask_argv(["--api-key=abc", "--port", "1"]) == ["--api-key=***", "--port", "1"]
    assert mask_argv(["--api-key", "--port", "1", "env", "HF_TOKEN=abc"]) == ["--api-key", "--port", "1", "env",
                                                                            "HF_TOKEN=***"]  # a flag is no value
    assert mask_env({"NUM_DRAFT_TOKENS": "4", "AWS_SECRET_ACCESS_KEY": "s"}) == {"NUM_DRAFT_TOKENS": "4",
                                                                                "AWS_SECRET_ACCESS_KEY": "***"}
    assert Secrets.of_launch({"HF_TOKEN": "hf_abcdef"}).text("token is hf_abcdef.") == "token is ***."


def test_secret_flag_and_variable_values_are_masked_in_node_messages():
    # what a node check echoes back (SGLang's own error text) is masked with these values, as
    # harness/sglang/node_check.py masks it (values of 8 characters or more are searched in free text)
    secrets = Secrets.of_launch({"HF_TOKEN": "hf_abcdefg", "API_KEY": "sk-env-9999", "PORT": "30000"},
                                ["--model-path", "m", "--api-key", "sk-flag-1234", "--admin-api-key=adm-56789"])
    text = "bad --api-key sk-flag-1234 / adm-56789, token hf_abcdefg, env key sk-env-9999, port 30000"
    assert secrets.text(text) == "bad --api-key *** / ***, token ***, env key ***, port 30000"


def test_rank_labels_follow_sglang_trace_naming():
    labels = expected_rank_labels(_spec())
    assert labels[0][0] == "TP-0-DP-0-EP-0" and labels[1][3] == "TP-7-DP-7-EP-7"
    plain = expected_rank_labels(DeploymentSpec(model_path="m", nodes=1, gpus_per_node=2))
    assert plain == {0: ["TP-0", "TP-1"]}


@pytest.mark.parametrize("kw,message", [
    (dict(tp=4), "must equal nodes x gpus_per_node"),
    (dict(dp=3), "dp=3 must divide tp=8"),
    (dict(dp_attention=False), "dp > 1 needs dp_attention"),
    (dict(moe_a2a_backend=None, deepep_mode="low_latency"), "deepep_mode is set but"),
])
def test_impossible_specs_are_rejected(kw, message):
    with pytest.raises(PlanError, match=message):
        build_plan(_spec(**kw), environ={})


def test_unknown_engine_key_names_the_key():
    with pytest.raises(PlanError, match="engine: unknown key\\(s\\) tp_szie"):
        deployment_spec({"kind": "sglang", "model_path": "m", "tp_szie": 2}, {"nodes": 1, "gpus_per_node": 2})


def test_plan_command_prints_b200_mtp(capsys):
    import argparse

    from harness.commands import plan as plan_command
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    args = parser.parse_args(["plan", str(REPO / "scenarios" / "b200_mtp.yaml")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("sglang.launch_server") == 2
    assert "--speculative-algorithm EAGLE" in out and "--node-rank 1" in out


def test_pipeline_stages_are_placed_and_labelled_as_sglang_does():
    # 2 nodes x 2 GPUs, tp 2 x pp 2: one pipeline stage per node (engine._calculate_rank_ranges).
    spec = DeploymentSpec(model_path="m", nodes=2, gpus_per_node=2, tp=2, pp=2)
    plan = build_plan(spec, environ={})
    assert "--pp-size 2" in " ".join(plan.nodes[0].argv) and plan.nodes[0].flag_keys["--pp-size"] == "engine.pp"
    assert expected_rank_labels(spec) == {0: ["TP-0-PP-0", "TP-1-PP-0"], 1: ["TP-0-PP-1", "TP-1-PP-1"]}
    # two stages on one node of 4 GPUs
    one_node = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=4, tp=2, pp=2)
    assert expected_rank_labels(one_node) == {0: ["TP-0-PP-0", "TP-1-PP-0", "TP-0-PP-1", "TP-1-PP-1"]}
    with pytest.raises(PlanError, match=r"tp=2 x pp=3 must equal nodes x gpus_per_node = 4"):
        build_plan(DeploymentSpec(model_path="m", nodes=2, gpus_per_node=2, tp=2, pp=3), environ={})


def test_flags_keep_the_scenario_key_they_came_from():
    plan = build_plan(_spec(cuda_graph_max_bs=64, extra_args=("--log-level", "debug")), environ={})
    keys = plan.nodes[1].flag_keys
    assert keys["--attn-dp-size"] == "engine.dp_attention" and keys["--cuda-graph-max-bs-decode"] == "engine.cuda_graph_max_bs"
    assert keys["--nnodes"] == keys["--node-rank"] == "cluster.nodes" and keys["--log-level"] == "engine.extra_args"


def test_profiler_and_capture_traces_follow_the_release():
    v2 = build_plan(_spec(capture_traces=True), environ={}, version="0.5.23")
    env, argv = v2.nodes[0].env, v2.nodes[0].argv
    assert (v2.profiler, env["SGLANG_PROFILE_V2"], env["SGLANG_GRAPH_BATCH_CAPTURE"]) == ("v2", "1", "1")
    assert "--enable-profile-cuda-graph" in argv
    v1 = build_plan(_spec(profiler="v1", capture_traces=True), environ={}, version="0.5.17")
    assert v1.profiler == "v1" and "SGLANG_PROFILE_V2" not in v1.nodes[0].env
    assert v1.nodes[0].env["SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE"] == "1"
    with pytest.raises(PlanError, match=r"profile.capture_traces: SGLang 0.5.13.post1 writes no CUDA-graph capture"):
        build_plan(_spec(capture_traces=True), environ={}, version="0.5.13.post1")
