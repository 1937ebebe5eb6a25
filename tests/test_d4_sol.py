"""SOL columns of the D4 table on the SYNTHETIC DeepSeek-V3 fixture, through the API and the CLI."""
import argparse
import csv
import json

import pytest

from analysis.pipeline import AnalysisOptions, analyze, load_column
from analysis.tables.d4 import render_markdown, table_rows
from analysis.attribution.signature import load_signature
from analysis.sol.estimate import Deployment, SolSettings, sol_for_d4_rows
from harness.commands import analyze as analyze_command
from harness.commands import compare as compare_command
from synthetic_deepseek import write_rank_trace

SIGNATURE = "sglang-sm90-deepep-ll"
SOL_ARGS = ["--hardware", "h800", "--batch-per-rank", "128", "--kv-len", "4096"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("sol") / "run-TP-0-DECODE.trace.json.gz"
    write_rank_trace(path, load_signature(SIGNATURE), steps=1)
    return path


def _cli(module, argv):
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def _md_rows(md: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines() if line.startswith("|")]


def test_sol_columns_equal_sol_for_d4_rows(trace):
    settings = SolSettings("h800", Deployment(batch_per_rank=128, kv_len=4096))
    plain = analyze([str(trace)], signature=SIGNATURE, model="deepseek-v3")
    with_sol = analyze([str(trace)], signature=SIGNATURE, model="deepseek-v3",
                       options=AnalysisOptions(sol=settings)).d4
    expected = sol_for_d4_rows(plain.d4.rows, settings.deployment, "h800")
    assert with_sol.sol == settings
    covered = 0
    for row, exp in zip(with_sol.rows, expected, strict=True):
        assert (row.group, row.module, row.kernel, row.value_us) == (exp.group, exp.module, exp.kernel, exp.value_us)
        assert (row.sol_us, row.sol_pct, row.bound, row.sol_term) == (exp.sol_us, exp.sol_pct, exp.bound, exp.term)
        covered += row.sol_us is not None
    assert covered >= 20  # the module map covers most rows of this signature
    assert any(r.sol_us is None for r in with_sol.rows)  # quantisation and top-k rows have no term
    # The rendered table: three more columns, filled exactly where a SOL term exists.
    rows = table_rows([with_sol])
    assert rows[0][3:] == ["run", "SOL us", "% of SOL", "bound"]
    by_key = {(r.group, r.module, r.kernel): r for r in with_sol.rows}
    checked = 0
    for cells in rows[1:]:
        key = (cells[0], cells[1], cells[2])
        if key in by_key:
            r = by_key[key]
            if r.sol_us is None:
                assert cells[4:] == ["", "", ""], cells
            else:
                pct = "" if r.sol_pct is None else f"{r.sol_pct:.0f}%"  # no % where SOL is 0 (bound none)
                assert (r.sol_pct is None) == (r.bound == "none"), r
                assert cells[4:] == [f"{r.sol_us:.2f}", pct, r.bound], cells
            checked += 1
        else:  # end-to-end, sums, before/after layers
            assert cells[4:] == ["", "", ""], cells
    assert checked == len(with_sol.rows)
    zh = table_rows([with_sol], lang="zh")[0]
    assert zh[4:] == ["SOL耗时(us)", "SOL占比", "瓶颈"]
    # Without deployment parameters the table keeps its four columns.
    assert len(table_rows([plain.d4])[0]) == 4 and plain.d4.rows[0].sol_us is None


def test_analyze_and_compare_cli_write_the_columns(trace, tmp_path, capsys):
    out = tmp_path / "an"
    rc = _cli(analyze_command, ["analyze", str(trace), "--signature", SIGNATURE, "--model", "deepseek-v3",
                                "--name", "h800", "--out", str(out), *SOL_ARGS, "--dp", "16", "--ep", "16"])
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    header = _md_rows(printed)[0]
    assert header[3:] == ["h800", "SOL us", "% of SOL", "bound"]
    assert "SOL columns (h800): deepseek-v3 on h800: batch 128 per rank, KV length 4096, tp 1, dp 16, ep 16" in printed
    saved = load_column(out)
    expected = sol_for_d4_rows(saved.rows, Deployment(batch_per_rank=128, kv_len=4096, dp=16, ep=16), "h800")
    assert [r.sol_us for r in saved.rows] == [e.sol_us for e in expected]
    assert json.loads((out / "analysis.json").read_text())["d4"]["sol"]["deployment"]["ep"] == 16
    with open(out / "d4.csv", newline="") as fh:
        assert next(csv.reader(fh))[3:] == ["h800", "SOL us", "% of SOL", "bound"]
    # compare: a saved column keeps its SOL; a second, trace-analysed column gets the command's SOL options.
    rc = _cli(compare_command, ["compare", f"saved={out}", f"b128={trace}", "--signature", SIGNATURE,
                                "--model", "deepseek-v3", *SOL_ARGS])
    assert rc == 0, capsys.readouterr().err
    header = _md_rows(capsys.readouterr().out)[0]
    assert header[3:] == ["saved", "SOL us (saved)", "% of SOL (saved)", "bound (saved)",
                          "b128", "SOL us (b128)", "% of SOL (b128)", "bound (b128)"]


def test_half_given_sol_options_are_clear_errors(trace, capsys):
    assert _cli(analyze_command, ["analyze", str(trace), "--hardware", "h800"]) == 2
    assert "--batch-per-rank and --kv-len" in capsys.readouterr().err
    assert _cli(analyze_command, ["analyze", str(trace), "--batch-per-rank", "8", "--kv-len", "100"]) == 2
    assert "need --hardware" in capsys.readouterr().err
    assert _cli(analyze_command, ["analyze", str(trace), "--model", "llama-8b", *SOL_ARGS]) == 2
    assert "SOL columns need model shapes" in capsys.readouterr().err


def test_markdown_without_sol_is_unchanged(trace):
    d4 = analyze([str(trace)], signature=SIGNATURE, model="deepseek-v3").d4
    md = render_markdown([d4])
    assert "SOL" not in md


def test_scenarios_give_sol_settings_where_they_say_enough():
    from harness.scenario import load_scenario, parse_scenario, scenario_to_yaml
    from harness.scenario_sol import sol_settings_for

    h800, why = sol_settings_for(load_scenario("h800_deepep")[0])
    assert why == "" and h800.hardware == "h800" and h800.model == "deepseek-v3"
    # 2048 requests over 16 DP-attention ranks; KV = 4096 input + 3 warm-up steps; tp 16 / dp 16 = 1
    assert h800.deployment == Deployment(batch_per_rank=128, kv_len=4099, tp=1, dp=16, ep=16)
    mtp, _ = sol_settings_for(load_scenario("b200_mtp")[0])
    assert (mtp.hardware, mtp.deployment.batch_per_rank, mtp.deployment.mtp_draft_tokens) == ("b200", 64, 3)
    none, why = sol_settings_for(load_scenario("demo")[0])
    assert none is None and "deepseek-v3-tiny" in why
    text = scenario_to_yaml(load_scenario("h800_deepep")[0])
    fp8_kv = parse_scenario(text.replace("  extra_args: []", "  extra_args: [--kv-cache-dtype, fp8_e4m3]"), "t.yaml")
    assert sol_settings_for(fp8_kv)[0].deployment.kv_dtype == "fp8"
    unknown_gpu = parse_scenario(text.replace("gpu_type: H800", "gpu_type: A100"), "t.yaml")
    settings, why = sol_settings_for(unknown_gpu)
    assert settings is None and "A100" in why


def test_sglang_driver_combine_adds_the_scenario_sol(trace):
    """harness/node/node_analysis.combine over node parts gives the columns analysis.api gives."""
    from harness.scenario import load_scenario
    from harness.scenario_sol import sol_settings_for
    from harness.node.node_analysis import analysis_options, combine

    scenario = load_scenario("h800_deepep")[0]
    settings, why = sol_settings_for(scenario)
    assert why == ""
    options = analysis_options(scenario, "run", jobs=1) | {"signature": SIGNATURE}
    node = analyze([str(trace)], signature=SIGNATURE, model="deepseek-v3", options=AnalysisOptions(run="run", jobs=1))
    parts = [{"kernel_rows": node.kernel_rows, "step_rows": node.step_rows, "problems": node.problems}]
    combined = combine(parts, options, sol=settings).d4
    direct = analyze([str(trace)], signature=SIGNATURE, model="deepseek-v3",
                     options=AnalysisOptions(run="run", sol=settings, jobs=1)).d4
    assert combined.sol == settings and render_markdown([combined]) == render_markdown([direct])
    assert sum(r.sol_us is not None for r in combined.rows) >= 20
    assert combine(parts, options).d4.sol is None  # no settings: no columns


def test_an_embedded_scenario_gets_sol_settings_only_where_its_preset_has_the_models_shapes():
    """demo_gpu runs the wide-gpu preset as deepseek-v3-wide4, whose SOL shapes it has; told to take
    deepseek-v3's (61 layers, 256 experts), the SOL columns are refused, naming the keys that differ."""
    from harness.scenario import load_scenario, parse_scenario, scenario_to_yaml
    from harness.scenario_sol import sol_settings_for

    settings, why = sol_settings_for(load_scenario("demo_gpu")[0])
    assert why == "" and settings.model == "deepseek-v3-wide4" and settings.deployment.mla_form == "expanded"
    text = scenario_to_yaml(load_scenario("demo_gpu")[0])
    assert "\n  model: null\n" in text  # the analysis section's model: the scenario's own
    other = parse_scenario(text.replace("\n  model: null\n", "\n  model: deepseek-v3\n"), "t.yaml")
    settings, why = sol_settings_for(other)
    assert settings is None and "shapes differ" in why and "num_hidden_layers 4 != 61" in why, why
