"""One scheduling cycle with topology-aware placement at GPU-cluster scale.

The cluster: NODES nodes of 8 GPUs, 4 nodes a rack, 8 racks a block, labelled as kuota's kwok nodes are
(topology.kuota.dev/block, topology.kuota.dev/rack, kubernetes.io/hostname), one flavor with that topology. The
queues: 5,000 pending gangs over 500 teams (10 each), of mixed sizes and wishes, seeded: single pods of 1, 2 or 4
GPUs with no wish; 1 and 2 whole nodes preferring one host; 4 nodes requiring one rack; 8 nodes preferring one
rack; 16 nodes requiring one block. Every team's quota is larger than the cluster, so the nodes decide.

Timed: `QueueManager.schedule` for the first cycle (500 heads: the copy of the node inventory, nomination with
flavor assignment and placement, ordering, the decisions and their placements charged), from a fresh manager each
run. Reported per run: cycle ms (wall and CPU), admissions, ms per admission; then median and range over the runs,
and the load average before the runs. `--without-topology` times the same cycle on a flavor without a topology
(quota only; the nodes are not looked at), for the cost placement adds.

    .venv/bin/python bench/topology.py [--nodes 1000 4000] [--runs 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.cycle import Verdict
from admission.nodes import NodeInventory
from admission.workload import Workload
from queues.manager import QueueManager
from quota.config import QuotaConfig
from quota.loader import load_config_text
from quota.pod_set import PodSet, TopologyRequest
from sim.nodes import BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL, generated_nodes

GPU = "nvidia.com/gpu"
TEAMS = 500
GANGS_PER_TEAM = 10
#: (weight, pods, GPUs per pod, wish)
SHAPES: tuple[tuple[int, int, int, TopologyRequest | None], ...] = (
    (30, 1, 1, None),
    (15, 1, 2, None),
    (15, 1, 4, None),
    (10, 1, 8, TopologyRequest(HOSTNAME_LABEL, False)),
    (10, 2, 8, TopologyRequest(HOSTNAME_LABEL, False)),
    (10, 4, 8, TopologyRequest(RACK_LABEL, True)),
    (7, 8, 8, TopologyRequest(RACK_LABEL, False)),
    (3, 16, 8, TopologyRequest(BLOCK_LABEL, True)),
)


def config(topology: bool = True) -> QuotaConfig:
    teams = "\n".join(
        f"  - {{name: t{i:03d}, queues: [ml/t{i:03d}], quotas: [{{flavor: h100, resources: "
        f"{{{GPU}: {{nominal: 100000}}, cpu: {{nominal: 10000000}}}}}}]}}"
        for i in range(TEAMS)
    )
    return load_config_text(
        f"topologies: [{{name: fabric, levels: [{BLOCK_LABEL}, {RACK_LABEL}, {HOSTNAME_LABEL}]}}]\n"
        f"flavors: [{{name: h100{', topology: fabric' if topology else ''}}}]\n"
        f"teams:\n{teams}\n"
    )


def gangs(seed: int) -> list[Workload]:
    rng = random.Random(seed)
    weights = [s[0] for s in SHAPES]
    out = []
    for index in range(TEAMS * GANGS_PER_TEAM):
        _, pods, gpus, wish = rng.choices(SHAPES, weights)[0]
        pod_set = PodSet("main", pods, {GPU: gpus * 1000, "cpu": gpus * 8000}, topology=wish)
        out.append(Workload(f"gang-{index:05d}", f"t{index % TEAMS:03d}", 0, (pod_set,), created_at=index))
    return out


def one_cycle(quota: QuotaConfig, workloads: list[Workload], nodes: int) -> tuple[float, float, int, int]:
    manager = QueueManager(quota)
    manager.nodes = NodeInventory(generated_nodes(nodes, 8, 4, 8))
    for workload in workloads:
        manager.add(workload)
    start, cpu = time.perf_counter(), time.process_time()
    result = manager.schedule(now=0)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    admitted = [d for d in result.decisions if d.verdict is Verdict.ADMITTED]
    placing = quota.topology_of("h100") is not None
    assert all(bool(d.placements) == placing for d in admitted), "a placement where none was asked, or none"
    gpus = sum(d.workload.pod_sets[0].requests[GPU] * d.counts["main"] for d in admitted) // 1000
    return elapsed * 1000, cpu * 1000, len(admitted), gpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--without-topology", action="store_true", help="the same cycle on a flavor without topology (quota only)"
    )
    args = parser.parse_args()
    quota, workloads = config(not args.without_topology), gangs(args.seed)
    print(f"{len(workloads)} pending gangs over {TEAMS} teams; load average before: {os.getloadavg()[0]:.2f}")
    for nodes in args.nodes:
        cycles, cpus, per_admission = [], [], []
        for run in range(args.runs):
            ms, cpu, admitted, gpus = one_cycle(quota, workloads, nodes)
            cycles.append(ms)
            cpus.append(cpu)
            per_admission.append(ms / admitted if admitted else float("nan"))
            print(
                f"  {nodes} nodes, run {run + 1}: cycle {ms:.1f} ms wall, {cpu:.1f} ms CPU; {admitted} admitted"
                f" ({gpus} of {nodes * 8} GPUs); {per_admission[-1]:.3f} ms per admission"
            )
        print(
            f"== {nodes} nodes: cycle median {statistics.median(cycles):.1f} ms"
            f" ({min(cycles):.1f}-{max(cycles):.1f}), CPU median {statistics.median(cpus):.1f} ms"
            f" ({min(cpus):.1f}-{max(cpus):.1f}); per admission median {statistics.median(per_admission):.3f} ms"
            f" ({min(per_admission):.3f}-{max(per_admission):.3f}); targets < 200 ms and < 2 ms"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
