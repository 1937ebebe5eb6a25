"""A bounded fuzz of `analyze` on real traces from tests/data: truncated, garbled, fields mutated; and
of the input classes that once ended in tracebacks, hangs or silent sums: pipes, file names and bytes
that are not UTF-8, deep nesting, numbers of thousands of digits, one trace twice, doubled kernels,
mixed runs, and hostile values in scenarios; and whole traces whose event sets are strange (events
dropped, reordered, moved between streams, cut to one kernel or to copies, GPU and CPU clocks apart).

Fixed seed, fixed count, a time budget well under a minute. Every case must end in a clean exit
(0, or 2 with one error line): never a traceback, and never an exit-0 table from an input that is
broken (not valid JSON, or a kernel event whose typed fields the loader must refuse). Invalid UTF-8
inside a string the analysis never reads (an ignored key) is not counted as broken.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import re
import threading
import time
from pathlib import Path

import pytest

from harness.cli import main
from inject_gaps import GPU_CATS

DATA = Path(__file__).parent / "data"
SOURCES = (DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz",
           DATA / "accuracy" / "h200" / "dsv3wide-h200-l4d1-e64k8-bs8-grouped-sdpa-TP-0-DECODE.trace.json.gz")
SEED = 20261124
CASES = 100
BUDGET_S = 50.0
KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# values a kernel's typed field must refuse (dur: not a finite non-negative number; ts: not a number)
BAD_VALUES = {"dur": [-1.0, -0.001, None, "12", [], {}, True, 1e12], "ts": [None, [], {"a": 1}, True],
              "args.stream": ["7", 1.5, []], "args.correlation": ["x", 2.5, {}]}


def _mutate_field(rng: random.Random, text: str) -> tuple[str, bool]:
    """One event's field set to a random value: broken when it is a kernel's typed field with a bad value."""
    doc = json.loads(text)
    events = doc["traceEvents"]
    kernels = [i for i, e in enumerate(events) if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]
    index = rng.choice(kernels) if rng.random() < 0.7 else rng.randrange(len(events))
    event = events[index]
    field = rng.choice(sorted(BAD_VALUES))
    value = rng.choice(BAD_VALUES[field])
    if field.startswith("args."):
        if not isinstance(event.get("args"), dict):
            return text, False  # nothing to mutate: the input stays whole
        event["args"][field[5:]] = value
    elif value is None:
        event.pop(field, None)
    else:
        event[field] = value
    is_kernel = event.get("cat") in KERNEL_CATS and event.get("ph") == "X"
    # a bool is a JSON value msgspec refuses for a float or int field
    broken = is_kernel or field.startswith("args.") or (field in ("dur", "ts") and not isinstance(value, (float, type(None))))
    if field == "dur" and not is_kernel and (value is None or (isinstance(value, float) and value >= 0 and value < 1e12)):
        broken = False  # a missing or plausible dur on a CPU-side event is not refused
    return json.dumps(doc), broken


def _case(rng: random.Random, text: str) -> tuple[bytes, bool, str]:
    """(file bytes, broken, what was done)."""
    kind = rng.choice(["truncate", "garble", "field", "field", "gzip-truncate"])
    if kind == "truncate":
        cut = rng.randrange(1, len(text) - 1)
        return text[:cut].encode(), True, f"truncated at {cut}"
    if kind == "garble":
        data = bytearray(text.encode())
        at = rng.randrange(len(data) - 64)
        span = rng.randrange(1, 64)
        data[at:at + span] = bytes(rng.randrange(256) for _ in range(span))
        try:  # invalid UTF-8 alone is not counted: inside a string the analysis never reads, the
            # loader does not look for it (checking every byte would cost a fifth of its speed)
            json.loads(bytes(data).decode("utf-8", errors="replace"))
            broken = False  # landed where any bytes are valid (inside a name): still a whole trace
        except ValueError:
            broken = True
        return bytes(data), broken, f"garbled {span} bytes at {at}"
    if kind == "gzip-truncate":
        packed = gzip.compress(text.encode())
        cut = rng.randrange(10, len(packed) - 8)
        return packed[:cut], True, f"gzip cut at {cut}"
    mutated, broken = _mutate_field(rng, text)
    return mutated.encode(), broken, "field mutated"


def test_broken_traces_never_give_a_traceback_or_a_table(tmp_path, capsys):
    rng = random.Random(SEED)
    texts = [gzip.decompress(p.read_bytes()).decode() for p in SOURCES]
    started = time.monotonic()
    outcomes = {"refused": 0, "ok whole": 0}
    for n in range(CASES):
        if time.monotonic() - started > BUDGET_S:
            pytest.fail(f"fuzz budget of {BUDGET_S:.0f} s spent after {n} cases (a case got slow)")
        data, broken, what = _case(rng, texts[n % len(texts)])
        path = tmp_path / f"fuzz{n}-TP-0-DECODE.trace.json"
        path.write_bytes(data)
        try:
            status = main(["analyze", str(path), "--jobs", "1"])
        except SystemExit as stop:  # argparse only; never expected here
            pytest.fail(f"case {n} ({what}): SystemExit {stop.code}")
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape as a traceback
            pytest.fail(f"case {n} ({what}): {type(exc).__name__}: {exc}")
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err, (n, what, captured.err)
        assert status in (0, 2), (n, what, status)
        if broken:
            assert status == 2, f"case {n} ({what}): exit {status} with a table from a broken input"
            errors = [line for line in captured.err.splitlines() if line.startswith("moe-harness analyze:")]
            assert len(errors) == 1 and str(path) in errors[0], (n, what, captured.err)
            outcomes["refused"] += 1
        elif status == 0:
            outcomes["ok whole"] += 1
        path.unlink()
    assert outcomes["refused"] >= CASES // 2, outcomes  # the fuzz mostly breaks things, as meant


SCENARIO_CASES = 60
SCENARIO_VALUES = [None, True, False, -1, 0, 2**70, 1e309, -0.5, "x", "", "a/b", [], [1], {}, {"a": 1}, "../.."]


def _key_paths(doc: dict, prefix: tuple = ()):
    for key, value in doc.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _key_paths(value, prefix + (key,))


def test_mutated_scenarios_get_a_verdict_never_a_traceback(tmp_path, capsys):
    """Every shipped scenario with one key deleted or set to a value of a random type: `validate` says
    ok (0) or invalid (1) naming the key; it never raises."""
    import yaml

    from harness.scenario import SCENARIOS_DIR

    rng = random.Random(SEED)
    sources = sorted(SCENARIOS_DIR.glob("*.yaml")) + sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
    refused = 0
    for n in range(SCENARIO_CASES):
        source = rng.choice(sources)
        doc = yaml.safe_load(source.read_text())
        where = rng.choice(list(_key_paths(doc)))
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        if rng.random() < 0.2:
            del parent[where[-1]]
        else:
            parent[where[-1]] = rng.choice(SCENARIO_VALUES)
        path = tmp_path / f"case{n}.yaml"
        path.write_text(yaml.safe_dump(doc))
        try:
            status = main(["validate", str(path)])
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape
            pytest.fail(f"case {n} ({source.name}, {'.'.join(map(str, where))}): {type(exc).__name__}: {exc}")
        err = capsys.readouterr().err
        assert status in (0, 1) and "Traceback" not in err, (n, source.name, where, err)
        if status == 1:
            assert str(path) in err, err
            refused += 1
    assert refused >= SCENARIO_CASES // 3, refused  # most mutations break a scenario, as meant


CLASS_CASES = 48
CLASS_BUDGET_S = 90.0


def _inject(text: str, rng: random.Random, what: str) -> tuple[str, bool]:
    """One event of the trace gets a hostile value at a random field: (new text, must be refused)."""
    doc = json.loads(text)
    events = doc["traceEvents"]
    kernels = [i for i, e in enumerate(events) if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]
    index = rng.choice(kernels) if rng.random() < 0.5 else rng.randrange(len(events))
    field = rng.choice(["dur", "ts", "name", "args"])
    events[index][field] = "HOSTILE_MARK"
    is_kernel = index in kernels
    text = json.dumps(doc)
    if what == "nesting":
        depth = rng.choice([600, 1000, 5000, 100_000])
        return text.replace('"HOSTILE_MARK"', "[" * depth + "]" * depth), is_kernel and field != "args"
    if what == "huge":
        return text.replace('"HOSTILE_MARK"', "9" * rng.choice([400, 4301, 5000])), is_kernel and field in ("dur", "ts")
    raise AssertionError(what)


def _hostile_trace_case(rng: random.Random, text: str, folder: Path, n: int) -> tuple[list[str], bool, str]:
    """(analyze's arguments, must be refused, what was done) for one case of a class the issue names."""
    kind = rng.choice(["pipe", "name", "encoding", "nesting", "huge", "duplicate", "doubled", "mixed-runs"])
    base = folder / f"case{n}"
    base.mkdir()
    if kind in ("nesting", "huge"):
        mutated, broken = _inject(text, rng, kind)
        path = base / f"r{n}-TP-0-DECODE.trace.json"
        path.write_text(mutated)
        return [str(path)], broken, kind
    if kind == "encoding":
        data = bytearray(text.encode())
        at = rng.choice([m.end() for m in re.finditer(rb'"name":\s*"', data)])
        data[at:at] = bytes(rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]))
        path = base / f"r{n}-TP-0-DECODE.trace.json"
        path.write_bytes(bytes(data))
        return [str(path)], False, kind  # refused where the loader decodes that name, else a table
    if kind == "name":
        raw = bytes(rng.choice([0x80, 0xff, 0xfe, 0xc3]) for _ in range(rng.randrange(1, 5)))
        path = os.fsdecode(os.fsencode(base) + b"/" + raw + b"-TP-0-DECODE.trace.json.gz")
        Path(path).write_bytes(gzip.compress(text.encode(), compresslevel=1))
        return [path], False, kind
    if kind == "pipe":
        fifo = base / f"p{n}-TP-0-DECODE.trace.json"
        os.mkfifo(fifo)
        cut = len(text) if rng.random() < 0.5 else rng.randrange(1, len(text))
        payload = text[:cut].encode()

        def feed():
            try:
                with open(fifo, "wb") as pipe:
                    pipe.write(payload)
            except BrokenPipeError:
                pass

        threading.Thread(target=feed, daemon=True).start()
        return [str(fifo)], cut < len(text), kind
    first = base / f"run{n}-TP-0-DECODE.trace.json"
    first.write_text(text)
    if kind == "duplicate":  # the same trace under another rank name, re-encoded or byte for byte
        second = str(base / f"run{n}-TP-1-DECODE.trace.json") + ("" if rng.random() < 0.5 else ".gz")
        data = text.encode()
        Path(second).write_bytes(gzip.compress(data) if second.endswith(".gz") else data)
        return [str(first), second], True, kind
    if kind == "doubled":  # some kernels twice on their stream
        doc = json.loads(text)
        kernels = [e for e in doc["traceEvents"] if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]
        doc["traceEvents"] += rng.sample(kernels, rng.randrange(1, len(kernels)))
        first.write_text(json.dumps(doc))
        return [str(first)], True, kind
    other = base / f"other{n}-TP-1-DECODE.trace.json"  # another run's prefix
    other.write_text(text)
    return [str(first), str(other)], True, kind


def test_hostile_inputs_of_every_class_are_one_line_errors_or_tables(tmp_path, capsys):
    """Pipes, file names and bytes that are not UTF-8, JSON nested past the decoder's stack, numbers of
    thousands of digits, one trace under two names, doubled kernels and mixed runs: each ends in a
    table (exit 0) or one error line (exit 2) naming a file, never a traceback or a hang; those that
    break a rule the analysis holds are always refused."""
    rng = random.Random(SEED + 32)
    text = gzip.decompress(SOURCES[0].read_bytes()).decode()
    started = time.monotonic()
    refused = {}
    for n in range(CLASS_CASES):
        if time.monotonic() - started > CLASS_BUDGET_S:
            pytest.fail(f"budget of {CLASS_BUDGET_S:.0f} s spent after {n} cases (a case got slow or hung)")
        argv, broken, kind = _hostile_trace_case(rng, text, tmp_path, n)
        try:
            status = main(["analyze", *argv, "--jobs", "1"])
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape as a traceback
            pytest.fail(f"case {n} ({kind}): {type(exc).__name__}: {exc}")
        err = capsys.readouterr().err
        assert "Traceback" not in err and status in (0, 2), (n, kind, status, err)
        if broken:
            assert status == 2, f"case {n} ({kind}): exit {status} from an input that breaks a rule"
        if status == 2:
            errors = [line for line in err.splitlines() if line.startswith("moe-harness analyze:")]
            assert len(errors) == 1, (n, kind, err)
            refused[kind] = refused.get(kind, 0) + 1
    assert {"duplicate", "doubled", "mixed-runs"} <= set(refused), refused  # the fuzz reached the classes


def test_hostile_scenarios_get_a_verdict_never_a_traceback(tmp_path, capsys):
    """A shipped scenario with a random key set to bytes that are not UTF-8, a number of thousands of
    digits, nesting past the parser's stack, or a valid YAML merge: `validate` says ok or invalid."""
    import yaml

    from harness.scenario import SCENARIOS_DIR

    rng = random.Random(SEED + 33)
    sources = sorted(SCENARIOS_DIR.glob("*.yaml"))
    for n in range(30):
        doc = yaml.safe_load(rng.choice(sources).read_text())
        where = rng.choice(list(_key_paths(doc)))
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = "HOSTILE_MARK"
        kind = rng.choice(["bytes", "digits", "nesting", "merge"])
        hostile = {"bytes": b'"\xff\xfe"', "digits": b"7" * 5000, "nesting": b"[" * 3000 + b"]" * 3000,
                   "merge": b"{<<: {a: 1}, b: 2}"}[kind]
        path = tmp_path / f"case{n}.yaml"
        path.write_bytes(yaml.safe_dump(doc).encode().replace(b"HOSTILE_MARK", hostile))
        try:
            status = main(["validate", str(path)])
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape
            pytest.fail(f"case {n} ({kind} at {'.'.join(map(str, where))}): {type(exc).__name__}: {exc}")
        captured = capsys.readouterr()
        assert status in (0, 1) and "Traceback" not in captured.err, (n, kind, where, captured.err)
        if status == 1:
            assert str(path) in captured.err


STRUCTURAL_BUDGET_S = 60.0


def _structural_case(kind: str, rng: random.Random, doc: dict) -> dict:
    """A whole trace (valid JSON, every kernel field well typed) whose events are strange as a set: dropped,
    reordered, moved between streams, cut to one kernel or to copies, thread ids as strings, a kernel far
    off in time, every GPU event an hour before its launch call (two clocks that disagree)."""
    events = doc["traceEvents"]
    kernels = [i for i, e in enumerate(events) if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]
    keep = set(range(len(events)))
    if kind == "drop":
        keep -= set(rng.sample(kernels, len(kernels) // 2))
    elif kind == "reorder":
        rng.shuffle(events)
    elif kind == "restream":
        for i in rng.sample(kernels, len(kernels) // 4):
            events[i].setdefault("args", {})["stream"] = rng.choice([7, 13, 999])
    elif kind == "no-args":
        for i in rng.sample(kernels, len(kernels) // 3):
            events[i].pop("args", None)
    elif kind == "one-kernel":
        keep -= set(kernels) - {rng.choice(kernels)}
    elif kind == "copies-only":
        keep -= {i for i in kernels if events[i]["cat"] == "kernel"}
    elif kind == "string-tids":
        for e in events:
            if "tid" in e:
                e["tid"] = f"stream {e['tid']}"
    elif kind == "far-kernel":
        events[rng.choice(kernels)]["ts"] = 1e15
    elif kind == "clocks-apart":
        for e in events:
            if e.get("cat") in GPU_CATS and isinstance(e.get("ts"), (int, float)):
                e["ts"] -= 3.6e9
    doc["traceEvents"] = [e for i, e in enumerate(events) if i in keep]
    return doc


def test_whole_traces_with_strange_event_sets_get_a_table_or_one_error_line(tmp_path, capsys):
    """Each structural mutation of each source ends in a table (exit 0) or one error line (exit 2), never
    a traceback; clocks that disagree are said in the rank's notes (problems.csv)."""
    rng = random.Random(SEED + 64)
    sources = [gzip.decompress(p.read_bytes()).decode() for p in SOURCES]
    kinds = ["drop", "reorder", "restream", "no-args", "one-kernel", "copies-only", "string-tids", "far-kernel",
             "clocks-apart"]
    started = time.monotonic()
    for n, (text, kind) in enumerate((t, k) for t in sources for k in kinds):
        if time.monotonic() - started > STRUCTURAL_BUDGET_S:
            pytest.fail(f"budget of {STRUCTURAL_BUDGET_S:.0f} s spent after {n} cases (a case got slow or hung)")
        path = tmp_path / f"structural{n}-TP-0-DECODE.trace.json"
        path.write_text(json.dumps(_structural_case(kind, rng, json.loads(text))))
        try:
            status = main(["analyze", str(path), "--jobs", "1", "--out", str(tmp_path / f"out{n}")])
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape as a traceback
            pytest.fail(f"case {n} ({kind}): {type(exc).__name__}: {exc}")
        err = capsys.readouterr().err
        assert "Traceback" not in err and status in (0, 2), (n, kind, status, err)
        if status == 2:
            errors = [line for line in err.splitlines() if line.startswith("moe-harness analyze:")]
            assert len(errors) == 1, (n, kind, err)
        if kind == "clocks-apart" and status == 0:
            assert "clocks disagree" in (tmp_path / f"out{n}" / "problems.csv").read_text(), (n, err)
