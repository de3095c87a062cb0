"""Chunk policy and best-of-k seeds at scale: which tie-break helps on rings, tori and meshes.

Run: ``python benchmarks/policies.py [--seeds 4] [--chunks 1 2]``

For every topology and chunk count it prints, measured in this run with the
fast engine (same schedules as the reference), the collective time over the
best lower bound for the "rarest" policy (fewest of v's in-neighbours hold
the chunk, then fewest copies; the default) and for plain TACOS ("random"):
the mean over ``--seeds`` seeds and the best of them (what ``--tries`` gets).
"""

from __future__ import annotations

import argparse
import statistics
import time

import tacos
from tacos.collective import Collective, CollectiveKind

SUITE = ["ring:64", "ring:256", "ring:1024", "torus2d:8x8", "torus2d:16x16",
         "torus2d:32x32", "torus3d:4x4x4", "torus3d:8x8x8", "mesh2d:16x16", "mesh2d:32x32",
         "hypercube:8"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", nargs="+", default=SUITE)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    header = (f"{'topology':16} {'C':>2} {'rarest mean':>11} {'rarest best':>11} "
              f"{'random mean':>11} {'random best':>11} {'seconds':>8}")  # fmt: skip
    print(header)
    print("-" * len(header))
    wins = {"rarest": 0, "random": 0, "tie": 0}
    for spec in args.topologies:
        topo = tacos.from_spec(spec)
        for chunks in args.chunks:
            collective = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), chunks, 2**20)
            bound = tacos.lower_bounds(topo, collective).best_us
            started = time.perf_counter()
            ratios = {
                policy: [
                    tacos.synthesize(topo, collective, seed=s, policy=policy).collective_time_us
                    / bound
                    for s in range(args.seeds)
                ]
                for policy in ("rarest", "random")
            }
            rarest, plain = statistics.mean(ratios["rarest"]), statistics.mean(ratios["random"])
            wins["rarest" if rarest < plain else "random" if plain < rarest else "tie"] += 1
            print(
                f"{spec:16} {chunks:>2} {rarest:>11.4f} {min(ratios['rarest']):>11.4f} "
                f"{plain:>11.4f} {min(ratios['random']):>11.4f} "
                f"{time.perf_counter() - started:>8.1f}",
                flush=True,
            )
    print("-" * len(header))
    print(f"lower mean ratio: rarest {wins['rarest']}, random {wins['random']}, tie {wins['tie']}")


if __name__ == "__main__":
    main()
