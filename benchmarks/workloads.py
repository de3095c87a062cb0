"""Whole training workloads on ASTRA-sim: ASTRA-sim's own collectives vs synthesized ones.

Run: ``python benchmarks/workloads.py`` (ASTRA-sim master's prebuilt binaries in
../shared/tools/astra-sim-master, or ``--bin-dir``). For every workload and network
it exports the workload bundle (``tacos-export --format chakra --workload``), runs
ASTRA-sim with each native algorithm (ring, direct, halvingDoubling,
doubleBinaryTree) and with the synthesized collectives, and prints the end-to-end
time (slowest rank), the speedup over the best native algorithm, and the same for
communication time (ASTRA-sim's ``Comm time`` of rank 0: the time collectives were
in flight, hidden behind compute or not).

Workloads: ASTRA-sim's microbenchmarks (one 1 MB collective; the reference files for
8 NPUs, the same built for 16) and Chakra's text-converter examples (data-parallel
ResNet-50, hybrid-parallel DLRM, model-parallel MLP; ``tests/chakra_text.py``).
Networks: Ring, FullyConnected and Switch of 8 NPUs (congestion-aware binary); a
4x2 torus, a 2x2x2 mesh (the one mesh ASTRA-sim's Ring dimensions express), a
heterogeneous 4 x 2 network (fast FullyConnected inside, a slow Switch across) and a
4x4 torus (congestion-unaware binary).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tacos
from tacos.exporters.workload import WorkloadOptions, export_workload
from tacos.exporters.workload_config import (
    AWARE_BINARY,
    NATIVE_ALGORITHMS,
    PER_NODE_FILE,
    UNAWARE_BINARY,
    workload_system,
)
from tacos.formats.chakra import CHAKRA_VERSION, GlobalMetadata, Node, NodeType, attr, write_et
from tacos.formats.workload import CUSTOM_KINDS
from tacos.importers.workload import read_workload
from tacos.registry import analytical_network_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from chakra_text import convert  # noqa: E402  (a test helper, shared with the tests)

SHARED = REPO.parent / "shared"
DEFAULT_BIN_DIR = SHARED / "tools/astra-sim-master/bin"
REFERENCE_WORKLOADS = SHARED / "reference/astra-sim/workload"
TEXT_WORKLOADS = {
    "resnet50-dp": "Resnet50_DataParallel",
    "dlrm-hybrid": "DLRM_HybridParallel",
    "mlp-mp": "MLP_ModelParallel",
}
MICROBENCHMARKS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
COMM_TIME = re.compile(r"sys\[0\], Comm time: (\d+)")


@dataclass(frozen=True)
class Network:
    name: str
    yaml: str

    @property
    def dims(self) -> int:
        return self.yaml.splitlines()[0].count(",") + 1


def _network(name: str, kinds: str, npus: str, bandwidth: str, latency: str) -> Network:
    return Network(
        name,
        f"topology: [ {kinds} ]\nnpus_count: [ {npus} ]\n"
        f"bandwidth: [ {bandwidth} ]\nlatency: [ {latency} ]\n",
    )


NETWORKS_8 = [
    _network("ring:8", "Ring", "8", "50", "500"),
    _network("fully-connected:8", "FullyConnected", "8", "50", "500"),
    _network("switch:8", "Switch", "8", "50", "500"),
    _network("torus 4x2", "Ring, Ring", "4, 2", "50, 50", "500, 500"),
    _network("mesh 2x2x2", "Ring, Ring, Ring", "2, 2, 2", "50, 50, 50", "500, 500, 500"),
    _network("FC4@200 x Switch2@25", "FullyConnected, Switch", "4, 2", "200, 25", "250, 1000"),
]
NETWORKS_16 = [_network("torus 4x4", "Ring, Ring", "4, 4", "50, 50", "500, 500")]


@dataclass
class Result:
    end_ns: int | None
    comm_ns: int | None


def run(binary: Path, bundle: Path, system: Path, network: Path) -> Result:
    """ASTRA-sim's slowest rank and rank 0's communication time (None: a rank never finished)."""
    work = bundle / "run"
    work.mkdir(exist_ok=True)
    for name in ("et", PER_NODE_FILE):
        if (bundle / name).exists() and not (work / name).exists():
            (work / name).symlink_to(bundle / name)
    try:
        result = subprocess.run(
            [
                str(binary),
                f"--workload-configuration={bundle}/workload/workload",
                f"--system-configuration={system}",
                f"--network-configuration={network}",
                f"--remote-memory-configuration={bundle}/memory.json",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Result(None, None)
    finished = {int(r): int(t) for r, t in FINISHED.findall(result.stdout)}
    npus = len(list((bundle / "workload").glob("*.et")))
    if result.returncode != 0 or len(finished) != npus:
        return Result(None, None)
    comm = COMM_TIME.search(result.stdout)
    return Result(max(finished.values()), int(comm.group(1)) if comm else None)


def microbenchmark(kind: str, npus: int, prefix: Path) -> Path:
    """ASTRA-sim's microbenchmark workload (one 1 MB collective) for ``npus`` ranks."""
    if npus == 8:
        return REFERENCE_WORKLOADS / kind / kind
    comm_type = next(t for t, k in CUSTOM_KINDS.items() if k.value == kind.replace("_", "-"))
    node = Node(
        id=0,
        name=f"{kind}_{npus}npus_1MB",
        type=NodeType.COMM_COLL_NODE,
        attr=[attr("is_cpu_op", False), attr("comm_type", comm_type), attr("comm_size", 2**20)],
    )
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", GlobalMetadata(version=CHAKRA_VERSION), [node])
    return prefix


def workloads(npus: int, scratch: Path) -> dict[str, Path]:
    found = {kind: microbenchmark(kind, npus, scratch / kind / kind) for kind in MICROBENCHMARKS}
    for name, text in TEXT_WORKLOADS.items():
        prefix = scratch / name / name
        convert(REPO / "tests/data/chakra_text" / f"{text}.txt", npus, prefix)
        found[name] = prefix
    return found


def _us(ns: int | None) -> str:
    return "hang" if ns is None else f"{ns / 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR)
    parser.add_argument("--only", nargs="*", help="workload names to run (default all)")
    args = parser.parse_args()
    natives = " ".join(f"{n[:10]:>11}" for n in NATIVE_ALGORITHMS)
    print(
        f"{'workload':15} {'network':21} {natives} {'tacos':>11} {'best':>16} "
        f"{'speedup':>7} {'comm x':>7}   (end-to-end us of the slowest rank)"
    )
    worst = float("inf")
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for npus, networks in ((8, NETWORKS_8), (16, NETWORKS_16)):
            found = workloads(npus, scratch / f"workloads{npus}")
            for network in networks:
                net_file = scratch / f"{network.name.replace(' ', '_').replace(':', '_')}.yml"
                net_file.write_text(network.yaml)
                binary = args.bin_dir / (AWARE_BINARY if network.dims == 1 else UNAWARE_BINARY)
                topology = tacos.load_topology(str(net_file))
                for name, prefix in found.items():
                    if args.only and name not in args.only:
                        continue
                    bundle = scratch / "bundle" / f"{name}-{net_file.stem}"
                    export_workload(
                        read_workload(prefix, npus),
                        topology,
                        bundle,
                        WorkloadOptions(measure_with=binary),
                        analytical_network_file(net_file),
                    )
                    results = {}
                    for native in NATIVE_ALGORITHMS:
                        system = bundle / f"system_{native}.json"
                        system.write_text(json.dumps(workload_system(native, network.dims, {})))
                        results[native] = run(binary, bundle, system, net_file)
                    ours = run(binary, bundle, bundle / "system.json", net_file)
                    finished = {n: r for n, r in results.items() if r.end_ns is not None}
                    best = min(finished, key=lambda n: finished[n].end_ns or 0)
                    speedup = (finished[best].end_ns or 0) / (ours.end_ns or float("nan"))
                    comm = (
                        f"{finished[best].comm_ns / ours.comm_ns:7.2f}"
                        if finished[best].comm_ns and ours.comm_ns
                        else f"{'-':>7}"
                    )
                    worst = min(worst, speedup)
                    cells = " ".join(f"{_us(results[n].end_ns):>11}" for n in NATIVE_ALGORITHMS)
                    print(
                        f"{name:15} {network.name:21} {cells} {_us(ours.end_ns):>11} "
                        f"{best[:16]:>16} {speedup:7.3f} {comm}",
                        flush=True,
                    )
    print(f"lowest speedup over the best native algorithm: {worst:.3f}")


if __name__ == "__main__":
    main()
