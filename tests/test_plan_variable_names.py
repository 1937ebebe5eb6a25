"""Plans are safe to paste: engine.env and engine.passthrough_env names are variable names, refused by
`validate`, the schema and the plan otherwise (a name was an `export` line's command when pasted)."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.sglang.plan import DeploymentSpec, PlanError, build_plan

SCENARIO = """name: x
cluster: {{nodes: 1, gpus_per_node: 1}}
engine:
  kind: sglang
  model_path: m
  {key}: {value}
model: {{name: m}}
workload: {{output_len: 64}}
"""
HOSTILE = "X=1; touch /tmp/pwned-by-plan; Y"


@pytest.mark.parametrize("key, value", [("env", f'{{"{HOSTILE}": v}}'), ("passthrough_env", f'["{HOSTILE}"]'),
                                        ("env", '{"1ST": v}'), ("passthrough_env", '["HF TOKEN"]')])
def test_validate_and_plan_refuse_a_name_that_is_no_variable_naming_the_key(tmp_path, capsys, key, value):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(key=key, value=value))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"engine.{key} (line 6): " in err and "not a variable name" in err
    assert main(["plan", str(path)]) == 2
    captured = capsys.readouterr()
    assert "export" not in captured.out and f"engine.{key} (line 6)" in captured.err


@pytest.mark.parametrize("field", ["env", "passthrough_env"])
def test_the_plan_refuses_a_name_that_is_no_variable(field):
    value = {HOSTILE: "v"} if field == "env" else (HOSTILE,)
    with pytest.raises(PlanError, match=rf"engine\.{field}: .*not a variable name"):
        build_plan(DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1, **{field: value}), environ={HOSTILE: "x"})
