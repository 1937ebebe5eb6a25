"""Hostile inputs by family (sizes, depths, encodings, duplicates, races, secrets), each one case: the files it
makes, the command it runs and what must come of it.

Synthetic and seeded: the same seed gives the same cases. The inputs are made from the real bundled
data (a one-GPU SGLang decode trace and the Ray run directory recorded with it) with one hostile change
each, so what must come out is known without the analysis' own rules: a refusal (one error line naming
the file), or the table the untouched input gives.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
RUN_DIR = DATA / "sglang-real" / "ray-run" / "sglang_dsv3_4l_1gpu-20261124-204402"
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "b200_mtp.yaml"
KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
GIB = 1 << 30


@dataclass
class Case:
    name: str
    argv: list[str]
    expect: str  # "refused": exit 1 or 2, one error line; "same": exit 0 and the untouched input's D4
    # table; "ok": exit 0
    says: str = ""  # a piece of the refusal
    keep: list[Path] = field(default_factory=list)  # files the command must leave as they were
    in_child: object = None  # run in the command's process first (a lower bound for the case)
    during: object = None  # started in a thread beside the command (a writer, a racer)
    wall_limit_s: float = 60.0
    hidden: list[str] = field(default_factory=list)  # secrets: in no output of the command
    shown: list[str] = field(default_factory=list)  # what is not secret: shown as it is


def trace_text() -> str:
    return gzip.decompress(TRACE.read_bytes()).decode()


def _kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]


def _analyze(path: Path | str, out: Path) -> list[str]:
    return ["analyze", str(path), "--jobs", "1", "--out", str(out)]


def _run_dir(folder: Path) -> Path:
    run = folder / RUN_DIR.name
    shutil.copytree(RUN_DIR, run)
    return run


def _sparse(path: Path, size_bytes: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size_bytes)
    return path


def _gzip_of_spaces(inflated_bytes: int, head: bytes = b"", tail: bytes = b"") -> bytes:
    """gzip whose content is head, then spaces, then tail: kilobytes that inflate to inflated_bytes."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(head)]
    block = b" " * (1 << 20)
    for _ in range(inflated_bytes >> 20):
        parts.append(packer.compress(block))
    parts += [packer.compress(tail), packer.flush()]
    return b"".join(parts)


# --- sizes ---------------------------------------------------------------------------------------

def sizes(rng: random.Random, folder: Path) -> list[Case]:
    cases = []
    bomb = folder / "bomb-TP-0-DECODE.trace.json.gz"  # one event boundary 96 MiB away: past the 64 MB
    bomb.write_bytes(_gzip_of_spaces(96 << 20, b'{"traceEvents": [', b"]}"))
    cases.append(Case("trace gzip bomb", _analyze(bomb, folder / "o1"), "refused", str(bomb)))
    cases.append(Case("load records from /dev/zero",
                      _analyze(TRACE, folder / "o2") + ["--load-records", "/dev/zero"], "refused", "/dev/zero"))
    big = _sparse(folder / "requests.jsonl", GIB + rng.randrange(1, 1 << 20))
    cases.append(Case("load records over 1 GiB", _analyze(TRACE, folder / "o3") + ["--load-records", str(big)],
                      "refused", str(big)))
    run = _run_dir(folder / "r1")
    _sparse(run / "manifest.json", (16 << 20) + rng.randrange(1, 1 << 30))
    cases.append(Case("manifest over its bound", _analyze(run, folder / "o4"), "refused", "manifest.json"))
    run = _run_dir(folder / "r2")
    _sparse(run / "load" / "requests.jsonl", GIB + rng.randrange(1, 1 << 30))
    cases.append(Case("a run's load records over 1 GiB", ["metrics", str(run)], "refused", "requests.jsonl"))
    scenario = _sparse(folder / "big.yaml", (16 << 20) + rng.randrange(1, 1 << 20))
    cases.append(Case("scenario over 16 MiB", ["validate", str(scenario)], "refused", str(scenario)))
    run = _run_dir(folder / "r3")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["started_at"] = "9" * rng.choice([4301, 5000, 20000])
    (run / "manifest.json").write_text(json.dumps(manifest)[:-1] + ', "n": ' + "7" * 5000 + "}")
    cases.append(Case("a number of thousands of digits in a manifest", _analyze(run, folder / "o5"), "refused",
                      "manifest.json"))
    return cases


# --- depths --------------------------------------------------------------------------------------

def depths(rng: random.Random, folder: Path) -> list[Case]:
    cases = []
    depth = rng.choice([100, 1000, 100_000])
    run = _run_dir(folder / "r1")
    manifest = (run / "manifest.json").read_text()
    (run / "manifest.json").write_text(manifest[:-1].rstrip().rstrip("}") + ', "deep": ' + "[" * depth + "]" * depth + "}")
    cases.append(Case(f"manifest nested {depth} deep", _analyze(run, folder / "o1"), "refused", "manifest.json"))
    scenario = folder / "deep.yaml"
    text = SCENARIO.read_text()
    scenario.write_text(text + "deep: " + "[" * 5000 + "]" * 5000 + "\n")
    cases.append(Case("scenario nested 5000 deep", ["validate", str(scenario)], "refused", str(scenario)))
    records = folder / "records.jsonl"
    records.write_text('{"a": ' + "[" * depth + "]" * depth + "}\n")
    cases.append(Case(f"load record nested {depth} deep", _analyze(TRACE, folder / "o2") + ["--load-records", str(records)],
                      "refused", str(records)))
    run = _run_dir(folder / "r2")
    summary = run / "analysis" / "analysis.json"
    summary.write_text('{"x": ' + "{\"a\": " * depth + "1" + "}" * depth + "}")
    cases.append(Case(f"analysis.json nested {depth} deep", ["metrics", str(run)], "refused", "analysis.json"))
    return cases


# --- encodings -----------------------------------------------------------------------------------

def encodings(rng: random.Random, folder: Path) -> list[Case]:
    cases = []
    bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])
    scenario = folder / "bytes.yaml"
    scenario.write_bytes(SCENARIO.read_bytes().replace(b"name: ", b"name: " + bad, 1))
    cases.append(Case("scenario bytes that are not UTF-8", ["validate", str(scenario)], "refused", str(scenario)))
    utf16 = folder / "utf16.yaml"
    utf16.write_bytes(SCENARIO.read_text().encode("utf-16"))
    cases.append(Case("scenario in UTF-16", ["validate", str(utf16)], "refused", str(utf16)))
    nul = folder / "nul.yaml"
    nul.write_text(re.sub(r"model_path: .*", lambda _: 'model_path: "/models/a\\0b"', SCENARIO.read_text(), count=1))
    cases.append(Case("NUL in model_path", ["validate", str(nul)], "refused", "model_path"))
    run = _run_dir(folder / "r1")
    manifest = run / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"', b'"' + bad, 1))
    cases.append(Case("manifest bytes that are not UTF-8", _analyze(run, folder / "o1"), "refused", "manifest.json"))
    records = folder / "records.jsonl"
    records.write_bytes(b'{"ok": 1}\n{"x": "' + bad + b'"}\n')
    cases.append(Case("load records not UTF-8", _analyze(TRACE, folder / "o2") + ["--load-records", str(records)],
                      "refused", str(records)))
    run = _run_dir(folder / "r2")
    table = run / "analysis" / "d4_detail.csv"
    data = table.read_bytes()
    at = rng.randrange(len(data) // 2, len(data))
    table.write_bytes(data[:at] + bad + data[at:])
    cases.append(Case("a table not UTF-8", ["metrics", str(run)], "refused", "d4_detail.csv"))
    return cases


# --- duplicates ----------------------------------------------------------------------------------

def duplicates(rng: random.Random, folder: Path) -> list[Case]:
    cases = []
    doc = json.loads(trace_text())
    spaced = json.loads(json.dumps(doc))
    spaced["traceEvents"] += [dict(e, name=e["name"] + rng.choice([" ", "  ", "\t"])) for e in _kernels(spaced)]
    path = folder / "spaced-TP-0-DECODE.trace.json"
    path.write_text(json.dumps(spaced))
    cases.append(Case("every kernel again with a trailing space", _analyze(path, folder / "o1"), "refused", str(path)))
    copied = json.loads(json.dumps(doc))
    other = max(int(e["args"].get("stream", 0)) for e in _kernels(copied) if isinstance(e.get("args"), dict)) + 1
    copied["traceEvents"] += [dict(e, args=dict(e.get("args") or {}, stream=other), tid=other) for e in _kernels(copied)]
    path = folder / "copied-TP-0-DECODE.trace.json"
    path.write_text(json.dumps(copied))
    cases.append(Case("every kernel copied onto another stream", _analyze(path, folder / "o2"), "refused", str(path)))
    first, second = folder / "a-TP-0-DECODE.trace.json.gz", folder / "a-TP-1-DECODE.trace.json"
    shutil.copy(TRACE, first)
    second.write_text(trace_text())
    cases.append(Case("one trace as two ranks", ["analyze", str(first), str(second), "--jobs", "1",
                                                  "--out", str(folder / "o3")], "refused"))
    twice = folder / "twice.yaml"
    flag = rng.choice(["--chunked-prefill-size 4096", "--port 31000", "--mem-fraction-static 0.8"])
    text = SCENARIO.read_text()
    assert "extra_args" not in text, "the scenario changed: give the case another place for its flags"
    twice.write_text(text.replace("engine:\n", f"engine:\n  extra_args: [{', '.join(repr(p) for p in (flag + ' ' + flag).split())}]\n", 1))
    cases.append(Case("a flag given twice", ["validate", str(twice)], "refused", "given "))
    key = folder / "key.yaml"
    key.write_text(text + "name: again\n")
    cases.append(Case("a key given twice", ["validate", str(key)], "refused", "given twice"))
    return cases


# --- races ---------------------------------------------------------------------------------------

def _writer(fifo: Path, payload: bytes, stall_s: float = 0.0):
    def write():
        try:
            with open(fifo, "wb") as pipe:
                pipe.write(payload)
                pipe.flush()
                time.sleep(stall_s)
        except (BrokenPipeError, OSError):
            pass
    return write


def _lower_pipe_idle_limit():
    import analysis.io.input_files as door
    door.PIPE_IDLE_LIMIT_S = 1.0


def races(rng: random.Random, folder: Path) -> list[Case]:
    cases = []
    text = trace_text().encode()
    fifo = folder / "fifo-TP-0-DECODE.trace.json"
    os.mkfifo(fifo)
    cases.append(Case("a trace through a FIFO", _analyze(fifo, folder / "o1"), "same", during=_writer(fifo, text)))
    stalled = folder / "stalled-TP-0-DECODE.trace.json"
    os.mkfifo(stalled)
    cut = rng.randrange(1, len(text) // 2)
    cases.append(Case("a FIFO whose writer stalls", _analyze(stalled, folder / "o2"), "refused", "stalled",
                      in_child=_lower_pipe_idle_limit, during=_writer(stalled, text[:cut], stall_s=3.0),
                      wall_limit_s=30.0))
    records = folder / "records.fifo"
    os.mkfifo(records)
    cases.append(Case("load records through a FIFO whose writer stalls",
                      _analyze(TRACE, folder / "o3") + ["--load-records", str(records)], "refused", "stalled",
                      in_child=_lower_pipe_idle_limit, during=_writer(records, b'{"a": 1}\n', stall_s=3.0),
                      wall_limit_s=30.0))
    run = _run_dir(folder / "r1")
    trace = next((run / "traces").iterdir())
    trace.write_bytes(TRACE.read_bytes())  # another run's trace under this run's name
    cases.append(Case("a run's trace replaced by another run's", _analyze(run, folder / "o4"), "refused",
                      "manifest"))
    return cases


# --- secrets -------------------------------------------------------------------------------------

def _secret(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijkmnpqrstuvwxyz23456789") for _ in range(rng.randrange(8, 24)))


def secrets(rng: random.Random, folder: Path) -> list[Case]:
    """Secrets by name (parts of a variable's name), by value (the same value standing elsewhere) and in
    URLs, beside values that are not secret and must stay as they are (a path under a passed-through
    folder, a port equal to a secret's digits)."""
    key, phrase, flag_key = _secret(rng), _secret(rng), _secret(rng)
    home = f"/data/hf-{rng.randrange(10**6)}"
    port = rng.randrange(20000, 40000)
    name = rng.choice(["OPENAI_APIKEY", "MY_API_KEY", "SERVICE_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"])
    scenario = folder / "secrets.yaml"
    text = re.sub(r"model_path: .*", f"model_path: {home}/models/m", SCENARIO.read_text(), count=1)
    text = text.replace("engine:\n", "engine:\n  port: %d\n  env: {%s: %s, MY_PASSPHRASE: %s, HF_HOME: %s, "
                        "NUM_TOKENS: '%d'}\n  passthrough_env: [HF_TOKEN, HF_HOME]\n  extra_args: [--api-key, %s]\n"
                        % (port, name, key, phrase, home, port, flag_key), 1)
    scenario.write_text(text)
    hidden, shown = [key, phrase, flag_key], [f"{home}/models/m", f"--port {port}", name]
    cases = [Case("secrets in a scenario: plan", ["plan", str(scenario)], "ok", hidden=hidden, shown=shown),
             Case("secrets in a scenario: validate", ["validate", str(scenario)], "ok", hidden=hidden)]
    password = _secret(rng)
    run = _run_dir(folder / "r1")
    url = rng.choice([f"http://user:{password}@host:notaport/", f"user:{password}@host:9091:x",
                      f"http://user:{password}@[::1"])
    cases.append(Case("a malformed pushgateway URL with a password", ["metrics", str(run), "--pushgateway", url],
                      "refused", "pushgateway", hidden=[password]))
    return cases


FAMILIES = {"sizes": sizes, "depths": depths, "encodings": encodings, "duplicates": duplicates, "races": races, "secrets": secrets}
