"""The public real traces the suite checks the analysis on: where they are looked for, and how to fetch them.

They are other projects' data (tests/real_traces.yaml lists each with its origin, commit, licence
and sha256), so they are never copied into the repository. The folder is the first of:
$MOE_HARNESS_REAL_TRACES; a `shared/traces/real` folder beside the checkout (one or two levels up);
the download cache ($XDG_CACHE_HOME or ~/.cache, then moe-harness/real-traces).

    python tests/real_traces.py fetch [--dest DIR] [--base-url URL]   # download what is missing
    python tests/real_traces.py where                                  # the folder the tests read
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCES = Path(__file__).with_name("real_traces.yaml")
ENV_DIR = "MOE_HARNESS_REAL_TRACES"
ENV_REQUIRE = "MOE_HARNESS_REQUIRE_REAL_TRACES"  # "1": a missing real trace fails the test instead of skipping
GITHUB = "https://github.com"
FETCH_HINT = "python tests/real_traces.py fetch"


@dataclass(frozen=True)
class RealTrace:
    path: str
    what: str
    sha256: str
    repo: str
    commit: str
    repo_path: str
    member: str | None
    shared: bool = True  # in ../shared/traces/real (false: only from the cache or $MOE_HARNESS_REAL_TRACES)

    @property
    def licence(self) -> str:
        return load_licences().get(self.repo, "unknown")


def load_licences() -> dict[str, str]:
    return dict(yaml.safe_load(SOURCES.read_text())["licences"])


def load_sources() -> list[RealTrace]:
    doc = yaml.safe_load(SOURCES.read_text())
    return [RealTrace(t["path"], t["what"], t["sha256"], t["source"]["repo"], t["source"]["commit"],
                      t["source"]["path"], t["source"].get("member"), bool(t.get("shared", True)))
            for t in doc["traces"]]


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moe-harness" / "real-traces"


def candidate_dirs() -> list[Path]:
    """Where the traces are looked for, in order (the environment variable alone when it is set)."""
    if os.environ.get(ENV_DIR):
        return [Path(os.environ[ENV_DIR])]
    return [base / "shared" / "traces" / "real" for base in (REPO_ROOT.parent, REPO_ROOT.parent.parent)] + [cache_dir()]


def real_traces_dir() -> Path | None:
    """The first candidate folder that holds any listed trace; None when none does."""
    listed = [t.path for t in load_sources()]
    for d in candidate_dirs():
        if d.is_dir() and any((d / rel).is_file() for rel in listed):
            return d
    return None


def missing_message(rel: str) -> str:
    looked = ", ".join(str(d) for d in candidate_dirs())
    return (f"real trace {rel} not found (looked in {looked}); get the public real traces with "
            f"`{FETCH_HINT}` or point {ENV_DIR} at a folder holding them")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - fixed https origins (or a mirror the user names)
        return response.read()


def fetch(dest: Path, base_url: str = GITHUB, log=print) -> list[str]:
    """Download every listed trace missing from dest (or differing from its sha256); returns the
    problems (empty when all are there). What was fetched before a failure stays."""
    problems: list[str] = []
    archives: dict[str, bytes] = {}
    for t in load_sources():
        target = dest / t.path
        if target.is_file() and _sha256(target.read_bytes()) == t.sha256:
            log(f"have  {t.path}")
            continue
        url = f"{base_url.rstrip('/')}/{t.repo}/raw/{t.commit}/{t.repo_path}"
        try:
            if url not in archives:
                log(f"get   {url}")
                archives[url] = _download(url)
            data = archives[url]
            if t.member:
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                    member = tar.extractfile(t.member)
                    if member is None:
                        raise KeyError(t.member)
                    data = member.read()
        except KeyError:
            problems.append(f"{t.path}: {t.member} is not in {url}")
            continue
        except (OSError, tarfile.TarError) as exc:
            problems.append(f"{t.path}: {url}: {exc}")
            continue
        if _sha256(data) != t.sha256:
            problems.append(f"{t.path}: {url} gave {len(data)} bytes whose sha256 is not the listed one "
                            "(a Git LFS pointer, or a different file)")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(target)
        log(f"wrote {target} ({len(data)} bytes; {t.repo}, licence: {t.licence})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The public real traces the tests check the analysis on "
                                                 "(tests/real_traces.yaml: origins, commits, licences).")
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="download the traces missing from DEST, each checked against its sha256")
    get.add_argument("--dest", default=None, help=f"folder to fill (default: ${ENV_DIR}, else {cache_dir()})")
    get.add_argument("--base-url", default=GITHUB, help="where REPO/raw/COMMIT/PATH is served (default %(default)s)")
    sub.add_parser("where", help="print the folder the tests read the traces from")
    args = parser.parse_args(argv)
    if args.command == "where":
        found = real_traces_dir()
        print(found if found else f"none found; looked in {', '.join(map(str, candidate_dirs()))}")
        return 0 if found else 1
    dest = Path(args.dest or os.environ.get(ENV_DIR) or cache_dir())
    problems = fetch(dest, args.base_url)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if not problems:
        print(f"all {len(load_sources())} real traces in {dest}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
