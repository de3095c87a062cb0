"""Quality report: synthesized collective time against the lower bound and the plain-TACOS baseline.

Run: ``python benchmarks/quality.py [--chunks 1 2 4] [--seeds 3]``

For every topology of the suite and every collective it prints, measured in
this run: our time / best lower bound (1.000 is provably optimal), the same
for plain TACOS (uniformly random chunk choice, the paper's rule), our time /
plain time, and the synthesis time. Every schedule is checked with
``tacos.verify`` and ``tacos.simulate`` before it is counted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Schedule
from tacos.topology import Topology, from_spec


def heterogeneous_mesh(x: int, y: int, fast: float = 200.0, slow: float = 50.0) -> Topology:
    """A 2D mesh whose dimension-0 links (NVLink-like) are faster than dimension-1 links."""
    base = from_spec(f"mesh2d:{x}x{y}")
    links = tuple(
        replace(lk, bandwidth_GBps=fast if abs(lk.src - lk.dst) == 1 else slow) for lk in base.links
    )
    return Topology(base.num_npus, links, name=f"hetero-mesh2d:{x}x{y}({fast:g}/{slow:g})")


def suite() -> list[Topology]:
    specs = ["ring:8", "ring:16", "ring:32", "mesh2d:4x4", "mesh2d:8x8", "torus2d:4x4",
             "torus2d:8x8", "mesh3d:4x4x4", "torus3d:4x4x4", "hypercube:4", "hypercube:6",
             "fully-connected:8", "switch:8", "switch:16"]  # fmt: skip
    return [from_spec(s) for s in specs] + [heterogeneous_mesh(4, 4), heterogeneous_mesh(8, 4)]


def checked(schedule: Schedule, what: str) -> float:
    """The schedule's time, once ``tacos.verify`` passes and ``tacos.simulate`` agrees."""
    report = tacos.verify(schedule)
    if not report.ok:
        raise SystemExit(f"{what}: schedule does not verify: {report.summary()}")
    if tacos.simulate(schedule).collective_time_us != schedule.collective_time_us:
        raise SystemExit(f"{what}: simulated time differs from synthesized")
    return schedule.collective_time_us


def checked_time(topo: Topology, spec: Collective, seed: int, policy: str) -> tuple[float, float]:
    started = time.perf_counter()
    schedule = tacos.synthesize(topo, spec, seed=seed, policy=policy)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    return checked(schedule, f"{topo.name} {spec.kind}"), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 4], help="chunks per NPU")
    parser.add_argument("--seeds", type=int, default=3, help="seeds averaged per point")
    parser.add_argument("--chunk-size", default="1MiB")
    parser.add_argument(
        "--collectives",
        nargs="+",
        default=["all-gather", "reduce-scatter", "all-reduce"],
        help="collective kinds (all eight: all-gather reduce-scatter all-reduce broadcast "
        "reduce gather scatter all-to-all)",
    )
    args = parser.parse_args()
    kinds = [CollectiveKind.parse(k) for k in args.collectives]
    nbytes = tacos.parse_size(args.chunk_size)

    header = (f"{'topology':34} {'NPUs':>5} {'coll':>4} {'C':>2} {'time_us':>10} {'bound_us':>10}"
              f" {'ours/bnd':>8} {'plain/bnd':>9} {'ours/plain':>10} {'synth_s':>8}")  # fmt: skip
    print(header)
    print("-" * len(header))
    ratios, versus_plain = [], []
    short = {"all-gather": "AG", "reduce-scatter": "RS", "all-reduce": "AR", "broadcast": "BC",
             "reduce": "RD", "gather": "GA", "scatter": "SC", "all-to-all": "A2A"}  # fmt: skip
    for topo in suite():
        for kind in kinds:
            for chunks in args.chunks:
                spec = Collective(kind, tuple(topo.npus), chunks, nbytes)
                bound = tacos.lower_bounds(topo, spec).best_us
                ours = [checked_time(topo, spec, s, "rarest") for s in range(args.seeds)]
                plain = [checked_time(topo, spec, s, "random") for s in range(args.seeds)]
                our_time = statistics.mean(t for t, _ in ours)
                plain_time = statistics.mean(t for t, _ in plain)
                ratios.append(our_time / bound)
                versus_plain.append(our_time / plain_time)
                print(
                    f"{topo.name:34} {topo.num_npus:>5} {short[kind.value]:>4} {chunks:>2} "
                    f"{our_time:>10.2f} {bound:>10.2f} {our_time / bound:>8.3f} "
                    f"{plain_time / bound:>9.3f} {our_time / plain_time:>10.3f} "
                    f"{statistics.mean(s for _, s in ours):>8.3f}"
                )
    print("-" * len(header))
    print(
        f"geometric mean ours/bound {statistics.geometric_mean(ratios):.3f} "
        f"(max {max(ratios):.3f}); ours/plain-TACOS {statistics.geometric_mean(versus_plain):.3f} "
        f"(max {max(versus_plain):.3f}) over {len(ratios)} points, {args.seeds} seeds each"
    )


if __name__ == "__main__":
    main()
