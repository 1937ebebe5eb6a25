"""`validate` refuses, in one line naming the file and the key, what used to fail only after placement or
after the ready timeout: a prefill chunk past DeepEP's dispatch budget given in a second spelling, a
budget of 0 or less, control characters in what becomes an argument, an environment value or a path,
a flag given twice, an extra_args flag against a scenario field, and flags the planned SGLang release
does not accept. The scenarios here are synthetic; the shipped ones must still validate."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.scenario import SCENARIOS_DIR

REPO = Path(__file__).resolve().parent.parent

# Synthetic: one GPU, one server, SGLang's defaults but for the keys named.
SYNTHETIC_ONE_GPU = """\
name: synthetic_one_gpu
cluster: {nodes: 1, gpus_per_node: 1}
engine:
  kind: sglang
  model_path: synthetic/moe
  tp: 1
  context_length: 4096
  extra_args: []
  env: {}
model: {name: synthetic-moe}
workload: {batch_size: 8, input_len: 64, output_len: 64}
analysis: {signature: generic}
"""

# Synthetic: DeepEP low-latency under DP attention over 8 groups; the dispatch budget is SGLang's 128
# tokens per rank, so the plan's prefill chunk is 128 x 8 = 1024.
SYNTHETIC_DEEPEP_LL = """\
name: synthetic_deepep_ll
cluster: {nodes: 1, gpus_per_node: 8}
engine:
  kind: sglang
  model_path: synthetic/moe
  tp: 8
  dp: 8
  ep: 8
  dp_attention: true
  moe_a2a_backend: deepep
  deepep_mode: low_latency
  max_running_requests: 72
  extra_args: []
  env: {}
model: {name: synthetic-moe}
workload: {batch_size: 64, input_len: 128, output_len: 64}
"""


def _validate(tmp_path, capsys, text: str, *options: str) -> tuple[int, str, str, Path]:
    path = tmp_path / "synthetic.yaml"
    path.write_text(text)
    status = main(["validate", str(path), *options])
    captured = capsys.readouterr()
    return status, captured.out, captured.err, path


def _refusal(tmp_path, capsys, text: str, *options: str) -> str:
    """The one line `validate` refuses the scenario with (asserted: exit 1, one line, naming the file)."""
    status, out, err, path = _validate(tmp_path, capsys, text, *options)
    lines = err.splitlines()
    assert status == 1 and not out and len(lines) == 1 and lines[0].startswith(f"invalid: {path}: "), err
    return lines[0]


def _with(text: str, engine_lines: str) -> str:
    """The synthetic scenario with its engine's `extra_args: []` line replaced by `engine_lines`."""
    assert "  extra_args: []\n" in text
    return text.replace("  extra_args: []\n", engine_lines.rstrip("\n") + "\n")


@pytest.mark.parametrize("engine_lines", [
    '  extra_args: [--chunked-prefill-size, "1024", --chunked-prefill-size, "65536"]',
    '  extra_args: ["--chunked-prefill-size=1024", "--chunked-prefill-size=65536"]',
    '  chunked_prefill_size: 1024\n  extra_args: ["--chunked-prefill-size=65536"]',
    '  chunked_prefill_size: 1024\n  extra_args: [--chunked-prefill-size, "65536"]',
], ids=["twice-in-extra-args", "twice-with-equals", "field-then-equals", "field-then-extra-args"])
def test_the_deepep_prefill_guard_sees_every_spelling(tmp_path, capsys, engine_lines):
    """Each of these passed: the guard read the field, or only the first extra_args spelling, while
    argparse keeps the last: 8192 tokens per DP group through a 128-token buffer ends the server."""
    line = _refusal(tmp_path, capsys, _with(SYNTHETIC_DEEPEP_LL, engine_lines))
    assert "engine.extra_args --chunked-prefill-size = 65536 (8192 per DP group" in line
    assert "DeepEP low-latency mode dispatches at most 128 tokens per rank" in line and "use at most 1024" in line


def test_no_chunking_is_named_as_such_under_deepep_low_latency(tmp_path, capsys):
    line = _refusal(tmp_path, capsys, _with(SYNTHETIC_DEEPEP_LL, '  extra_args: [--chunked-prefill-size, "-1"]'))
    assert "engine.extra_args --chunked-prefill-size = -1 (no chunking: whole prompts)" in line
    assert "dispatches at most 128 tokens per rank" in line


def test_a_chunk_that_leaves_a_dp_group_no_token_is_refused(tmp_path, capsys):
    """SGLang divides the chunk by dp: 4 tokens over 8 groups is 0 a group, which passed."""
    line = _refusal(tmp_path, capsys, _with(SYNTHETIC_DEEPEP_LL, "  chunked_prefill_size: 4\n  extra_args: []"))
    assert ("engine.chunked_prefill_size = 4 (0 per DP group: SGLang divides it by dp): each of the 8 DP groups "
            "would prefill no token per chunk; use at least 8") in line


@pytest.mark.parametrize("budget", ["0", "-128"])
def test_a_dispatch_budget_of_no_tokens_is_refused(tmp_path, capsys, budget):
    text = SYNTHETIC_DEEPEP_LL.replace("  env: {}", f'  env: {{SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK: "{budget}"}}')
    line = _refusal(tmp_path, capsys, text)
    assert (f"engine.env.SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK: '{budget}': the dispatch budget is a "
            "positive number of tokens per rank") in line
    ok = SYNTHETIC_DEEPEP_LL.replace("  env: {}", '  env: {SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK: "256"}')
    assert _validate(tmp_path, capsys, ok)[0] == 0


@pytest.mark.parametrize("value, says", [
    ("0", "engine.extra_args --chunked-prefill-size = 0: a prefill chunk is a positive number of tokens"),
    ("-128", "engine.extra_args --chunked-prefill-size = -128: a prefill chunk is a positive number of tokens"),
    ("abc", "engine.extra_args --chunked-prefill-size: 'abc' is not a whole number"),
])
def test_a_prefill_chunk_is_a_positive_number_of_tokens_or_sglangs_no_chunking(tmp_path, capsys, value, says):
    """Outside DeepEP nothing looked at the extra_args spelling; -1 is SGLang's own "no chunking"
    (server_args.py's help, every supported release) and stays allowed there."""
    line = _refusal(tmp_path, capsys, _with(SYNTHETIC_ONE_GPU, f'  extra_args: ["--chunked-prefill-size={value}"]'))
    assert says in line
    assert _validate(tmp_path, capsys, _with(SYNTHETIC_ONE_GPU, '  extra_args: [--chunked-prefill-size, "-1"]'))[0] == 0


@pytest.mark.parametrize("old, new, key", [
    ("model_path: synthetic/moe", 'model_path: "synthetic/mo\\0e"', "engine.model_path (line 5): control character "
     "U+0000 at character 13"),
    ("model_path: synthetic/moe", 'model_path: "synthetic/\\e[2Jmoe"', "engine.model_path (line 5): control character "
     "U+001B at character 11"),
    ("extra_args: []", 'extra_args: [--log-level, "info\\0"]', "engine.extra_args.1 (line 8): control character U+0000"),
    ("env: {}", 'env: {SYNTHETIC_VAR: "a\\nb"}', "engine.env.SYNTHETIC_VAR (line 9): control character U+000A"),
    ("signature: generic", 'signature: "generic\\0.yaml"', "analysis.signature (line 12): control character U+0000"),
], ids=["nul-in-model-path", "escape-in-model-path", "nul-in-extra-args", "newline-in-env-value", "nul-in-a-path"])
def test_control_characters_in_arguments_env_values_and_paths_are_refused(tmp_path, capsys, old, new, key):
    """A NUL passed validate and failed at exec, after placement; the refusal itself never echoes it."""
    line = _refusal(tmp_path, capsys, SYNTHETIC_ONE_GPU.replace(old, new))
    assert key in line and "\0" not in line and "\x1b" not in line


def test_a_pd_roles_own_arguments_are_held_to_the_same_rule(tmp_path, capsys):
    text = (REPO / "tests" / "scenarios" / "sglang_fake_pd.yaml").read_text()
    assert "    prefill:\n" in text
    line = _refusal(tmp_path, capsys, text.replace("    prefill:\n", '    prefill:\n      extra_args: ["x\\0"]\n', 1))
    assert "engine.disaggregation.prefill.extra_args.0" in line and "control character U+0000" in line


@pytest.mark.parametrize("extra_args, says", [
    ('[--port, "31000"]', "engine.extra_args: --port given twice (--port 30000 from engine.port, --port 31000 from "
     "engine.extra_args): SGLang keeps only the last, the harness plans with engine.port; give it once"),
    ('[--log-level, debug, "--log-level=info"]', "engine.extra_args: --log-level given twice (--log-level debug from "
     "engine.extra_args, --log-level info from engine.extra_args): SGLang keeps only the last; give it once"),
    ('[--tensor-parallel-size, "2"]', "--tp-size given twice (--tp-size 1 from engine.tp, --tensor-parallel-size 2 "
     "from engine.extra_args)"),
    ('[--context-length, "8192"]', "--context-length given twice (--context-length 4096 from engine.context_length, "
     "--context-length 8192 from engine.extra_args)"),
], ids=["port", "twice-in-extra-args", "another-spelling", "a-set-field"])
def test_a_flag_given_twice_is_refused_naming_both_places(tmp_path, capsys, extra_args, says):
    line = _refusal(tmp_path, capsys, _with(SYNTHETIC_ONE_GPU, f"  extra_args: {extra_args}"))
    assert says in line


@pytest.mark.parametrize("text, extra_args, options, says", [
    (SYNTHETIC_DEEPEP_LL, '[--dp-size, "4"]', (), "engine.extra_args: --dp-size 4 contradicts engine.dp (8)"),
    (SYNTHETIC_DEEPEP_LL, '[--dp-size, "4"]', ("--sglang-version", "0.5.17"),  # where engine.dp renders --dp-size
     "--dp-size given twice (--dp-size 8 from engine.dp_attention, --dp-size 4 from engine.extra_args)"),
    (SYNTHETIC_ONE_GPU, '[--pp-size, "2"]', (), "engine.extra_args: --pp-size 2 contradicts engine.pp (1)"),
    (SYNTHETIC_ONE_GPU, '[--nnodes, "2"]', (), "engine.extra_args: --nnodes 2 contradicts cluster.nodes (1)"),
    (SYNTHETIC_ONE_GPU, "[--enable-two-batch-overlap]", (),
     "engine.extra_args: --enable-two-batch-overlap contradicts engine.two_batch_overlap (False)"),
], ids=["dp-0.5.23", "dp-0.5.17", "pp", "nodes", "two-batch-overlap"])
def test_an_extra_args_flag_against_a_scenario_field_is_refused(tmp_path, capsys, text, extra_args, options, says):
    """The plan leaves these flags out at their defaults, so nothing saw the extra_args one: the server
    then ran another deployment than the one planned, its ranks, checks and trace names."""
    assert says in _refusal(tmp_path, capsys, _with(text, f"  extra_args: {extra_args}"), *options)


@pytest.mark.parametrize("extra_args, options, says", [
    ("[--enable-dp-attn]", (), "engine.extra_args: unknown flag --enable-dp-attn; did you mean --enable-dp-attention"),
    ("[--disable-decode-cuda-graph]", ("--sglang-version", "0.5.13.post1"),
     "engine.extra_args: unknown flag --disable-decode-cuda-graph"),
    ("[--disable-cuda-graph]", ("--sglang-version", "0.5.17"), "engine.extra_args: deprecated flag --disable-cuda-graph"),
    ("[--moe-a2a-backend, deep_ep]", (), "engine.extra_args: --moe-a2a-backend 'deep_ep' is not one of"),
], ids=["unknown", "newer-than-the-release", "deprecated", "not-a-choice"])
def test_flags_the_planned_release_refuses_are_refused(tmp_path, capsys, extra_args, options, says):
    """Each node's own SGLang refused these, after placement."""
    line = _refusal(tmp_path, capsys, _with(SYNTHETIC_ONE_GPU, f"  extra_args: {extra_args}"), *options)
    release = options[1] if options else "0.5.23"
    assert says in line and f"(SGLang {release}; --sglang-version picks the release)" in line


def test_a_flag_known_to_the_planned_release_passes_and_one_without_a_table_is_said_unchecked(tmp_path, capsys):
    text = _with(SYNTHETIC_ONE_GPU, "  extra_args: [--disable-decode-cuda-graph]")
    status, out, err, path = _validate(tmp_path, capsys, text)
    assert status == 0 and out.startswith(f"ok: {path}") and not err, err
    status, out, err, path = _validate(tmp_path, capsys, _with(SYNTHETIC_ONE_GPU, "  extra_args: [--no-such-flag]"),
                                       "--sglang-version", "0.5.24")
    assert status == 0 and out.startswith(f"ok: {path}"), err
    assert err == (f"note: {path}: launch flags not checked: launch_flags.yaml has no table for SGLang 0.5.24 (a release "
                   "newer than harness/sglang/versions.yaml knows); each node's own SGLang judges them before launch\n")


def test_a_schema_refusal_is_one_line_per_problem_each_naming_the_file(tmp_path, capsys):
    status, out, err, path = _validate(tmp_path, capsys, SYNTHETIC_ONE_GPU.replace("  tp: 1\n", "  tp: 1\n  colour: red\n"
                                                                                   "  shade: dark\n"))
    assert status == 1 and err.splitlines() == [f"invalid: {path}: engine.colour (line 7): unknown key",
                                                f"invalid: {path}: engine.shade (line 8): unknown key"], err


@pytest.mark.parametrize("path", sorted(SCENARIOS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_still_validates(path, capsys):
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"ok: {path}") and not captured.err, captured.err


def test_the_shipped_flag_tables_are_what_each_wheel_declares():
    """launch_flags.yaml against tests/data/sglang_releases/ (extract_release.py's reading of each wheel):
    the same flags, value arity, choices and deprecations, for every release versions.yaml lists."""
    from harness.sglang.launch_flags import release_flag_table
    from harness.sglang.version import known_releases

    for version in known_releases():
        table = release_flag_table(version)
        assert table is not None, f"no table for SGLang {version}: run python -m harness.sglang.launch_flags --write"
        wheel = json.loads((REPO / "tests" / "data" / "sglang_releases" / f"{version}.json").read_text())["flags"]
        assert set(table.flags) == set(wheel), version
        for name, spec in table.flags.items():
            want = wheel[name]
            assert (spec.takes_value, spec.multiple, spec.deprecated) == \
                (want["takes_value"], want["multiple"], want["deprecated"]), (version, name)
            assert (sorted(spec.choices) if spec.choices is not None else None) == want["choices"], (version, name)


def test_the_shipped_flag_tables_keep_each_flags_other_spellings(sglang_sources):
    """Aliases, optional values and SGLang's advice for deprecated flags, which the release tables do
    not record: against the wheels' own source (the wheel cache)."""
    from harness.sglang.launch_flags import release_flag_table
    from harness.sglang.wheel_source import flag_table

    for version in sglang_sources:
        ours, wheel = release_flag_table(version), flag_table(version)
        for name, spec in wheel.flags.items():
            mine = ours.flags[name]
            assert set(mine.names) == {n for n, s in wheel.flags.items() if s is spec}, (version, name)
            assert (mine.value_optional, mine.replacement) == (spec.value_optional, spec.replacement), (version, name)
