from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def test_manifests_parse_and_ask_for_whole_8_gpu_nodes():
    cluster = yaml.safe_load((REPO / "cluster/kuberay/raycluster.yaml").read_text())
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    job = yaml.safe_load((REPO / "cluster/kuberay/rayjob.yaml").read_text())
    scenario = job["spec"]["entrypoint"].split("--scenario ")[1].split()[0]
    assert (REPO / "scenarios" / f"{scenario}.yaml").exists()
    launcher = yaml.safe_load((REPO / "cluster/ray/cluster-launcher.yaml").read_text())
    assert "--num-gpus=8" in " ".join(launcher["worker_start_ray_commands"])


def test_manifests_name_the_default_sglang_release():
    from harness.sglang.version import load_version

    tag = f"sglang-v{load_version().version}"
    cluster = yaml.safe_load((REPO / "cluster/kuberay/raycluster.yaml").read_text())
    images = [cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]]
    images += [g["template"]["spec"]["containers"][0]["image"] for g in cluster["spec"]["workerGroupSpecs"]]
    images.append(yaml.safe_load((REPO / "cluster/ray/cluster-launcher.yaml").read_text())["docker"]["image"])
    assert all(image.endswith(":" + tag) for image in images), images
    job = yaml.safe_load((REPO / "cluster/kuberay/rayjob.yaml").read_text())
    assert f"--sglang-version {load_version().version}" in job["spec"]["entrypoint"]
