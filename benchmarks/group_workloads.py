"""One collective node on several communicator groups: predicted against ASTRA-sim.

Run: ``python benchmarks/group_workloads.py`` (ASTRA-sim master's prebuilt binaries in
../shared/tools/astra-sim-master, or ``--bin-dir``). For each network, group layout and
collective (1 MiB on every group, one node id) it exports the workload bundle, runs it on
ASTRA-sim and prints the manifest's prediction (every group running the ET at once,
:mod:`tacos.replicas`), the ET's time on the group it was synthesized for alone (what
the bundle predicted before groups were timed together), and ASTRA-sim's slowest rank.

Networks: ring:8 with pipelined links (the congestion-aware binary, whose link model
that is) and torus2d:4x4 with paper links (two dimensions: the congestion-unaware
binary, which has no link queues, so groups whose messages cross each other's NPUs run
faster there than on a network with contention).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import tacos
from tacos.exporters.workload import export_workload
from tacos.formats.chakra import (
    CHAKRA_VERSION,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    attr,
    write_et,
)
from tacos.importers.workload import read_workload
from tacos.linkmodel import CostModel

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BIN_DIR = REPO.parent / "shared/tools/astra-sim-master/bin"
RANK_TIME = re.compile(r"rank (\d+): tacos (\d+) ns")
CASES = {
    ("ring:8", "pipelined"): {
        "interleaved": [[0, 2, 4, 6], [1, 3, 5, 7]],
        "paired": [[0, 1, 4, 5], [2, 3, 6, 7]],
        "diagonal": [[0, 3, 4, 7], [1, 2, 5, 6]],
        "halves": [[3, 1, 0, 2], [7, 5, 4, 6]],
    },
    ("torus2d:4x4", "paper"): {
        "rows": [list(range(8)), list(range(8, 16))],
        "checkerboard": [list(range(0, 16, 2)), list(range(1, 16, 2))],
        "diagonals": [[(y + k) % 4 + 4 * y for y in range(4)] for k in range(4)],
    },
}
KINDS = {"all-reduce": CollectiveCommType.ALL_REDUCE, "all-gather": CollectiveCommType.ALL_GATHER}


def write_workload(prefix: Path, groups: list[list[int]], comm_type: int) -> Path:
    """One 1 MiB collective node (id 0) on every group; the groups file beside it."""
    prefix.parent.mkdir(parents=True)
    group_of = {npu: str(g + 1) for g, members in enumerate(groups) for npu in members}
    for rank in sorted(group_of):
        node = Node(id=0, name="collective", type=NodeType.COMM_COLL_NODE)
        node.attr.extend([attr("comm_type", comm_type), attr("comm_size", 2**20),
                          attr("pg_name", group_of[rank])])  # fmt: skip
        write_et(f"{prefix}.{rank}.et", GlobalMetadata(version=CHAKRA_VERSION), [node])
    groups_file = prefix.parent / "groups.json"
    groups_file.write_text(json.dumps({str(g + 1): m for g, m in enumerate(groups)}))
    return groups_file


def slowest_rank_us(bundle: Path, bin_dir: Path) -> float:
    binary = bin_dir / "AstraSim_Analytical_Congestion_Aware"
    result = subprocess.run(
        [str(bundle / "run.sh"), "tacos"],
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRA_SIM_BIN": str(binary)},
        timeout=600,
        check=True,
    )
    return max(int(ns) for _, ns in RANK_TIME.findall(result.stdout)) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR)
    bin_dir = parser.parse_args().bin_dir
    print(f"{'network':22} {'layout':13} {'collective':11} {'alone us':>9} "
          f"{'predicted':>10} {'astra-sim':>10} {'ratio':>6}")  # fmt: skip
    for (spec, link_model), layouts in CASES.items():
        network = tacos.from_spec(spec).with_cost(CostModel(link_model=link_model))
        for layout, groups in layouts.items():
            for kind, comm_type in KINDS.items():
                with tempfile.TemporaryDirectory(prefix="tacos-groups-") as scratch:
                    prefix = Path(scratch) / "w" / "w"
                    groups_file = write_workload(prefix, groups, comm_type)
                    workload = read_workload(prefix, network.num_npus, groups_file)
                    _, plan = export_workload(workload, network, Path(scratch) / "bundle")
                    (et,) = plan.ets
                    measured = slowest_rank_us(Path(scratch) / "bundle", bin_dir)
                print(
                    f"{spec + ' ' + link_model:22} {layout:13} {kind:11} "
                    f"{et.schedule.collective_time_us:9.3f} {et.predicted_time_us:10.3f} "
                    f"{measured:10.3f} {measured / et.predicted_time_us:6.3f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
