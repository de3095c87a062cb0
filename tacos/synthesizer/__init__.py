"""Synthesize a collective algorithm for a topology: the TACOS entry point.

Example:
    >>> from tacos.topology import Topology
    >>> from tacos.collective import Collective, CollectiveKind
    >>> topo = Topology.ring(4)
    >>> spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 2**20)
    >>> schedule = synthesize(topo, spec, seed=0)
    >>> len(schedule.transfers), schedule.collective_time_us
    (12, 40.0625)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule
from tacos.synthesizer.collectives import Settings, Tenants, synthesize_transfers
from tacos.synthesizer.greedy import CHUNK_POLICIES, ChunkPolicy
from tacos.synthesizer.timing import renumber
from tacos.topology import Topology

SYNTHESIZER_NAME = "tacos-greedy"
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` with counts of (node, chunk) deliveries."""


def synthesize(
    topology: Topology,
    collective: Collective,
    *,
    seed: int = 0,
    policy: ChunkPolicy = "rarest",
    sends_in_flight: int | None = None,
    progress: ProgressCallback | None = None,
) -> Schedule:
    """Run TACOS greedy link-chunk matching for ``collective`` on ``topology``.

    The same ``seed`` (and ``policy``, see :mod:`tacos.synthesizer.greedy`)
    always yields the same schedule. ``sends_in_flight=1`` makes every NPU send
    one message at a time (a one-port NPU, like ASTRA-sim's standalone
    workload route); the schedule records it and replays with it. Raises
    :class:`~tacos.errors.TacosError` when a rank is not an NPU of the
    topology or the ranks cannot all reach each other.
    """
    (schedule,) = synthesize_tenants(
        topology,
        [collective],
        seed=seed,
        policy=policy,
        sends_in_flight=sends_in_flight,
        progress=progress,
    )
    return schedule


def synthesize_tenants(
    topology: Topology,
    collectives: Sequence[Collective],
    *,
    seed: int = 0,
    policy: ChunkPolicy = "rarest",
    sends_in_flight: int | None = None,
    progress: ProgressCallback | None = None,
) -> list[Schedule]:
    """Synthesize several collectives of one kind on disjoint ranks, sharing the links.

    Returns one Schedule per collective; their times come from the joint
    timeline, so each shows what its tenant gets while the others run too.
    ``tacos.simulate_together`` replays them jointly.
    """
    if policy not in CHUNK_POLICIES:
        raise TacosError(f"unknown chunk policy {policy!r}: use one of {', '.join(CHUNK_POLICIES)}")
    tenants = Tenants(tuple(collectives))
    for spec in tenants.specs:
        for rank in spec.ranks:
            if not 0 <= rank < topology.num_npus:
                raise TacosError(
                    f"rank {rank} is not an NPU of {topology.describe()}; "
                    f"ranks must be in 0..{topology.num_npus - 1}"
                )
        topology.check_connected(spec.ranks)

    on_delivery = None
    if progress is not None:
        phases = 2 if tenants.kind is CollectiveKind.ALL_REDUCE else 1
        mirror = tenants.as_kind(CollectiveKind.ALL_GATHER) if tenants.kind.reduces else tenants
        if tenants.kind is CollectiveKind.REDUCE:
            mirror = tenants.as_kind(CollectiveKind.BROADCAST)
        sources = mirror.sources()
        total = phases * sum(w.bit_count() for w in mirror.wants(topology.num_nodes, sources))
        done = 0

        def on_delivery(count: int) -> None:
            nonlocal done
            done += count
            progress(done, total)

    if sends_in_flight is not None and sends_in_flight < 1:
        raise TacosError(f"sends in flight must be at least 1, got {sends_in_flight}")
    settings = Settings(random.Random(seed), policy, sends_in_flight, on_delivery)
    transfers = synthesize_transfers(topology, tenants, settings)
    meta: dict[str, object] = {"synthesizer": SYNTHESIZER_NAME, "seed": seed, "policy": policy}
    if sends_in_flight is not None:
        meta["sends_in_flight"] = sends_in_flight
    if len(tenants.specs) == 1:
        return [Schedule(topology, tenants.specs[0], transfers, meta)]
    schedules = []
    for group, (spec, offset) in enumerate(zip(tenants.specs, tenants.offsets, strict=True)):
        mine = [i for i, t in enumerate(transfers) if tenants.group_of(t.chunk) == group]
        local = [replace(t, chunk=t.chunk - offset) for t in renumber(transfers, mine)]
        group_meta = {**meta, "tenant": group, "tenants": len(tenants.specs)}
        schedules.append(Schedule(topology, spec, local, group_meta))
    return schedules


__all__ = ["CHUNK_POLICIES", "ChunkPolicy", "ProgressCallback", "synthesize", "synthesize_tenants"]
