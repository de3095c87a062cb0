"""Multi-tenant report: each tenant's collective time alone vs sharing the network.

Run: ``python benchmarks/tenants.py [--scale [--reference]]``

Tenants are synthesized on one link timeline (``tacos.synthesize_tenants``), or
apart and replayed together where that finishes sooner ("built": together or
apart), so where their traffic crosses the same links they slow each other
down; each tenant is also synthesized alone on the same topology for
comparison. Every schedule is verified, and the joint replay must match the
joint synthesis.

``--scale`` instead times the compiled engine on bigger networks (tenants in
halves or interleaved, and one collective over every third NPU, whose chunks
the others relay): synthesis seconds and each tenant's collective time, every
schedule verified. With ``--reference`` the reference engine synthesizes each
too (minutes on 512 GPUs), and the two must be the same schedules.
"""

from __future__ import annotations

import argparse
import time

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.failures import parse_groups
from tacos.schedule import merge_tenants
from tacos.synthesizer import synthesize_tenants

CASES = [
    ("torus2d:4x4", "all-reduce", "0-7;8-15", 2),
    ("torus2d:4x4", "all-reduce", "0,2,5,7,8,10,13,15;1,3,4,6,9,11,12,14", 2),
    ("torus2d:8x8", "all-gather", "0-31;32-63", 1),
    ("torus2d:8x8", "all-gather", "0-15;16-31;32-47;48-63", 1),
    ("switch:16", "all-reduce", "0-7;8-15", 2),
    ("ring:16", "all-reduce", "0-7;8-15", 2),
    ("ring:16", "all-reduce", "0,2,4,6,8,10,12,14;1,3,5,7,9,11,13,15", 2),
    ("dgx:8x8", "all-reduce", "0-31;32-63", 1),
    ("dgx:8x8", "all-reduce", ";".join(",".join(map(str, range(s, 64, 2))) for s in (0, 1)), 1),
]


SCALE_NETWORKS = ["torus2d:32x32", "dgx:16x8", "dgx:64x8", "fat-tree:16"]
SCALE_KINDS = ["all-gather", "all-reduce"]


def layouts(npus: int) -> dict[str, list[list[int]]]:
    """Tenant groups over ``npus`` NPUs: two halves, two interleaved, one every third NPU."""
    return {
        "halves": [list(range(npus // 2)), list(range(npus // 2, npus))],
        "interleaved": [list(range(0, npus, 2)), list(range(1, npus, 2))],
        "every third": [list(range(0, npus, 3))],
    }


def timed(topo: tacos.Topology, specs: list[Collective], engine: str) -> tuple[list, float]:
    started = time.perf_counter()
    schedules = synthesize_tenants(topo, specs, seed=0, engine=engine)
    return schedules, time.perf_counter() - started


def scale(with_reference: bool) -> None:
    print(f"{'topology':16} {'coll':10} {'groups':12} {'NPUs':>5} {'fast_s':>7} "
          f"{'ref_s':>7} {'same':>5} {'built':>8}  tenant times (us)")  # fmt: skip
    for network in SCALE_NETWORKS:
        topo = tacos.from_spec(network)
        for kind in SCALE_KINDS:
            for name, groups in layouts(topo.num_npus).items():
                specs = [Collective(CollectiveKind.parse(kind), tuple(g), 1, 2**20) for g in groups]
                ours, fast_s = timed(topo, specs, "fast")
                assert all(tacos.verify(s).ok for s in ours), f"{network} {name} does not verify"
                ref_s, same = "-", "-"
                if with_reference:
                    theirs, seconds = timed(topo, specs, "reference")
                    ref_s = f"{seconds:.1f}"
                    pairs = zip(ours, theirs, strict=True)
                    same = str(all(list(a.transfers) == list(b.transfers) for a, b in pairs))
                times = " ".join(f"{s.collective_time_us:.2f}" for s in ours)
                built = ours[0].meta.get("tenants_synthesized", "-")
                print(f"{network:16} {kind:10} {name:12} {topo.num_npus:>5} {fast_s:>7.2f} "
                      f"{ref_s:>7} {same:>5} {built:>8}  {times}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", action="store_true", help="time the compiled engine at scale")
    parser.add_argument("--reference", action="store_true", help="with --scale: also the reference")
    args = parser.parse_args()
    if args.scale:
        scale(args.reference)
        return
    print(f"{'topology':12} {'coll':10} {'groups':40} {'tenant':>6} {'alone_us':>10} "
          f"{'together_us':>11} {'slowdown':>8} {'built':>8}")  # fmt: skip
    for spec, kind, groups_text, chunks in CASES:
        topo = tacos.from_spec(spec)
        groups = parse_groups(groups_text)
        specs = [Collective(CollectiveKind.parse(kind), tuple(g), chunks, 2**20) for g in groups]
        together = synthesize_tenants(topo, specs, seed=0)
        joint = tacos.simulate(merge_tenants(together)).collective_time_us
        assert joint == max(s.collective_time_us for s in together), "joint replay differs"
        for index, (spec_g, schedule) in enumerate(zip(specs, together, strict=True)):
            assert tacos.verify(schedule).ok, f"tenant {index} does not verify"
            alone = tacos.synthesize(topo, spec_g, seed=0).collective_time_us
            shown = groups_text if len(groups_text) <= 40 else groups_text[:37] + "..."
            print(f"{spec:12} {kind:10} {shown:40} {index:>6} {alone:>10.2f} "
                  f"{schedule.collective_time_us:>11.2f} "
                  f"{schedule.collective_time_us / alone:>8.3f} "
                  f"{schedule.meta['tenants_synthesized']:>8}")  # fmt: skip


if __name__ == "__main__":
    main()
