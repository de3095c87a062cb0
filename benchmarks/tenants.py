"""Multi-tenant report: each tenant's collective time alone vs sharing the network.

Run: ``python benchmarks/tenants.py``

Tenants are synthesized jointly on one link timeline (``tacos.synthesize_tenants``),
so where their traffic crosses the same links they slow each other down; each
tenant is also synthesized alone on the same topology for comparison. Every
schedule is verified, and the joint replay must match the joint synthesis.
"""

from __future__ import annotations

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
]


def main() -> None:
    print(f"{'topology':12} {'coll':10} {'groups':40} {'tenant':>6} {'alone_us':>10} "
          f"{'together_us':>11} {'slowdown':>8}")  # fmt: skip
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
                  f"{schedule.collective_time_us / alone:>8.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
