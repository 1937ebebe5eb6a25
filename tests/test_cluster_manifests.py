from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def test_manifests_parse_and_ask_for_whole_8_gpu_nodes():
    cluster = yaml.safe_load((REPO / "cluster/kuberay/raycluster.yaml").read_text())
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    job = yaml.safe_load((REPO / "cluster/kuberay/rayjob.yaml").read_text())
    scenario = job["spec"]["entrypoint"].split("--scenario ")[1]
    assert (REPO / "scenarios" / f"{scenario}.yaml").exists()
    launcher = yaml.safe_load((REPO / "cluster/ray/cluster-launcher.yaml").read_text())
    assert "--num-gpus=8" in " ".join(launcher["worker_start_ray_commands"])
