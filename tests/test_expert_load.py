"""Expert load: SGLang's expert-distribution dump -> expert_load.json -> the D4 table, and the fake
server's recorder endpoints as SGLang's releases answer them (srt/entrypoints/http_server.py,
srt/eplb/expert_distribution.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from analysis.errors import AnalysisError
from analysis.ingest.expert_load import FORMAT, load_expert_load
from harness.cli import main as cli_main
from analysis.ingest.expert_load import expert_load_doc
from harness.sglang.expert_load import ExpertRecordError, logical_count, placement_known
from tests.ports import free_port_run

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fake_sglang" / "server.py"
EP_TRACES = sorted((REPO / "tests" / "data" / "accuracy" / "h200x2").glob("dsv3ep-h200x2-e64k8-bs8-eager-TP-*.json.gz"))


def _doc(layers: list[dict]) -> dict:
    return {"format": FORMAT, "source": "test", "mode": "stat", "forward_passes": 2, "ep_size": 2, "layers": layers}


def test_busiest_expert_against_the_mean_per_moe_layer(tmp_path):
    path = tmp_path / "expert_load.json"
    path.write_text(json.dumps(_doc([
        {"layer": 0, "tokens_per_expert": [0, 0, 0, 0], "tokens_per_rank": [0, 0]},  # dense: left out
        {"layer": 1, "tokens_per_expert": [10, 2, 2, 2], "tokens_per_rank": [12, 4]},
        {"layer": 2, "tokens_per_expert": [4, 4, 4, 4]},
    ])))
    load = load_expert_load(path)
    assert [(r.layer, r.max_tokens, r.busiest_expert, r.mean_tokens, r.imbalance, r.rank_tokens) for r in load.layers] == [
        (1, 10, 0, 4.0, 2.5, [12, 4]), (2, 4, 0, 4.0, 1.0, [])]


@pytest.mark.parametrize("content,message", [
    ("{not json", "not an expert load file"),
    (json.dumps({"format": "other", "layers": []}), "expert load format 'other'"),
    (json.dumps(_doc([{"layer": 1, "tokens_per_expert": [1, -1]}])), "layer 1: negative token count"),
    (json.dumps(_doc([{"layer": 3, "tokens_per_expert": [1, 2], "tokens_per_rank": [1, 1]}])),
     "layer 3: tokens per rank sum to 2, tokens per expert to 3"),
])
def test_a_bad_expert_load_file_is_named(tmp_path, content, message):
    path = tmp_path / "expert_load.json"
    path.write_text(content)
    with pytest.raises(AnalysisError, match=f"{path}: .*{message}" if "format" not in message else message):
        load_expert_load(path)


def test_dump_to_json_with_and_without_a_known_placement(tmp_path):
    counts = torch.zeros((3, 2, 8), dtype=torch.int32)
    counts[0, 1, 0] = 5
    counts[2, 1, 7] = 2
    counts[1, 1, 3] = 1
    dump = tmp_path / "expert_distribution_recorder_1.pt"
    torch.save({"rank": 0, "logical_count": counts, "average_utilization_rate_over_window": None}, str(dump))
    read = logical_count(dump)
    doc = expert_load_doc(read, 2, placement_known(()), source="t")
    assert doc["forward_passes"] == 3
    assert doc["layers"][1]["tokens_per_expert"] == [5, 0, 0, 1, 0, 0, 0, 2]
    assert doc["layers"][1]["tokens_per_rank"] == [6, 2]  # experts 0-3 on rank 0, 4-7 on rank 1
    # EPLB or redundant experts move experts off the default placement: no per-rank split
    assert expert_load_doc(read, 2, placement_known(("--enable-eplb",)), source="t")["layers"][1]["tokens_per_rank"] == []
    assert expert_load_doc(read, 3, placement_known(()), source="t")["layers"][1]["tokens_per_rank"] == []
    path = tmp_path / "expert_load.json"
    path.write_text(json.dumps(doc))
    assert load_expert_load(path).layers[0].rank_tokens == [6, 2]
    bad = tmp_path / "bad.pt"
    torch.save({"rank": 0}, str(bad))
    with pytest.raises(ExpertRecordError, match="bad.pt: not an expert-distribution dump in stat mode"):
        logical_count(bad)


def test_analyze_cli_shows_the_expert_load_and_refuses_a_bad_file(tmp_path, capsys):
    path = tmp_path / "expert_load.json"
    tokens = [0] * 64
    tokens[5] = 90
    tokens[6] = 38
    path.write_text(json.dumps(_doc([{"layer": 2, "tokens_per_expert": tokens, "tokens_per_rank": [128, 0]}])))
    assert cli_main(["analyze", *map(str, EP_TRACES), "--expert-load", str(path), "--jobs", "1",
                     "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "| expert load | layer 2 | busiest / mean tokens | 90 / 2.0 (45.00x) |" in out
    # the per-layer section puts the dispatch / combine split beside the expert load of that layer
    line = next(l for l in out.splitlines() if l.startswith("| 2 | ") and "128 / 0" in l)
    assert line.count("TP1-EP1") == 2  # last rank at the dispatch and the combine
    (tmp_path / "bad.json").write_text("[]")
    assert cli_main(["analyze", *map(str, EP_TRACES), "--expert-load", str(tmp_path / "bad.json")]) == 2
    assert "--expert-load: " in capsys.readouterr().err


def _request(url: str, method: str) -> tuple[int, str]:
    req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _Fake:
    def __init__(self, tmp_path: Path, *flags: str):
        self.port = free_port_run(1)
        self.log = tmp_path / f"fake-{self.port}.log"
        env = dict(os.environ, SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=str(tmp_path / "dumps"), FAKE_SGLANG_STEP_MS="5",
                   FAKE_SGLANG_STARTUP_S="0")
        self.proc = subprocess.Popen([sys.executable, str(FAKE), "--port", str(self.port), *flags],
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                if _request(self.url("/health"), "GET")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and self.proc.poll() is None, self.log.read_text()
            time.sleep(0.1)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_fake_recorder_answers_as_sglang_does(tmp_path):
    fake = _Fake(tmp_path, "--expert-distribution-recorder-mode", "stat")
    try:
        assert _request(fake.url("/stop_expert_distribution_record"), "POST") == (
            200, "Stop recording the expert distribution.\n")  # not recording: a warning only
        assert _request(fake.url("/start_expert_distribution_record"), "GET") == (
            200, "Start recording the expert distribution.\n")
        # a request decoded while recording
        body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}, "stream": False}).encode()
        urllib.request.urlopen(urllib.request.Request(fake.url("/generate"), data=body, method="POST"), timeout=10).read()
        assert _request(fake.url("/stop_expert_distribution_record"), "POST")[0] == 200
        assert _request(fake.url("/dump_expert_distribution_record"), "POST") == (200, "Dump expert distribution record.\n")
        dumps = list((tmp_path / "dumps").glob("expert_distribution_recorder_*.pt"))
        assert len(dumps) == 1
        data = torch.load(str(dumps[0]), weights_only=True)
        # the default buffer once a mode is set: 1000 passes, circular, rows never written stay zero
        assert set(data) == {"rank", "logical_count", "average_utilization_rate_over_window"}
        assert tuple(data["logical_count"].shape) == (1000, 4, 256) and data["logical_count"].dtype == torch.int32
        assert int(data["logical_count"][:, 0].sum()) == 0 and int(data["logical_count"][:, 1:].sum()) > 0
    finally:
        fake.stop()


def test_fake_recorder_without_a_mode_kills_the_server(tmp_path):
    fake = _Fake(tmp_path)
    try:
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _request(fake.url("/start_expert_distribution_record"), "POST")
        assert fake.proc.wait(10) == 1
        assert "Please set ServerArgs.expert_distribution_recorder_mode" in fake.log.read_text()
    finally:
        fake.stop()
