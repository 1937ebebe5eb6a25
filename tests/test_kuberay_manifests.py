"""cluster/kuberay/*.yaml checked without a cluster: against the schema of the fields they use
(cluster/kuberay/schema/kuberay-v1.yaml, facts from KubeRay's CRDs and the Kubernetes API) and against
what the harness reads (its variables, --runs-dir, the SGLang release, the per-run environment)."""
from __future__ import annotations

import argparse
import copy
import re
import shlex
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parent.parent
KUBERAY = REPO / "cluster" / "kuberay"
SCHEMA = yaml.safe_load((KUBERAY / "schema" / "kuberay-v1.yaml").read_text())
SITE_RULES = yaml.safe_load((KUBERAY / "schema" / "site-env-rules.yaml").read_text())
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"}


def _manifests() -> list[tuple[str, dict]]:
    """(file name, object) for every object of every manifest in cluster/kuberay/."""
    return [(path.name, obj) for path in sorted(KUBERAY.glob("*.yaml"))
            for obj in yaml.safe_load_all(path.read_text()) if obj is not None]


def _one(kind: str, name: str | None = None) -> dict:
    found = [o for _, o in _manifests() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"cluster/kuberay/*.yaml: {len(found)} {kind} {name or ''} where one is needed"
    return found[0]


def _schema_problems(file: str, obj: dict) -> list[str]:
    """One line per schema violation: FILE: KIND at PATH: what."""
    kind = obj.get("kind")
    if kind not in SCHEMA["kinds"]:
        return [f"{file}: kind {kind!r} has no schema in cluster/kuberay/schema/kuberay-v1.yaml"]
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": SCHEMA["$defs"], **SCHEMA["kinds"][kind]}
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{file}: {kind} at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in validator.iter_errors(obj)]


def _quantity_bytes(text) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text)).groups()
    return float(number) * units.get(unit, 1)


def _ray_pods() -> list[dict]:
    cluster = _one("RayCluster")
    return [cluster["spec"]["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]]


def _head() -> dict:
    return _one("RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]


def _env_of(container: dict) -> dict[str, str | None]:
    """The container's variables: its own (None for a secret's), then every key of the ConfigMaps it takes."""
    env = {}
    for ref in container.get("envFrom", []):
        env.update(_one("ConfigMap", ref["configMapRef"]["name"])["data"])
    env.update({e["name"]: e.get("value") for e in container.get("env", [])})
    return env


def _entrypoint_args() -> argparse.Namespace:
    """The RayJob's entrypoint parsed by harness/run.py's own arguments."""
    from harness.run import add_arguments

    tokens = shlex.split(_one("RayJob")["spec"]["entrypoint"])
    assert tokens[:2] == ["python", "/opt/moe-harness/harness/run.py"], tokens
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(tokens[2:])


def test_every_manifest_the_guide_applies_exists_and_validates_against_the_schema():
    kinds = sorted(obj["kind"] for _, obj in _manifests())
    assert kinds == ["ConfigMap", "Job", "PersistentVolumeClaim", "PersistentVolumeClaim", "RayCluster", "RayJob"]
    problems = [line for file, obj in _manifests() for line in _schema_problems(file, obj)]
    assert not problems, "\n".join(problems)
    guide = (REPO / "docs" / "kuberay.md").read_text()
    assert all(f"`{path.name}`" in guide for path in KUBERAY.glob("*.yaml")), "docs/kuberay.md lists every manifest"
    # The schema refuses what the API server would drop or refuse (it is not a pass-everything schema).
    cluster = _one("RayCluster")
    for mutate, expected in (
        (lambda c: c["spec"]["workerGroupSpecs"][0].update(rayStartParam={}), "rayStartParam"),
        (lambda c: c["spec"]["headGroupSpec"]["rayStartParams"].update({"num-gpus": 0}), "is not of type 'string'"),
        (lambda c: c["spec"]["workerGroupSpecs"][0]["template"]["spec"].update(dnsPolicy="ClusterFirstHostNet"), "dnsPolicy"),
        (lambda c: c["spec"]["authOptions"].update(mode="tokens"), "authOptions/mode"),
    ):
        bad = copy.deepcopy(cluster)
        mutate(bad)
        assert expected in "\n".join(_schema_problems("raycluster.yaml", bad)), expected


def test_gpu_workers_get_whole_nodes_one_rdma_resource_the_host_network_and_sized_shared_memory():
    text = (KUBERAY / "raycluster.yaml").read_text()
    for group in _one("RayCluster")["spec"]["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        (worker,) = pod["containers"]
        limits = worker["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 8
        extended = [name for name in limits if name not in STANDARD_RESOURCES]  # the RDMA device plugin's
        assert len(extended) == 1, f"{group['groupName']}: one RDMA device resource wanted, limits ask for {extended}"
        rdma = extended[0]
        assert int(limits[rdma]) >= 1
        assert text.count(rdma) == 1, f"raycluster.yaml names {rdma} in one place only"
        assert f"`{rdma}: 1`" in (REPO / "docs" / "kuberay.md").read_text()
        assert pod.get("hostNetwork") is True, f"{group['groupName']}: NCCL and DeepEP need the node's RDMA NICs"
        assert pod.get("dnsPolicy") == "ClusterFirstWithHostNet", f"{group['groupName']}: else the head's Service does not resolve"
        assert "IPC_LOCK" in worker["securityContext"]["capabilities"]["add"]
    for pod in _ray_pods():
        (container,) = pod["containers"]
        (shm,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == shm["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"
        shm_bytes = _quantity_bytes(volume["emptyDir"]["sizeLimit"])
        assert shm_bytes >= 8 * 2**30, f"{container['name']}: /dev/shm of {volume['emptyDir']['sizeLimit']}"
        assert _quantity_bytes(container["resources"]["limits"]["memory"]) > 2 * shm_bytes, container["name"]


def test_site_variables_come_from_one_configmap_that_sets_none_the_run_sets():
    site = _one("ConfigMap", "moe-harness-site-env")["data"]
    assert not set(SITE_RULES["required"]) - set(site), "site-env.yaml lacks required site variables"
    env_defaults = yaml.safe_load((REPO / "harness" / "sglang" / "env_defaults.yaml").read_text())
    per_run = {name for section in env_defaults.values() for name in section} | set(SITE_RULES["deepep_sets"])
    assert not per_run & set(site), f"set per run, a site value would be replaced: {sorted(per_run & set(site))}"
    for pod in _ray_pods():
        (container,) = pod["containers"]
        assert {"configMapRef": {"name": "moe-harness-site-env"}} in container["envFrom"], container["name"]


def test_weights_and_runs_live_on_shared_volumes_the_pods_mount():
    claims = {c["metadata"]["name"]: c["spec"] for c in (o for _, o in _manifests() if o["kind"] == "PersistentVolumeClaim")}
    assert all(spec["accessModes"] == ["ReadWriteMany"] for spec in claims.values())
    hf_home = _one("ConfigMap", "moe-harness-site-env")["data"]["HF_HOME"]
    assert _one("ConfigMap", "moe-harness-site-env")["data"]["HF_HUB_OFFLINE"] == "1"

    def mount_of(pod: dict, container: dict, claim: str) -> str:
        (volume,) = [v["name"] for v in pod.get("volumes", []) if v.get("persistentVolumeClaim", {}).get("claimName") == claim]
        (path,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume]
        return path

    for group in _one("RayCluster")["spec"]["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        assert hf_home.startswith(mount_of(pod, pod["containers"][0], "moe-harness-weights") + "/"), group["groupName"]
    stage = _one("Job", "moe-harness-stage-weights")["spec"]["template"]["spec"]
    (stager,) = stage["containers"]
    assert _env_of(stager)["HF_HOME"] == hf_home  # staged where the servers look
    assert hf_home.startswith(mount_of(stage, stager, "moe-harness-weights") + "/")
    assert "HF_HUB_OFFLINE" not in _env_of(stager)
    head = _head()
    assert mount_of(head, head["containers"][0], "moe-harness-runs") == "/runs"
    assert _quantity_bytes(claims["moe-harness-weights"]["resources"]["requests"]["storage"]) >= 690e9


def test_the_driver_finds_every_variable_it_reads_and_its_runs_land_on_the_runs_volume():
    from harness.run_dir import RUNS_DIR_ENV
    from harness.scenario import load_scenario

    (head,) = _head()["containers"]
    head_env = _env_of(head)
    passthrough = {name for path in sorted((REPO / "scenarios").glob("*.yaml"))
                   if (engine := load_scenario(str(path))[0].engine).kind == "sglang"
                   for name in engine.passthrough_env}
    assert passthrough and not passthrough - set(head_env), f"unset on the head: {sorted(passthrough - set(head_env))}"
    args = _entrypoint_args()
    assert args.runs_dir == head_env[RUNS_DIR_ENV], "the RayJob and a plain submission land in one folder"
    runs_mount = [m["mountPath"] for m in head["volumeMounts"]
                  if any(v["name"] == m["name"] and "persistentVolumeClaim" in v for v in _head()["volumes"])]
    assert args.runs_dir.startswith("/") and any(args.runs_dir.startswith(p + "/") for p in runs_mount), args.runs_dir
    assert (REPO / "scenarios" / f"{args.scenario}.yaml").exists()


def test_token_authentication_is_on_and_versions_agree():
    from harness.sglang.version import load_version

    cluster = _one("RayCluster")
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}
    assert _one("RayJob")["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]
    ray_version = cluster["spec"]["rayVersion"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", ray_version), ray_version
    dockerfile = (REPO / "Dockerfile").read_text()  # the image's Ray: a literal pin or the RAY_VERSION build argument
    dockerfile_pins = re.findall(r"ray(?:\[[a-z,]+\])?==([0-9.]+)", dockerfile) + re.findall(r"ARG RAY_VERSION=([0-9.]+)", dockerfile)
    assert dockerfile_pins and set(dockerfile_pins) == {ray_version}, f"Dockerfile pins Ray {dockerfile_pins}, rayVersion is {ray_version}"
    default = load_version()
    images = [c["image"] for _, obj in _manifests() for c in _containers(obj)]
    assert images and all(image.endswith(f":sglang-v{default.version}") for image in images), images
    assert _entrypoint_args().sglang_version == default.version


def _containers(obj: dict) -> list[dict]:
    """Every container of a manifest's pod templates, wherever they sit."""
    found = []
    if isinstance(obj, dict):
        if "containers" in obj and isinstance(obj["containers"], list):
            found += obj["containers"]
        for value in obj.values():
            found += _containers(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _containers(value)
    return found
