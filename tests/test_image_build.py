"""The Dockerfile's promises that can be checked without building it (CI builds it: .ci/image_check.sh).

Why: the image is built FROM one of two bases (the official SGLang image on clusters, a Debian root
file system in CI) and must run the Ray release the KubeRay manifests declare; a stale pin or a base
argument that only one base honours is found only when a cluster's pods fail to join.
"""
from __future__ import annotations

import re
import shlex
import shutil
import zipfile
from pathlib import Path

import yaml
from packaging.requirements import Requirement

from harness.sglang.version import load_version
from harness.sglang.wheel_source import release_wheel

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _instructions(keyword: str) -> list[str]:
    """The Dockerfile's instructions of one kind, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    return [line.strip()[len(keyword) + 1:] for line in joined.splitlines() if line.startswith(keyword + " ")]


def _arg_defaults() -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in _instructions("ARG") if "=" in arg)


def _sglang_requirements(extra: str = "") -> dict[str, Requirement]:
    """Requires-Dist of the default SGLang release's wheel on Linux x86-64, with `extra` or without any
    (the wheel cache the flag checks use)."""
    version = load_version().version
    with zipfile.ZipFile(release_wheel(load_version())) as wheel:
        metadata = wheel.read(f"sglang-{version}.dist-info/METADATA").decode()
    reqs = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    linux = {"sys_platform": "linux", "platform_machine": "x86_64", "extra": extra}
    return {r.name.lower(): r for r in reqs if r.marker is None or r.marker.evaluate(linux)}


def test_one_from_line_takes_the_base_argument_whose_default_is_the_default_sglang_image():
    froms = _instructions("FROM")
    assert froms == ["${BASE}"], f"Dockerfile: expected one FROM ${{BASE}}, found {froms}"
    args = _arg_defaults()
    assert args["BASE"] == "${SGLANG_IMAGE}"
    assert args["SGLANG_IMAGE"] == load_version().docker_image
    # Both global arguments come before FROM, where Docker and buildah substitute them.
    assert DOCKERFILE.index("ARG BASE=") < DOCKERFILE.index("FROM ")


def test_ray_is_pinned_to_the_kuberay_release_that_sglang_accepts():
    ray_version = _arg_defaults().get("RAY_VERSION")
    manifest = yaml.safe_load((ROOT / "cluster/kuberay/raycluster.yaml").read_text())
    assert ray_version == manifest["spec"]["rayVersion"], (ray_version, manifest["spec"]["rayVersion"])
    installs = " ".join(run for run in _instructions("RUN") if "pip install" in run)
    assert '"ray[default]==${RAY_VERSION}"' in installs, installs
    sglang_ray = _sglang_requirements(extra="ray")["ray"]
    assert sglang_ray.specifier.contains(ray_version), f"SGLang {load_version().version} asks {sglang_ray}"


def test_the_gpu_stack_the_comment_names_is_what_the_sglang_wheel_pins():
    """DeepEP, DeepGEMM, torch and transformers come with the SGLang image: the comment says which."""
    pins = _sglang_requirements()
    for name in ("torch", "transformers", "sgl-deep-ep", "sgl-deep-gemm"):
        (version,) = [s.version for s in pins[name].specifier if s.operator == "=="]
        assert f"{name} {version}" in DOCKERFILE, f"Dockerfile's comment: {name} is {version} in SGLang's wheel"
    assert f"SGLang {load_version().version}" in DOCKERFILE


def test_the_copied_tree_holds_what_the_installed_harness_reads(tmp_path):
    """The COPY lines replayed (links kept, as Docker keeps them): the shipped scenarios resolve in it."""
    workdir = tmp_path / "opt" / "moe-harness"
    workdir.mkdir(parents=True)
    for copy in _instructions("COPY"):
        *sources, dest = shlex.split(copy)
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile: COPY {source}: no such file in the checkout"
            target = workdir / dest / source if dest.endswith("/") else workdir / dest
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / source, target)
    shipped = sorted(p.name for p in (workdir / "harness" / "scenarios").glob("*.yaml"))
    expected = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
    assert shipped == expected, f"the image's harness/scenarios holds {shipped}, the checkout's scenarios/ {expected}"
    assert (workdir / "harness" / "sglang" / "versions.yaml").is_file()
