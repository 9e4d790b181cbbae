"""The Kubernetes node inventory at GPU-cluster scale: what a relist and a placement cost the controller's loop.

The cluster: NODES Node objects as kube-apiserver sends them (8 GPUs, kwok's labels), and on them one pod of another
tenant per 8 nodes plus the pods of NODES / 8 admitted gangs of 8 whole-node pods (labelled `kuota.dev/workload`),
so every node is full. Timed, through clusters/kube/nodes.py's NodeWatch exactly as the reflectors drive it:

* a relist of every node and every bound pod (a new leader's start, or after 410 Gone), before and after the queue
  manager binds each gang's placement (then the gangs' pods step aside);
* binding and taking back one gang's placement (the manager does this at each admission and each end);
* the per-cycle copy of the inventory.

Reported: median and range over the runs (wall ms), and the load average before the runs.

    .venv/bin/python bench/kube_inventory.py [--nodes 1000 4000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.labels import WORKLOAD_LABEL, workload_label_value
from clusters.kube.nodes import NodeWatch

GPU = "nvidia.com/gpu"
GANG = 8


def node(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:04d}"
    rack = i // 4
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kuota.dev/rack": f"rack-{rack:03d}",
                "topology.kuota.dev/block": f"block-{rack // 8:02d}",
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "96", "memory": "2Ti", GPU: "8", "pods": "256"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, node_name: str, workload: str | None) -> dict[str, Any]:
    labels = {WORKLOAD_LABEL: workload_label_value(workload)} if workload else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "8", GPU: "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000


def run(nodes: int) -> dict[str, float]:
    watch = NodeWatch()
    node_objs = [node(i) for i in range(nodes)]
    gangs = {f"Job/ml/gang-{g}": [f"gpu-node-{g * GANG + k:04d}" for k in range(GANG)] for g in range(nodes // GANG)}
    pods = [pod(f"{key.rsplit('/', 1)[1]}-{k}", n, key) for key, where in gangs.items() for k, n in enumerate(where)]
    # Another tenant's pod on one node of each gang (4 of its 8 GPUs would not fit beside a whole-node pod: it is
    # there instead of one gang pod, so the nodes stay exactly full).
    for g, where in enumerate(gangs.values()):
        pods[g * GANG] = pod(f"tenant-{g}", where[0], None)
    out: dict[str, float] = {}

    def relist() -> None:
        watch.nodes_listed(node_objs)
        watch.pods_listed(pods)

    out["relist, pods counted one by one"] = timed(relist)
    inventory = watch.inventory

    def place_all() -> None:
        for key, where in gangs.items():
            for n in where:
                inventory.bind(key, n, {GPU: 8_000, "cpu": 8_000, "pods": 1_000})

    out["bind every gang's placement"] = timed(place_all)
    out["relist, gangs by placement"] = timed(relist)
    key, where = next(iter(gangs.items()))

    def churn() -> None:
        for _ in range(100):
            inventory.unbind(key)
            for n in where:
                inventory.bind(key, n, {GPU: 8_000, "cpu": 8_000, "pods": 1_000})

    out["take back and bind one gang (x100)"] = timed(churn)
    out["the cycle's copy"] = timed(inventory.copy)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    for nodes in args.nodes:
        results = [run(nodes) for _ in range(args.runs)]
        print(f"{nodes} nodes, {nodes} bound pods, {nodes // GANG} gangs placed:")
        for step in results[0]:
            values = [r[step] for r in results]
            low, high = min(values), max(values)
            print(f"  {step}: {statistics.median(values):.1f} ms ({low:.1f}-{high:.1f})")


if __name__ == "__main__":
    main()
