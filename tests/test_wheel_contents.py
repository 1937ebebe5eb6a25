"""The built wheel is the product a user installs: it must carry every file the code reads at run time
and work from outside the checkout. Why: setuptools packs only what package-data names, so a data file
left out (the shipped scenarios lived beside the packages, not in them) passes every test run from the
checkout and fails only for the user who installed the wheel.

The wheel is built the way a release is (`python -m build`: sdist, then the wheel from the sdist) from a
copy of the build's inputs, then installed with pip --no-deps into a fresh venv whose dependencies come from this
test environment's site-packages (a .pth line: no download, and the checkout's editable install is not
activated). .ci/package_check.sh does the same with a clean venv and every dependency from the index.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analysis", "harness")
SHIPPED_SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
BUILD_INPUTS = ("pyproject.toml", "README.md", *PACKAGES, "scenarios")  # what the sdist is made of
BUILD_TIMEOUT_S = 300  # a bound for a stuck build, not a speed check


def _source_files(source: Path) -> set[str]:
    """Every file under the packages that is not bytecode, as wheel paths (links followed: harness/scenarios)."""
    found = set()
    for package in PACKAGES:
        for folder, subfolders, files in os.walk(source / package, followlinks=True):
            subfolders[:] = [name for name in subfolders if name != "__pycache__"]
            found.update(Path(folder, name).relative_to(source).as_posix() for name in files
                         if not name.endswith((".pyc", ".pyo")))
    return found


def _clean_source(into: Path) -> Path:
    """The build's inputs copied out of the checkout: a build in place would read a stale
    *.egg-info/SOURCES.txt (setuptools packs what it lists, so a file dropped from package-data would
    still ship) and write build/ and *.egg-info into the checkout."""
    for name in BUILD_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, into / name)
    return into


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(the copied source, the wheel built from it): the wheel is checked against that one snapshot."""
    source, out = _clean_source(tmp_path_factory.mktemp("source")), tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return source, next(out.glob("*.whl"))


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; its bin folder."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", where], capture_output=True, text=True,
                               check=True, timeout=120).stdout.strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", "--no-index", str(built[1])],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


def _outside_checkout(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


def test_wheel_carries_every_file_of_the_packages_and_the_shipped_scenarios(built):
    source, wheel = built
    with zipfile.ZipFile(wheel) as packed:
        carried = set(packed.namelist())
    missing = sorted(_source_files(source) - carried)
    assert not missing, f"not in {wheel.name}: {missing}"
    scenarios = {f"harness/scenarios/{path.name}" for path in SHIPPED_SCENARIOS}
    assert SHIPPED_SCENARIOS and scenarios <= carried, sorted(scenarios - carried)


def test_installed_wheel_prints_its_version(installed, tmp_path):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    said = _outside_checkout([str(installed / "moe-harness"), "--version"], tmp_path)
    assert (said.returncode, said.stdout.strip()) == (0, f"moe-harness {version}"), said.stderr


@pytest.mark.parametrize("shipped", SHIPPED_SCENARIOS, ids=lambda path: path.stem)
def test_installed_wheel_validates_a_shipped_scenario_by_name_outside_the_checkout(installed, tmp_path, shipped):
    checked = _outside_checkout([str(installed / "moe-harness"), "validate", shipped.stem], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    read_from = Path(checked.stdout.split()[1])  # `ok: FILE (scenario NAME, ...)`
    assert read_from.name == shipped.name and installed.parent.resolve() in read_from.parents, checked.stdout
    assert read_from.read_bytes() == shipped.read_bytes(), f"{read_from} differs from {shipped}"


def test_an_installed_wheel_ships_its_two_packages_to_a_cluster_not_its_environment(installed, tmp_path):
    """With RAY_ADDRESS the driver hands Ray the code its workers run: the checkout, or from a wheel the
    analysis and harness packages where they are installed (the folder above them is site-packages,
    which as a working_dir would be the whole environment)."""
    script = ("import json, harness.run as r\nfrom pathlib import Path\n"
              "print(json.dumps(r.code_runtime_env(Path(r.__file__).resolve().parent.parent)))\n")
    said = _outside_checkout([str(installed / "python"), "-c", script], tmp_path)
    assert said.returncode == 0, said.stderr
    env = json.loads(said.stdout)
    assert "working_dir" not in env and [Path(p).name for p in env["py_modules"]] == ["analysis", "harness"]
    assert all(installed.parent.resolve() in Path(p).parents and (Path(p) / "__init__.py").is_file()
               for p in env["py_modules"]), env
    from harness.run import code_runtime_env

    assert code_runtime_env(ROOT)["working_dir"] == str(ROOT)  # a checkout ships itself, as before
