"""A real 2-node Ray cluster on this machine (two raylets, GPUs declared, none present)."""
from __future__ import annotations

import contextlib

import ray
from ray.cluster_utils import Cluster


@contextlib.contextmanager
def two_node_cluster(gpus_per_node: int = 2):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": gpus_per_node})
    cluster.add_node(num_cpus=1, num_gpus=gpus_per_node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
