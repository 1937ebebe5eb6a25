"""tests/real_traces.py fetch: downloads by commit, unpacks archive members, checks sha256, keeps what it got.

The origins (GitHub) cannot be reached from CI, so a local HTTP server plays GitHub's
REPO/raw/COMMIT/PATH layout, filled from the real traces beside the checkout (archives rebuilt
around the listed members).
"""
from __future__ import annotations

import functools
import io
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import real_traces
from conftest import real_trace


def _mirror(root: Path) -> None:
    archives: dict[Path, list[tuple[str, bytes]]] = {}
    for t in real_traces.load_sources():
        data = Path(real_trace(t.path)).read_bytes()
        target = root / t.repo / "raw" / t.commit / t.repo_path
        target.parent.mkdir(parents=True, exist_ok=True)
        if t.member:
            archives.setdefault(target, []).append((t.member, data))
        else:
            target.write_bytes(data)
    for target, members in archives.items():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        target.write_bytes(buf.getvalue())


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A local copy of the traces' origins. Traces marked `shared: false` are left out (and out of the
    list fetch reads) when this machine lacks them: CI has only ../shared's."""
    every = real_traces.load_sources()
    here = [t for t in every if t.shared or any((d / t.path).is_file() for d in real_traces.candidate_dirs())]
    monkeypatch.setattr(real_traces, "load_sources", lambda: here)
    root = tmp_path / "mirror"
    _mirror(root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_fetch_gets_every_listed_trace_then_only_what_is_missing_or_wrong(mirror, tmp_path):
    root, url = mirror
    dest = tmp_path / "traces"
    lines: list[str] = []
    assert real_traces.fetch(dest, url, log=lines.append) == []
    sources = real_traces.load_sources()
    for t in sources:
        assert (dest / t.path).read_bytes() == Path(real_trace(t.path)).read_bytes()
    assert sum(line.startswith("wrote") for line in lines) == len(sources)
    assert any("licence: MIT" in line for line in lines)
    # two traces come out of one archive: it is downloaded once
    assert sum(line.startswith("get") for line in lines) == len({(t.repo, t.commit, t.repo_path) for t in sources})

    first = dest / sources[0].path
    first.write_bytes(b"truncated")
    lines.clear()
    assert real_traces.fetch(dest, url, log=lines.append) == []
    assert [line.split()[0] for line in lines].count("wrote") == 1 and first.read_bytes() != b"truncated"


def test_fetch_refuses_bytes_that_are_not_the_listed_file_and_keeps_the_rest(mirror, tmp_path):
    root, url = mirror
    gpt = next(t for t in real_traces.load_sources() if t.path.endswith("eager_trace.json.gz"))
    (root / gpt.repo / "raw" / gpt.commit / gpt.repo_path).write_text("version https://git-lfs.github.com/spec/v1\n")
    dest = tmp_path / "traces"
    problems = real_traces.fetch(dest, url, log=lambda line: None)
    assert len(problems) == 1 and problems[0].startswith(gpt.path) and "sha256 is not the listed one" in problems[0]
    assert not (dest / gpt.path).exists()
    assert len([p for p in dest.rglob("*") if p.is_file()]) == len(real_traces.load_sources()) - 1


def test_fetch_names_the_url_that_failed(tmp_path):
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    problems = real_traces.fetch(tmp_path / "traces", dead, log=lambda line: None)
    assert len(problems) == len(real_traces.load_sources())
    assert all(f"{dead}/" in p for p in problems)


def test_where_the_tests_look(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(real_traces.ENV_DIR, str(tmp_path))
    assert real_traces.candidate_dirs() == [tmp_path] and real_traces.real_traces_dir() is None
    assert real_traces.main(["where"]) == 1 and f"looked in {tmp_path}" in capsys.readouterr().out
    assert "python tests/real_traces.py fetch" in real_traces.missing_message("x.json.gz")
