"""Every read is bounded: a limit on an input's size or on what is held while searching it, pipes
streamed, FIFOs without a writer and devices refused with a message, never a hang or a traceback.

Limits are lowered with monkeypatch where a real one would need a file of hundreds of MB; the
module attribute patched is the one the reader uses, so each test holds the reader to its limit."""
from __future__ import annotations

import gzip
import json
import os
import random
import threading
from pathlib import Path

import pytest

from harness.cli import main

DATA = Path(__file__).parent / "data"
SGLANG = DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
CPU_DEMO = DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz"
NCU_H100 = DATA / "ncu_h100_demo_gpu_raw.csv"


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_the_search_for_an_event_boundary_holds_at_most_its_limit(tmp_path, monkeypatch, capsys):
    """An events array padded with whitespace: no boundary for megabytes; the loader used to keep
    accumulating the whole padding (4.4 GB of memory for a 2.6 MB .json.gz)."""
    import analysis.ingest.trace_loader as loader

    monkeypatch.setattr(loader, "EVENT_SEARCH_LIMIT_BYTES", 4 * 1024 * 1024, raising=False)
    doc = json.loads(gzip.decompress(SGLANG.read_bytes()))
    events = doc.pop("traceEvents")
    padded = tmp_path / "pad-TP-0-DECODE.trace.json.gz"
    with gzip.open(padded, "wb", compresslevel=1) as out:
        out.write(json.dumps(doc)[:-1].encode() + b', "traceEvents": [' + json.dumps(events[0]).encode() + b",")
        rng = random.Random(7)  # mixed whitespace: inflated block by block, not 64 MB from one read
        out.write(bytes(rng.choice(b" \t\r\n") for _ in range(12 * 1024 * 1024)))
        out.write(json.dumps(events[1:]).encode()[1:] + b"}")
    assert main(["analyze", str(padded)]) == 2
    assert "event 0 (or the space after it) does not end within 4 MB" in _one_error_line(capsys)


@pytest.mark.timeout(60)
def test_a_pipe_is_streamed(capsys):
    """`analyze <(zcat t.gz)`: the loader used to seek back after reading the gzip magic (a traceback)."""
    read_end, write_end = os.pipe()
    data = SGLANG.read_bytes()

    def feed():
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        assert main(["analyze", f"/dev/fd/{read_end}", "--layers", "4"]) == 0
    finally:
        os.close(read_end)
        writer.join()
    assert "| moe | sum |" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_a_fifo_without_a_writer_is_refused_not_waited_for(tmp_path, capsys):
    fifo = tmp_path / "fifo-TP-0-DECODE.trace.json"
    os.mkfifo(fifo)
    assert main(["analyze", str(fifo)]) == 2
    assert f"{fifo}: empty file" in _one_error_line(capsys)
    assert main(["analyze", str(CPU_DEMO), "--expert-load", str(fifo)]) == 2
    assert f"{fifo}: cannot read the expert load: empty" in _one_error_line(capsys)


@pytest.mark.parametrize("argv", [["analyze", "/dev/zero"], ["analyze", str(CPU_DEMO), "--expert-load", "/dev/zero"],
                                  ["report", str(CPU_DEMO), "--ncu", "/dev/zero", "--hardware", "h100"]])
def test_a_device_is_never_read(argv, tmp_path, monkeypatch, capsys):
    """/dev/zero as --expert-load or --ncu was read whole (6 and 11 GB in seconds)."""
    from analysis.io.input_files import read_input

    with pytest.raises(Exception, match="not a regular file or a pipe"):
        read_input("/dev/zero", 1024)
    monkeypatch.chdir(tmp_path)  # report's default output folder
    assert main(argv) == 2
    assert "/dev/zero: " in (line := _one_error_line(capsys)) and "not a regular file or a pipe" in line


def test_an_expert_load_file_over_its_limit_is_refused(tmp_path, monkeypatch, capsys):
    import analysis.ingest.expert_load as expert_load

    monkeypatch.setattr(expert_load, "CONFIG_LIMIT_BYTES", 1024, raising=False)
    big = tmp_path / "expert_load.json"
    layers = [{"layer": 1, "tokens_per_expert": [7] * 2000}]
    big.write_text(json.dumps({"format": expert_load.FORMAT, "layers": layers}))
    assert main(["analyze", str(CPU_DEMO), "--expert-load", str(big)]) == 2
    assert "more than the 1024 bytes this reads" in _one_error_line(capsys)


def test_an_ncu_export_over_its_limit_is_refused(tmp_path, monkeypatch, capsys):
    import analysis.report.ncu as ncu

    monkeypatch.setattr(ncu, "DOCUMENT_LIMIT_BYTES", 4096, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(CPU_DEMO), "--ncu", str(NCU_H100), "--hardware", "h100"]) == 2
    assert f"ncu export {NCU_H100}" in _one_error_line(capsys)


def _ncu_rows(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_an_ncu_export_with_an_unknown_unit_is_an_error_not_a_factor_of_one(tmp_path, capsys):
    lines = _ncu_rows(NCU_H100)
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    units = lines[header + 1].split('","')
    column = lines[header].split('","').index("gpu__time_duration.sum")
    assert units[column] == "ns"
    units[column] = "fortnight"
    lines[header + 1] = '","'.join(units)
    bad = tmp_path / "ncu.csv"
    bad.write_text("\n".join(lines) + "\n")
    out_dir = tmp_path / "out"
    assert main(["report", str(CPU_DEMO), "--ncu", str(bad), "--hardware", "h100", "--out", str(out_dir)]) == 2
    assert "column gpu__time_duration.sum: unknown unit 'fortnight'" in _one_error_line(capsys)


def test_an_ncu_export_without_its_units_row_is_an_error(tmp_path, capsys):
    lines = _ncu_rows(NCU_H100)
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    del lines[header + 1]  # the first kernel's row now sits where the units belong: its ns read as us
    bad = tmp_path / "ncu.csv"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["report", str(CPU_DEMO), "--ncu", str(bad), "--hardware", "h100", "--out", str(tmp_path / "o")]) == 2
    assert "no units row under the header" in _one_error_line(capsys)


@pytest.mark.parametrize("text, says", [
    (b'name: s\ndescription: "\xff"\ngeneric: true\nfamilies: [{family: f, group: g, match: f}]\n',
     "not UTF-8 text: byte 22 (line 2)"),
    (b"name: s\ndescription: d\ngeneric: true\nx: " + b"5" * 5000 + b"\nfamilies: [{family: f, group: g, match: f}]\n",
     "a number with more than 4300 digits (line 4)"),
])
def test_a_signature_that_cannot_be_read_is_one_line(tmp_path, capsys, text, says):
    sig = tmp_path / "sig.yaml"
    sig.write_bytes(text)
    assert main(["analyze", str(CPU_DEMO), "--signature", str(sig)]) == 2
    assert f"signature {sig}: " in (line := _one_error_line(capsys)) and says in line


@pytest.mark.parametrize("tail, says", [
    (b"model: {name: \"\xff\"}\n", "not UTF-8 text: byte 48 (line 3)"),
    (b"model: {name: d}\nworkload: {batch_size: " + b"5" * 5000 + b"}\n", "a number with more than 4300 digits (line 4)"),
    (b"model: {name: d}\ndescription: " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested too deeply"),
])
def test_a_scenario_that_cannot_be_read_is_one_verdict(tmp_path, capsys, tail, says):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: x\nengine: {kind: embedded}\n" + tail)
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(path) in err and says in err


def test_yaml_merge_keys_are_valid_yaml_in_a_scenario(tmp_path, capsys):
    path = tmp_path / "merge.yaml"
    path.write_text("name: m\nengine: {kind: embedded}\nmodel: {name: demo}\n"
                    "workload:\n  <<: {batch_size: 2, input_len: 8, output_len: 40}\n  output_len: 41\n")
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    from harness.scenario import load_scenario

    workload = load_scenario(str(path))[0].workload
    assert (workload.batch_size, workload.output_len) == (2, 41)  # the mapping's own key overrides the merge
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: m\nengine: {kind: embedded}\nmodel: {name: demo}\nmodel: {name: other}\n")
    assert main(["validate", str(twice)]) == 1 and "given twice" in capsys.readouterr().err


def test_json_nested_1000_deep_is_one_line(tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["analyze", str(CPU_DEMO), "--out", str(saved)]) == 0
    capsys.readouterr()
    (saved / "analysis.json").write_text('{"run": ' + "[" * 1000 + "]" * 1000 + "}")
    (saved / ".moe-harness-analyze.json").unlink()  # a folder no command vouches for: its reader meets the nesting
    assert main(["report", str(saved), "--out", str(tmp_path / "rep")]) == 2
    assert "analysis.json: unreadable" in _one_error_line(capsys)
    assert main(["compare", f"a={saved}"]) == 2
    assert "analysis.json: unreadable analysis file" in _one_error_line(capsys)


def test_a_table_cut_mid_row_is_an_error_naming_its_line(tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["analyze", str(CPU_DEMO), "--out", str(saved)]) == 0
    capsys.readouterr()
    detail = saved / "d4_detail.csv"
    text = detail.read_text()
    detail.write_text(text[: text.index("\n", text.index("\n") + 1) + 12])  # the second row cut after 12 characters
    (saved / ".moe-harness-analyze.json").unlink()  # no record to compare with: the reader finds the cut row
    assert main(["report", str(saved), "--out", str(tmp_path / "rep")]) == 2
    assert "d4_detail.csv: line 3: not the 9 fields of the header" in _one_error_line(capsys)
