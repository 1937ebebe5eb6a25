"""Scenario schema: unknown keys and impossible combinations are errors naming the file, key and line."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario import SCENARIOS_DIR, ScenarioError, load_scenario, parse_scenario, resolve_scenario_path

DEMO = (SCENARIOS_DIR / "demo.yaml").read_text()


def _problems(text: str, source: str = "bad.yaml") -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, source)
    assert info.value.source == source
    return str(info.value)


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml")))
def test_shipped_scenarios_are_valid(name: str) -> None:
    scenario, path = load_scenario(name)
    assert scenario.name == path.stem


def test_unknown_key_names_file_key_and_line() -> None:
    text = DEMO.replace("  num_steps: 3", "  num_step: 3")
    message = _problems(text, "scenarios/typo.yaml")
    line = 1 + text.splitlines().index("  num_step: 3")
    assert "scenarios/typo.yaml" in message
    assert f"profile.num_step (line {line}): unknown key" in message


def test_unknown_top_level_section() -> None:
    assert "outputz" in _problems(DEMO + "outputz: {}\n")


def test_unknown_engine_kind_is_named() -> None:
    message = _problems(DEMO.replace("kind: embedded", "kind: vllm"))
    assert "engine.kind" in message and "'vllm'" in message


def test_wrong_type_names_key() -> None:
    assert "workload.batch_size" in _problems(DEMO.replace("batch_size: 4", "batch_size: many"))


def test_cuda_without_gpus_is_rejected() -> None:
    message = _problems(DEMO.replace("device: cpu", "device: cuda"))
    assert "engine.device is cuda but cluster.gpus_per_node is 0" in message


def test_profile_longer_than_requests_is_rejected() -> None:
    message = _problems(DEMO.replace("output_len: 40", "output_len: 10"))
    assert "workload.output_len (10)" in message and "profile.num_steps" in message


def test_every_combination_problem_is_reported_at_once() -> None:
    text = DEMO.replace("device: cpu", "device: cuda").replace("output_len: 40", "output_len: 10")
    message = _problems(text)
    assert "engine.device" in message and "workload.output_len" in message


def test_embedded_on_several_nodes_is_rejected() -> None:
    assert "embedded engine runs on one node" in _problems(DEMO.replace("nodes: 1", "nodes: 2"))


def test_grouped_topk_shape_is_checked() -> None:
    text = DEMO.replace("  name: deepseek-v3-tiny", "  name: deepseek-v3-tiny\n  n_routed_experts: 30")
    assert "model.n_routed_experts (30) is not divisible by model.n_group (4)" in _problems(text)


def test_no_dense_layer_is_rejected() -> None:
    text = DEMO.replace("  name: deepseek-v3-tiny", "  name: deepseek-v3-tiny\n  first_k_dense_replace: 0")
    assert "model.first_k_dense_replace (0)" in _problems(text)


def test_unknown_preset_lists_known_ones() -> None:
    message = _problems(DEMO.replace("preset: tiny-cpu", "preset: huge"))
    assert "engine.preset: unknown preset 'huge'" in message and "tiny-cpu" in message


def test_sglang_tp_beyond_cluster_gpus() -> None:
    text = """
name: sg
cluster: {nodes: 1, gpus_per_node: 8}
engine: {kind: sglang, model_path: deepseek-ai/DeepSeek-V3, tp: 16}
model: {name: deepseek-v3}
"""
    assert "engine.tp (16) exceeds the cluster's GPUs" in _problems(text)


def test_sglang_rejects_embedded_only_keys() -> None:
    text = """
name: sg
cluster: {nodes: 1, gpus_per_node: 8}
engine: {kind: sglang, model_path: m, tp: 8, preset: tiny-cpu}
"""
    assert "engine.preset" in _problems(text) and "unknown key" in _problems(text)


def test_not_a_mapping() -> None:
    assert "top level must be a mapping" in _problems("- just\n- a list\n")


def test_lookup_by_name_and_by_path(tmp_path: Path) -> None:
    assert resolve_scenario_path("demo") == SCENARIOS_DIR / "demo.yaml"
    copy = tmp_path / "mine.yaml"
    copy.write_text(DEMO)
    assert resolve_scenario_path(str(copy)) == copy
    with pytest.raises(ScenarioError, match="no scenario named 'nope'"):
        resolve_scenario_path("nope")


def test_validate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.commands import validate

    import argparse

    assert validate.run(argparse.Namespace(scenario="demo")) == 0
    assert "ok:" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEMO.replace("kind: embedded", "kind: embedded\n  colour: red"))
    assert validate.run(argparse.Namespace(scenario=str(bad))) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "engine.colour" in err and "unknown key" in err


def test_sglang_scenarios_profile_one_stage_and_extend_with_the_classic_window(tmp_path):
    from harness.scenario import ScenarioError, parse_scenario
    from harness.sglang.spec import scenario_deployment

    text = (Path(__file__).parent / "scenarios" / "sglang_fake_2node.yaml").read_text()
    assert parse_scenario(text, "ok.yaml").profile.stages == ["DECODE"]
    with pytest.raises(ScenarioError, match=r"profile.stages: one stage a run, DECODE or EXTEND"):
        parse_scenario(text.replace("stages: [DECODE]", "stages: [DECODE, EXTEND]"), "bad.yaml")
    extend = parse_scenario(text.replace("stages: [DECODE]", "stages: [EXTEND]").replace("output_len: 120",
                                                                                         "output_len: 4"), "ok.yaml")
    assert scenario_deployment(extend).profile_stage == "EXTEND"  # a short output is fine: no decode window
    with pytest.raises(ScenarioError, match=r"EXTEND is profiled with the classic profiler's plain window"):
        parse_scenario(text.replace("stages: [DECODE]", "stages: [EXTEND]\n  sglang_profiler: v2"), "bad.yaml")
    with pytest.raises(ScenarioError, match=r"profile.expert_load: the expert distribution is recorded over a decode"):
        parse_scenario(text.replace("stages: [DECODE]", "stages: [EXTEND]\n  expert_load: true"), "bad.yaml")


def test_sglang_output_must_outlast_the_profiled_steps() -> None:
    text = """
name: sg
cluster: {nodes: 1, gpus_per_node: 8}
engine: {kind: sglang, model_path: m, tp: 8, speculative: {num_draft_tokens: 4}}
model: {name: m}
workload: {output_len: 20}
profile: {num_steps: 3}
"""
    assert "workload.output_len (20) must exceed (profile.num_steps + 2) x tokens per decode step (20)" in _problems(text)


def test_sglang_profile_options_are_checked() -> None:
    text = """
name: sg
cluster: {nodes: 1, gpus_per_node: 8}
engine: {kind: sglang, model_path: m, tp: 8}
profile: {sglang_profiler: v3}
"""
    assert "profile.sglang_profiler" in _problems(text)


PD_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "sglang_fake_pd.yaml"


def _pd(edit) -> str:
    """The PD test scenario with one edit, as YAML text (every problem it has, or "" when valid)."""
    import yaml

    data = yaml.safe_load(PD_SCENARIO.read_text())
    edit(data)
    try:
        parse_scenario(yaml.safe_dump(data, sort_keys=False), "pd.yaml")
    except ScenarioError as exc:
        return str(exc)
    return ""


def test_a_pd_scenario_checks_its_roles_nodes_and_ports() -> None:
    assert _pd(lambda d: None) == ""
    assert "prefill.nodes (1) + decode.nodes (2) must equal cluster.nodes (2)" in _pd(
        lambda d: d["engine"]["disaggregation"]["decode"].update(nodes=2))
    clash = _pd(lambda d: d["engine"]["disaggregation"]["router"].update(port=8998))
    assert "engine.disaggregation.router.port (8998) is the prefill bootstrap_port too" in clash
    same = _pd(lambda d: d["engine"]["disaggregation"]["decode"].update(port=30000))
    assert "port and dist_init_port must all differ" in same


def test_a_pd_roles_own_problem_is_named_with_the_role() -> None:
    """Each role is checked as a scenario of its own: the decode role's window needs a long enough output,
    the prefill role's window cannot be V2's."""
    short = _pd(lambda d: d["workload"].update(output_len=4))
    assert "engine.disaggregation.decode: workload.output_len (4) must exceed" in short
    assert "engine.disaggregation.prefill" not in short  # the prefill role's window holds no decode step
    v2 = _pd(lambda d: d["profile"].update(sglang_profiler="v2"))
    assert "engine.disaggregation.prefill: profile.stages: EXTEND is profiled with the classic profiler" in v2
    bad_tp = _pd(lambda d: d["engine"]["disaggregation"]["decode"].update(tp=4, ep=4))
    assert "engine.disaggregation.decode: engine.tp (4) exceeds the cluster's GPUs" in bad_tp
    assert "unknown key" in _pd(lambda d: d["engine"]["disaggregation"]["prefill"].update(speculative={}))


def test_a_pd_scenarios_roles_and_windows(tmp_path, capsys) -> None:
    """The roles' scenarios: each role's nodes, keys, disaggregation flags and window; `plan` prints both
    roles' commands and the router's."""
    from harness.cli import main
    from harness.pd_roles import profiled_roles, role_scenarios

    scenario, _ = load_scenario(str(PD_SCENARIO))
    roles = role_scenarios(scenario)
    prefill, decode = roles["prefill"], roles["decode"]
    assert (prefill.cluster.nodes, decode.cluster.nodes) == (1, 1)
    assert (prefill.engine.deepep_mode, decode.engine.deepep_mode) == ("normal", "low_latency")
    assert prefill.engine.extra_args[-6:] == ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend",
                                              "mooncake", "--disaggregation-bootstrap-port", "8998"]
    assert decode.engine.extra_args[-4:] == ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend",
                                             "mooncake"]
    assert (decode.engine.port, decode.engine.dist_init_port) == (scenario.engine.port + 100,
                                                                  scenario.engine.dist_init_port + 100)
    assert "FAKE_SGLANG_DECODE_TRACE" in decode.engine.env and "FAKE_SGLANG_DECODE_TRACE" not in prefill.engine.env
    assert (prefill.profile.stages, decode.profile.stages) == (["EXTEND"], ["DECODE"])
    assert decode.profile.sglang_profiler == "plain" and prefill.engine.disaggregation is None
    assert profiled_roles(scenario) == ("prefill", "decode")
    assert main(["plan", str(PD_SCENARIO)]) == 0
    out = capsys.readouterr().out
    assert out.index("# ===== prefill role") < out.index("# ===== decode role") < out.index("# router")
    assert "--pd-disaggregation --prefill http://{prefill_node0_ip}:30000 8998 --decode http://{decode_node0_ip}:30100" in out
