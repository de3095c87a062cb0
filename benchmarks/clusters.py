"""Cluster report: TACOS and the classic algorithms against the throughput-optimal bound.

Run: ``python benchmarks/clusters.py [--chunks 1 16] [--only dgx] [--skip-large]``

The networks people train on (switched, hierarchical clusters) next to the
meshes of the TACOS paper. For every network, collective and chunks per NPU it
prints, measured in this run: NPUs, directed links, TACOS's synthesis seconds,
TACOS's time over the throughput-optimal bound (ForestColl's cut bound, exact)
and over the best lower bound of any kind, every classic algorithm that
applies over the throughput bound, TACOS over the best classic algorithm
(below 1.000: TACOS wins), and what ``algorithm="best"`` (the command line's
default) hands the user: the faster of TACOS and the classic algorithms, TACOS
on ties ("tacos (trees)" where its All-Reduce came from the overlapped trees;
"(reordered)" where best reordered a classic winner's links, see
``tacos.synthesizer``), and the delivered time below is best's own.
Every schedule is checked with ``tacos.verify`` and ``tacos.simulate`` before
it is counted. Not run by the test suite: the 128-GPU clusters at 16 chunks per
NPU take minutes each, the 512-GPU one more.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import tacos
from tacos.classic import CLASSIC_ALGORITHMS, compete
from tacos.collective import Collective, CollectiveKind
from tacos.topology import Topology

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import checked, heterogeneous_mesh  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "astra-sim"
SUITE = {
    "dgx:4x8": "dgx:4x8",
    "dgx:16x8": "dgx:16x8",
    "dgx:64x8": "dgx:64x8",
    "dgx:8x8-rails-over-2-leaves": "dgx:8x8,nodes-per-leaf=4",
    "fat-tree:8": "fat-tree:8",
    "a100-2node": "dgx:2x8,nvlink=300,pcie=32,nic=25",
    "mi250-2node": "xgmi:2x8,xgmi=50,nic=25",
    "ns3-fat-tree-128": str(REFERENCE / "network/ns3/128_nodes_16_switch_topology.txt"),
    "htsim-fat-tree-8": str(REFERENCE / "network/htsim/8nodes.topo"),
    "mesh2d:8x8": "mesh2d:8x8",
    "mesh3d:4x4x4": "mesh3d:4x4x4",
}
LARGE_NPUS = 512
CLASSIC_TRANSFER_BUDGET = 8_000_000
"""Classic candidates needing more transfers are not built (their column shows -)."""
SHORT = {"all-gather": "AG", "reduce-scatter": "RS", "all-reduce": "AR"}


def networks(only: list[str]) -> list[tuple[str, Topology]]:
    chosen = []
    for label, spec in SUITE.items():
        if "/" in spec and not Path(spec).exists():
            print(f"skipping {label}: {spec} is not there", file=sys.stderr)
            continue
        chosen.append((label, tacos.load_topology(spec)))
    chosen += [(t.name, t) for t in (heterogeneous_mesh(4, 4), heterogeneous_mesh(8, 4))]
    return [(label, topo) for label, topo in chosen if not only or any(o in label for o in only)]


def classic_times(topo: Topology, spec: Collective, what: str) -> dict[str, float]:
    """Each applicable classic algorithm's time: its fastest variant, built and verified.

    One ``compete`` per algorithm (as ``best`` races them, but against no incumbent),
    so every algorithm that applies gets its column.
    """
    times: dict[str, float] = {}
    for name in CLASSIC_ALGORITHMS:
        outcome = compete(
            topo, spec, math.inf, algorithms=[name], max_transfers=CLASSIC_TRANSFER_BUDGET
        )
        if outcome.best is not None:
            times[name] = checked(outcome.best, f"{what} {name}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 16], help="chunks per NPU")
    parser.add_argument("--chunk-size", default="1MiB")
    parser.add_argument("--collectives", nargs="+", default=list(SHORT))
    parser.add_argument("--only", nargs="*", default=[], help="networks whose label contains...")
    parser.add_argument("--skip-large", action="store_true", help=f"no {LARGE_NPUS}+ NPU runs")
    args = parser.parse_args()
    nbytes = tacos.parse_size(args.chunk_size)

    names = list(CLASSIC_ALGORITHMS)
    classic_columns = " ".join(f"{n[:9] + '/thr':>13}" for n in names)
    header = (
        f"{'network':30} {'NPUs':>5} {'links':>6} {'coll':>4} {'C':>2} {'synth_s':>8} "
        f"{'tacos/thr':>9} {'tacos/best':>10} {classic_columns} {'tacos/clas':>10} "
        f"{'best picks':>17}"
    )
    print(header)
    print("-" * len(header))
    versus_classic, versus_bound, delivered = [], [], []
    classic_wins = 0
    for label, topo in networks(args.only):
        if args.skip_large and topo.num_npus >= LARGE_NPUS:
            continue
        for kind_name in args.collectives:
            kind = CollectiveKind.parse(kind_name)
            for chunks in args.chunks:
                spec = Collective(kind, tuple(topo.npus), chunks, nbytes)
                what = f"{label} {kind} C={chunks}"
                bounds = tacos.lower_bounds(topo, spec)
                started = time.perf_counter()
                ours = tacos.synthesize(topo, spec, seed=0, algorithm="tacos")
                seconds = time.perf_counter() - started
                ours_us = checked(ours, what)
                classic = classic_times(topo, spec, what)
                throughput = bounds.throughput_us
                cells = " ".join(
                    f"{classic[n] / throughput:>13.3f}" if n in classic else f"{'-':>13}"
                    for n in names
                )
                best_classic = min(classic.values()) if classic else float("nan")
                winner = "tacos (trees)" if ours.meta["construction"] == "trees" else "tacos"
                handed_us = ours_us
                if classic and best_classic < ours_us:
                    # What best hands over: the classic winner, its links reordered if faster.
                    handed = tacos.synthesize(topo, spec, seed=0, algorithm="best")
                    handed_us = checked(handed, f"{what} best")
                    winner = handed.meta["algorithm"]
                    if handed.meta.get("reordered"):
                        winner += " (reordered)"
                    classic_wins += 1
                versus_classic.append(ours_us / best_classic)
                versus_bound.append(ours_us / throughput)
                delivered.append(handed_us / throughput)
                print(
                    f"{label[:30]:30} {topo.num_npus:>5} {len(topo.links):>6} "
                    f"{SHORT[kind.value]:>4} {chunks:>2} {seconds:>8.2f} "
                    f"{ours_us / throughput:>9.3f} {ours_us / bounds.best_us:>10.3f} {cells} "
                    f"{ours_us / best_classic:>10.3f} {winner:>17}",
                    flush=True,
                )
    print("-" * len(header))
    print(
        f"TACOS / throughput bound: geometric mean {statistics.geometric_mean(versus_bound):.3f}, "
        f"max {max(versus_bound):.3f}; TACOS / best classic: geometric mean "
        f"{statistics.geometric_mean(versus_classic):.3f}, max {max(versus_classic):.3f} "
        f"over {len(versus_bound)} points"
    )
    print(
        f"algorithm=best (the command line's default) takes a classic algorithm at {classic_wins} "
        f"of them; its time / throughput bound: geometric mean "
        f"{statistics.geometric_mean(delivered):.3f}, max {max(delivered):.3f}"
    )


if __name__ == "__main__":
    main()
