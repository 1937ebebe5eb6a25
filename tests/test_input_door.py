"""One input door (analysis/io/input_files.py): every byte a command reads from outside goes through it,
bounded in bytes read, bytes inflated, nesting depth and time.

First a walk of analysis/ and harness/ for reads that go around the door (open() for reading,
Path.read_text / read_bytes / open, gzip.open, os.open, io.FileIO, json.load, yaml on a file handle,
...): each one found is either routed through the door or listed below with why it is safe. Then the
readers that went around it (the load records, a run's manifest, the page's annotated trace, the early
reader of a trace that broke FIFOs), each held to its bound through the command a user runs.

Limits are lowered with monkeypatch where a real one would need hundreds of MB; the module attribute
patched is the one the reader uses (raising=False: the old code has none, and must fail the test by
not refusing, not by a missing attribute). Traces are the bundled real ones (tests/data); synthetic
files are named so."""
from __future__ import annotations

import ast
import gzip
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SGLANG = DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
CPU_DEMO = DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz"
RUN = DATA / "sglang-real/ray-run/sglang_dsv3_4l_1gpu_full-20261124-214640"
DOOR = "analysis/io/input_files.py"


# --- the walk -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Read:
    path: str  # relative to the repository
    function: str  # enclosing class.function, <module> at the top
    kind: str  # what reads: "open", ".read_text", "gzip.open", "os.open", ...
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return self.path, self.function, self.kind


_OPENERS_WITH_MODE = {"open": 1, "io.open": 1, "codecs.open": 1, "io.FileIO": 1, "os.fdopen": 1,
                      "gzip.open": 1, "bz2.open": 1, "lzma.open": 1, "tarfile.open": 1, "zipfile.ZipFile": 1}
_BINARY_DEFAULT = {"gzip.open", "bz2.open", "lzma.open", "tarfile.open", "zipfile.ZipFile"}  # default "r"/"rb"
_WHOLE_FILE_READERS = {"json.load", "pickle.load", "marshal.load", "torch.load", "np.load", "numpy.load",
                       "np.fromfile", "np.loadtxt", "np.genfromtxt", "mmap.mmap", "pq.read_table", "pq.ParquetFile",
                       "shutil.copyfile", "shutil.copy", "shutil.copy2", "shutil.copyfileobj", "hashlib.file_digest"}
_YAML_LOADERS = {"yaml.safe_load", "yaml.load", "yaml.full_load", "yaml.unsafe_load"}
_PATH_READERS = {"read_text", "read_bytes"}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def _reads(mode: ast.AST | None) -> bool:
    """A mode that reads: none given (the default reads), a literal with "r", or one not known here."""
    if mode is None:
        return True
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return "r" in mode.value
    return True


def _flag_names(node: ast.AST, constants: dict[str, ast.AST]) -> set[str]:
    """The os.O_* names in an os.open flags expression, module constants followed once."""
    names = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Attribute) and part.attr.startswith("O_"):
            names.add(part.attr)
        elif isinstance(part, ast.Name) and part.id in constants:
            names |= _flag_names(constants[part.id], {})
    return names


def _kind(call: ast.Call, constants: dict[str, ast.AST], handles: set[str]) -> str | None:
    """What the call reads a file with, or None where it reads none (a write, a folder, a string)."""
    name = _dotted(call.func)
    if name == "os.open":
        flags = _flag_names(call.args[1], constants) if len(call.args) > 1 else set()
        return None if flags & {"O_WRONLY", "O_DIRECTORY"} else "os.open"
    if name in _OPENERS_WITH_MODE:
        mode = _mode(call, _OPENERS_WITH_MODE[name])
        return name if (mode is None and name in _BINARY_DEFAULT) or _reads(mode) else None
    if isinstance(call.func, ast.Attribute) and call.func.attr in _PATH_READERS:
        return f".{call.func.attr}"
    if isinstance(call.func, ast.Attribute) and call.func.attr == "open":  # Path.open, and any x.open
        return ".open" if _reads(_mode(call, 0)) else None
    if name in _WHOLE_FILE_READERS:
        return name
    if name in _YAML_LOADERS and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in handles:
        return f"{name}(handle)"
    return None


def reads_in(source: str, path: str) -> list[Read]:
    """Every call in `source` that reads a file, with the function it is in."""
    tree = ast.parse(source, path)
    constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
    handles = {item.optional_vars.id for node in ast.walk(tree) if isinstance(node, (ast.With, ast.AsyncWith))
               for item in node.items if isinstance(item.optional_vars, ast.Name)}
    found: list[Read] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, scope + [child.name])
                continue
            if isinstance(child, ast.Call) and (kind := _kind(child, constants, handles)):
                found.append(Read(path, ".".join(scope) or "<module>", kind, child.lineno))
            visit(child, scope)

    visit(tree, [])
    return found


def reads_around_the_door() -> list[Read]:
    """The file reads of analysis/ and harness/ outside the door itself."""
    return [read for package in ("analysis", "harness") for file in sorted((ROOT / package).rglob("*.py"))
            if (rel := file.relative_to(ROOT).as_posix()) != DOOR
            for read in reads_in(file.read_text(encoding="utf-8"), rel)]


_SHIPPED = "a data file shipped in the package, named by the module (not a path a user gives)"
_OWN_OUTPUT = "a file this process wrote a moment before, read back to pass on"
_MAINTAINER = "a maintainer's tool over SGLang wheels and the project's own tables, not a command's input"

# Reads that may go around the door, each with why it is safe.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("analysis/io/atomic_files.py", "written_aside", "open"): "its own temporary file, opened to fsync it",
    ("harness/engines/embedded/engine.py", "DecodeEngine.profile", "open"): _OWN_OUTPUT + " (the profiler's trace)",
    ("harness/engines/embedded/engine.py", "DecodeEngine.profile", "shutil.copyfileobj"): _OWN_OUTPUT,
    ("harness/engines/sglang_pd.py", "SGLangPDEngine.analyse", ".read_text"): _OWN_OUTPUT + " (ttft_split.md)",
    ("harness/table_files.py", "write_table_files", ".read_text"): _OWN_OUTPUT + " (d4.md)",
    ("harness/exports/tables.py", "load_schema", ".read_text"): _SHIPPED,
    ("harness/node/actor.py", "NodeActor.copy_traces", "shutil.copyfile"):
        "a copy of the rank traces its own server wrote, streamed (never held, never parsed)",
    ("harness/output_marker.py", "file_sha256", "os.open"):
        "a hash streamed in blocks of a regular file only (O_NONBLOCK, never a link, device or FIFO)",
    ("harness/output_marker.py", "read_marker", "os.open"):
        "opened without following a link or waiting on a FIFO, refused unless a regular file, then read "
        "through read_json's bound",
    ("harness/output_marker.py", "output_names", ".read_text"): _SHIPPED,
    ("harness/output_replace.py", "Replacer._is", "os.open"):
        "its own file moved aside, hashed (O_NONBLOCK, never a link)",
    ("harness/scenario.py", "load_embedded_presets", "open"): _SHIPPED,
    ("harness/scenario.py", "load_embedded_presets", "yaml.safe_load(handle)"): _SHIPPED,
    ("harness/sglang/node_check.py", "run_node_check", ".read_text"): _SHIPPED + " (the check's script)",
    ("harness/sglang/plan.py", "_env_defaults", ".read_text"): _SHIPPED,
    ("harness/sglang/version.py", "load_table", ".read_text"): _SHIPPED,
    ("harness/sglang/launch_flags.py", "_release_entries", ".read_text"): _SHIPPED,
    ("harness/sglang/expert_load.py", "logical_count", "torch.load"):
        "parses the bytes read_input read within its bound just above (weights only)",
    ("harness/sglang/launch_flags.py", "main", ".read_text"): _MAINTAINER,
    **{("harness/sglang/extract_release.py", function, kind): _MAINTAINER for function, kind in (
        ("harness_variables", ".read_text"), ("release_table", "zipfile.ZipFile"), ("release_table", ".read_bytes"),
        ("add_release_entry", ".read_text"), ("main", ".read_text"))},
    **{("harness/sglang/wheel_source.py", function, kind): _MAINTAINER for function, kind in (
        ("extract_members", "zipfile.ZipFile"), ("sglang_source_dir", ".read_bytes"), ("read_sources", ".read_text"),
        ("environ_names", ".read_text"), ("metric_names", ".read_text"))},
}

# Reads around the door that this change leaves for their modules' own work: each is a bypass still.
# Listed so that the walk stays red for any new one; remove an entry once its read goes through the door.
NOT_YET_ROUTED: dict[tuple[str, str, str], str] = {}  # reads still around the door: none


_EVERY_WAY = '''
import gzip, json, os, io, yaml, shutil
FOLDER = os.O_RDONLY | os.O_DIRECTORY
def reads(path, p):
    open(path); open(path, "rb"); open(path, mode="r", encoding="utf-8"); p.read_text(); p.read_bytes()
    p.open(); gzip.open(path); os.open(path, os.O_RDONLY); io.FileIO(path); json.load(fh)
    with open(path) as handle:
        yaml.safe_load(handle)
    shutil.copyfile(path, "x")
def writes(path, p, text):
    open(path, "w"); open(path, "ab"); p.open("w"); gzip.open(path, "wb"); os.open(path, os.O_WRONLY | os.O_CREAT)
    os.open(path, FOLDER); yaml.safe_load(text); json.loads(text); p.write_text("x")
class Reader:
    def method(self, p):
        return p.read_text()
'''


def test_no_read_goes_around_the_door():
    """Red on each reader the issue found around the door: `--load-records`, a run's
    load/requests.jsonl, manifest.json of a run directory, the page's annotated trace, the early reader.
    The walk itself is first shown every way of reading (and writes, folders and strings it must pass)."""
    seen = [(r.function, r.kind) for r in reads_in(_EVERY_WAY, "synthetic.py")]
    assert seen == [("reads", kind) for kind in (
        "open", "open", "open", ".read_text", ".read_bytes", ".open", "gzip.open", "os.open", "io.FileIO",
        "json.load", "open", "yaml.safe_load(handle)", "shutil.copyfile")] + [("Reader.method", ".read_text")]
    reads = reads_around_the_door()
    around = [r for r in reads if r.key not in ALLOWED and r.key not in NOT_YET_ROUTED]
    assert not around, ("read through analysis/io/input_files.py (open_input, read_input, read_json, open_input_text, "
                        "read_input_gzip, input_sha256), or list in ALLOWED with why it is safe:\n"
                        + "\n".join(f"{r.path}:{r.line}: {r.function}: {r.kind}" for r in around))
    stale = sorted(set(ALLOWED) - {r.key for r in reads}) + sorted(set(NOT_YET_ROUTED) - {r.key for r in reads})
    assert not stale, f"no longer read there (an entry left would let a new read there through): remove {stale}"


# --- load records (--load-records, a run's load/requests.jsonl) ------------------------------------

@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A copy of the bundled real run directory that a test may change."""
    return Path(shutil.copytree(RUN, tmp_path / RUN.name))


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def _records(count: int) -> bytes:
    """Synthetic load records in the load client's format."""
    return b"".join(json.dumps({"request_id": i, "ok": True, "start_s": 0.01 * i, "ttft_ms": 20.0,
                                "itl_ms": [5.0] * 8, "e2e_ms": 60.0, "output_tokens": 9}).encode() + b"\n"
                    for i in range(count))


def test_load_records_that_are_a_device_are_refused(capsys):
    """/dev/null stands for any device (/dev/zero, read whole, grew 1.2 GB/s): never read."""
    assert main(["analyze", str(CPU_DEMO), "--load-records", "/dev/null"]) == 2
    line = _one_error_line(capsys)
    assert "/dev/null: " in line and "not a regular file or a pipe" in line


class _Writer(threading.Thread):
    """Writes `data` into a FIFO (blocking in open until a reader comes), optionally stopping after
    `stall_after` bytes until released; records whether the reader left before the end."""

    def __init__(self, fifo: Path, data: bytes, stall_after: int | None = None, block_bytes: int = 4096):
        super().__init__(daemon=True)
        self.fifo, self.data, self.stall_after, self.block_bytes = fifo, data, stall_after, block_bytes
        self.release = threading.Event()
        self.cut_off = False

    def run(self) -> None:
        try:
            with open(self.fifo, "wb", buffering=0) as out:  # synthetic writer, not a reader
                for start in range(0, len(self.data), self.block_bytes):
                    if self.stall_after is not None and start >= self.stall_after and not self.release.is_set():
                        self.release.wait(30)
                        self.release.set()  # one stall only
                    out.write(self.data[start:start + self.block_bytes])
        except BrokenPipeError:
            self.cut_off = True

    def start_and_wait_for_open(self) -> None:
        """Started, and blocked in open() for its reader (so a reader sees it as the pipe's writer)."""
        self.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/self/task/{self.native_id}/wchan").read_text() == "wait_for_partner":
                    return
            except OSError:
                return
            time.sleep(0.01)


@pytest.mark.timeout(120)
def test_load_records_from_a_fifo_are_streamed_and_stopped_at_their_bound(tmp_path, monkeypatch, capsys):
    """Read line by line within TABLE_LIMIT_BYTES: the reader stops at the bound while the writer still
    writes (read whole, they were all taken before anything was checked)."""
    import analysis.ingest.load_records as load_records

    monkeypatch.setattr(load_records, "TABLE_LIMIT_BYTES", 64 * 1024, raising=False)
    fifo = tmp_path / "synthetic-requests.jsonl"
    os.mkfifo(fifo)
    writer = _Writer(fifo, _records(20000))  # about 2.6 MB
    writer.start_and_wait_for_open()
    assert main(["analyze", str(CPU_DEMO), "--load-records", str(fifo)]) == 2
    line = _one_error_line(capsys)
    assert f"{fifo}: cannot read the load records: the file larger than 65536 bytes, the most this reads" in line
    writer.join(30)
    assert writer.cut_off  # the reader left before the writer's end


def test_a_runs_load_records_are_held_to_their_bound(run_dir, tmp_path, monkeypatch, capsys):
    """`analyze RUN_DIR` reads the run's load/requests.jsonl (127 kB here) within the table bound
    (it used to be read whole, 1.5 GB in the issue, past the documented 1 GiB)."""
    import analysis.ingest.load_records as load_records

    monkeypatch.setattr(load_records, "TABLE_LIMIT_BYTES", 64 * 1024, raising=False)
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert f"{run_dir / 'load' / 'requests.jsonl'}: cannot read the load records: the file is 127562 bytes" in line
    assert "more than the 65536 bytes this reads" in line


def test_the_harness_reader_of_load_records_goes_through_the_door(tmp_path):
    from analysis.api import InputFileError
    from harness.load.summary import load_records

    records = tmp_path / "synthetic-requests.jsonl"
    records.write_bytes(_records(3) + b"\n" + b'{"ok": true, "itl_ms": [' + b"[" * 70 + b"]" * 70 + b"]}\n")
    with pytest.raises(InputFileError, match=r"synthetic-requests.jsonl:5: JSON nested more than 64 levels"):
        load_records(str(records))
    with pytest.raises(InputFileError, match="not a regular file or a pipe"):
        load_records("/dev/null")


# --- pipes and FIFOs --------------------------------------------------------------------------------

def _plain_trace() -> bytes:
    """The bundled SGLang trace, uncompressed (a plain trace streams as it is written)."""
    return gzip.decompress(SGLANG.read_bytes())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["trace", "load records"])
def test_a_fifo_with_a_writer_is_read_whole_and_right(what, tmp_path, capsys):
    """The early reader opened a named FIFO and closed it before the load: its writer died and the load
    read an empty file (with --jobs 1 it read right); --load-records was read twice (checked, then
    loaded: the second read found the pipe drained). Through a FIFO the files written are the file's."""
    path = tmp_path / ("synthetic-TP-0-DECODE.trace.json" if what == "trace" else "synthetic-requests.jsonl")
    data = _plain_trace() if what == "trace" else _records(300)
    argv = ["analyze", str(path)] if what == "trace" else ["analyze", str(CPU_DEMO), "--load-records", str(path)]
    path.write_bytes(data)
    assert main([*argv, "--jobs", "2", "--out", str(tmp_path / "from-file")]) == 0
    path.unlink()
    os.mkfifo(path)
    writer = _Writer(path, data)
    writer.start_and_wait_for_open()
    assert main([*argv, "--jobs", "2", "--out", str(tmp_path / "from-fifo")]) == 0
    writer.join(30)
    assert not writer.cut_off
    capsys.readouterr()
    for table in ("d4.csv", "steps.csv", "checks.csv"):
        assert (tmp_path / "from-fifo" / table).read_bytes() == (tmp_path / "from-file" / table).read_bytes()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["trace", "load records"])
def test_a_fifo_whose_writer_stalls_is_an_error_not_a_hang(what, tmp_path, monkeypatch, capsys):
    """The writer sends part, then nothing: after the idle bound (lowered to 1 s) a one-line error.
    The old reader waited on the writer (here it resumes after 30 s and the command went through)."""
    import analysis.io.input_files as door

    monkeypatch.setattr(door, "PIPE_IDLE_LIMIT_S", 1.0, raising=False)
    fifo = tmp_path / ("synthetic-TP-0-DECODE.trace.json" if what == "trace" else "synthetic-requests.jsonl")
    os.mkfifo(fifo)
    data = _plain_trace() if what == "trace" else _records(2000)
    writer = _Writer(fifo, data, stall_after=len(data) // 2)
    writer.start_and_wait_for_open()
    argv = ["analyze", str(fifo)] if what == "trace" else ["analyze", str(CPU_DEMO), "--load-records", str(fifo)]
    try:
        assert main([*argv, "--jobs", "1"]) == 2
    finally:
        writer.release.set()
        writer.join(30)
    line = _one_error_line(capsys)
    assert f"{fifo}: " in line and "its writer stalled" in line
    assert "nothing came through the pipe for 1 s after" in line


# --- a run's manifest.json -------------------------------------------------------------------------

def _commands(run_dir: Path, out: Path) -> dict[str, list[str]]:
    return {"analyze": ["analyze", str(run_dir), "--out", str(out / "analyze")],
            "report": ["report", str(run_dir), "--out", str(out / "report")],
            "export": ["export", str(run_dir), "--out", str(out / "export")],
            "metrics": ["metrics", str(run_dir)]}


@pytest.mark.parametrize("command", ["analyze", "report", "export", "metrics"])
def test_a_manifest_over_its_bound_is_refused_unread(command, run_dir, tmp_path, capsys):
    """A manifest lists files (10 kB here); one of 17 MiB is refused by its size before it is read
    (629 MB was read whole by analyze, report and export)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["synthetic_padding"] = "x" * (17 * 1024 * 1024)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert main(_commands(run_dir, tmp_path)[command]) != 0
    line = _one_error_line(capsys)
    assert f"{run_dir / 'manifest.json'}: a run manifest is " in line and "more than the 16 MiB this reads" in line


@pytest.mark.parametrize("command", ["analyze", "metrics"])
def test_a_manifest_nested_past_its_bound_is_refused(command, run_dir, tmp_path, capsys):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    nested: list = []
    for _ in range(100):
        nested = [nested]
    manifest["synthetic_nesting"] = nested
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert main(_commands(run_dir, tmp_path)[command]) != 0
    assert f"{run_dir / 'manifest.json'}: JSON nested more than 64 levels deep" in _one_error_line(capsys)


def test_nesting_is_bounded_by_the_structure_not_by_brackets_in_strings():
    """JSON_DEPTH_LIMIT levels and no more, counted on the brackets outside strings: a bracket inside a
    string neither adds a level nor hides one (strings of "]" then "[" around each level would cancel
    the levels of a count over every bracket)."""
    from analysis.io.input_files import InputFileError, parsed_json

    def nested(levels: int) -> list:
        value: list = []
        for _ in range(levels - 1):
            value = ["]", value, "[\\\"["]
        return value

    assert parsed_json(json.dumps(nested(64)), "synthetic.json") == nested(64)
    for text in ("[" * 65 + "]" * 65, json.dumps(nested(65)), json.dumps(nested(65)).encode("utf-16")):
        with pytest.raises(InputFileError, match="synthetic.json: JSON nested more than 64 levels deep"):
            parsed_json(text, "synthetic.json")
    flat = {"kernel": "[" * 200 + "{" * 200, "rows": [[1, 2], {"a": "]]]\\"}]}
    assert parsed_json(json.dumps(flat).encode(), "synthetic.json") == flat


# --- gzip inflation: the page's annotated trace ----------------------------------------------------

def test_the_annotated_trace_inflates_within_its_bound(run_dir, tmp_path, monkeypatch, capsys):
    """`view` writes each trace with its attribution added, holding it whole: a .gz is inflated within
    ANNOTATED_TRACE_LIMIT_BYTES (lowered here to 1 MiB: the run's trace inflates to more); it was
    inflated whole (a 2.6 MB gzip of spaces inflated to 5.3 GB)."""
    import analysis.report.annotated_trace as annotated_trace

    monkeypatch.setattr(annotated_trace, "ANNOTATED_TRACE_LIMIT_BYTES", 1024 * 1024, raising=False)
    assert main(["view", str(run_dir), "--out", str(tmp_path / "view")]) != 0
    line = _one_error_line(capsys)
    assert ".trace.json.gz: the trace to annotate inflates to more than 1 MiB, the most this reads" in line
    assert "--no-annotated-trace leaves the annotated trace out" in line


def test_a_gzip_is_inflated_member_by_member_and_a_cut_or_corrupt_one_is_named(tmp_path):
    from analysis.io.input_files import InputFileError, read_input_gzip

    text = b'{"traceEvents": []}' * 1000
    members = tmp_path / "synthetic-members.json.gz"
    members.write_bytes(gzip.compress(text[:7000]) + gzip.compress(text[7000:]) + b"\0" * 16)
    assert read_input_gzip(members, 1 << 20, 1 << 20) == text
    cut = tmp_path / "synthetic-cut.json.gz"
    cut.write_bytes(gzip.compress(text)[:-12])
    with pytest.raises(InputFileError, match="synthetic-cut.json.gz: truncated gzip file"):
        read_input_gzip(cut, 1 << 20, 1 << 20)
    corrupt = tmp_path / "synthetic-corrupt.json.gz"
    corrupt.write_bytes(b"\x1f\x8b" + b"not deflate at all")
    with pytest.raises(InputFileError, match="synthetic-corrupt.json.gz: not valid gzip data"):
        read_input_gzip(corrupt, 1 << 20, 1 << 20)
    with pytest.raises(InputFileError, match="inflates to more than 4096 bytes"):
        read_input_gzip(members, 1 << 20, 4096)
