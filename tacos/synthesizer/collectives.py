"""Collectives built on the greedy spreading core, for one or several tenants at once.

* Spreading collectives (All-Gather, Broadcast, Gather, Scatter, All-to-All):
  chunks start where :meth:`Collective.initial_data` puts them and are greedily
  spread to the nodes :meth:`Collective.final_data` names.
* Reducing collectives are spreading ones played backwards on the transposed
  topology: Reduce-Scatter mirrors All-Gather, Reduce mirrors Broadcast. Each
  spreading tree of a chunk becomes a reduction tree into its owner; transfers
  into NPUs become reductions (switch hops stay plain forwards).
* All-Reduce: Reduce-Scatter into owners levelled by bandwidth
  (:mod:`.ownership`), then an All-Gather of the reduced chunks that starts
  each chunk as soon as its reduction completes and each link as soon as its
  Reduce-Scatter work is done (the two phases overlap).

Several tenants (collectives of one kind on disjoint rank groups) are
synthesized jointly on one link timeline: their chunks get disjoint global ids,
so they compete for shared links exactly like chunks of one collective do.

Every spread is pruned, re-timed and has its tail shortened
(:mod:`.timing`); the compiled engine runs the same tail pass.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Op, Transfer
from tacos.synthesizer.attempts import fastest_attempt, finish_us
from tacos.synthesizer.greedy import ChunkPolicy, ChunkSource, DeliveryCallback, greedy_spread
from tacos.synthesizer.ownership import owner_layouts
from tacos.synthesizer.timing import played_backwards, prune, renumber, retime_asap, shorten_tail
from tacos.topology import Topology
from tacos.transfers import TransferTable

MIRRORS = {
    CollectiveKind.REDUCE_SCATTER: CollectiveKind.ALL_GATHER,
    CollectiveKind.REDUCE: CollectiveKind.BROADCAST,
}
"""Reducing collectives and the spreading collective they are the time-reverse of."""


@dataclass(frozen=True)
class Tenants:
    """Collectives of one kind on disjoint ranks, with global chunk ids ``offset + chunk``."""

    specs: tuple[Collective, ...]

    def __post_init__(self) -> None:
        kinds = {spec.kind for spec in self.specs}
        if len(kinds) != 1:
            raise TacosError(f"tenants must run the same collective, got {sorted(kinds)}")
        seen: set[int] = set()
        for spec in self.specs:
            if seen & set(spec.ranks):
                raise TacosError(
                    f"tenant groups overlap on NPU(s) {sorted(seen & set(spec.ranks))}"
                )
            seen |= set(spec.ranks)
        if len({spec.chunk_bytes for spec in self.specs}) != 1:
            raise TacosError("tenants must use one chunk size")

    @property
    def kind(self) -> CollectiveKind:
        return self.specs[0].kind

    @property
    def chunk_bytes(self) -> int:
        return self.specs[0].chunk_bytes

    @property
    def num_chunks(self) -> int:
        """All tenants' chunks."""
        return sum(spec.num_chunks for spec in self.specs)

    @property
    def offsets(self) -> list[int]:
        offsets, total = [], 0
        for spec in self.specs:
            offsets.append(total)
            total += spec.num_chunks
        return offsets

    def as_kind(self, kind: CollectiveKind) -> Tenants:
        return Tenants(tuple(replace(spec, kind=kind) for spec in self.specs))

    def sources(self) -> list[ChunkSource]:
        return [
            ChunkSource(node, offset + chunk)
            for spec, offset in zip(self.specs, self.offsets, strict=True)
            for node, chunk, _ in spec.initial_data()
        ]

    def wants(self, num_nodes: int, already: Sequence[ChunkSource]) -> list[int]:
        """Per node, the chunks it must end with and does not start with."""
        held: defaultdict[int, int] = defaultdict(int)
        for source in already:
            held[source.node] |= 1 << source.chunk
        wants = [0] * num_nodes
        for spec, offset in zip(self.specs, self.offsets, strict=True):
            for node, chunk, _ in spec.final_data():
                wants[node] |= 1 << (offset + chunk)
        return [w & ~held[node] for node, w in enumerate(wants)]


@dataclass(frozen=True)
class Settings:
    """How to run the greedy: tie-breaking, chunk policy, NPU port limit, progress,
    whether hosts with one uplink send their own chunks first, which nodes count as
    nearer to a receiver than a path through switches, and whether free links are
    matched fewest sendable chunks first (:mod:`.attempts`)."""

    rng: random.Random
    policy: ChunkPolicy = "rarest"
    sends_in_flight: int | None = None
    on_delivery: DeliveryCallback | None = None
    own_first: bool = True
    near_fraction: float = 1.0
    fewest_first: bool = False


def synthesize_transfers(
    topology: Topology, tenants: Tenants, settings: Settings
) -> list[Transfer]:
    """All tenants' transfers on one timeline, in start order, chunk ids global."""
    kind = tenants.kind
    if kind is CollectiveKind.ALL_REDUCE:
        return _all_reduce(topology, tenants, settings)
    if kind in MIRRORS:
        return _reduce_by_mirroring(topology, tenants, settings)
    return _spread(topology, tenants, tenants.sources(), settings)


def _reduce_by_mirroring(
    topology: Topology,
    tenants: Tenants,
    settings: Settings,
    sources: Sequence[ChunkSource] | None = None,
) -> list[Transfer]:
    """The mirrored spreading collective on the transposed topology, played backwards.

    ``sources`` (the owners each chunk is reduced into) default to the collective's own.
    """
    mirror = tenants.as_kind(MIRRORS[tenants.kind])
    if sources is None:
        sources = mirror.sources()
    spread = _spread(topology.transposed(), mirror, sources, settings)
    return played_backwards(spread, topology, tenants.chunk_bytes, settings.sends_in_flight)


def _all_reduce(topology: Topology, tenants: Tenants, settings: Settings) -> list[Transfer]:
    """The faster All-Reduce of the owner layouts worth trying (:func:`.owner_layouts`)."""
    quiet = replace(settings, on_delivery=None)
    return fastest_attempt(
        owner_layouts(topology, tenants.specs),
        settings.rng,
        lambda owners, reports: _all_reduce_owned(
            topology, tenants, settings if reports else quiet, owners
        ),
        finish_us,
    )


def _all_reduce_owned(
    topology: Topology, tenants: Tenants, settings: Settings, owners: Sequence[np.ndarray]
) -> list[Transfer]:
    """Reduce-Scatter into ``owners`` (per tenant, per chunk), then All-Gather of each
    reduced chunk from its owner."""
    scatter = tenants.as_kind(CollectiveKind.REDUCE_SCATTER)
    owner = {
        offset + chunk: int(npu)
        for tenant_owners, offset in zip(owners, tenants.offsets, strict=True)
        for chunk, npu in enumerate(tenant_owners)
    }
    reduction = _reduce_by_mirroring(
        topology, scatter, settings, [ChunkSource(owner[c], c) for c in sorted(owner)]
    )
    reduced_by: dict[int, list[int]] = defaultdict(list)
    link_free_at = [0.0] * len(topology.links)
    for index, t in enumerate(reduction):
        if t.dst == owner[t.chunk]:
            reduced_by[t.chunk].append(index)
        link_free_at[t.link] = max(link_free_at[t.link], t.end)
    sources = [
        ChunkSource(
            owner[c],
            c,
            time=max(reduction[i].end for i in reduced_by[c]),
            deps=tuple(reduced_by[c]),
        )
        for c in sorted(reduced_by)
    ]
    gather = tenants.as_kind(CollectiveKind.ALL_GATHER)
    return _spread(
        topology, gather, sources, settings, link_free_at=link_free_at, earlier=reduction
    )


def _spread(
    topology: Topology,
    tenants: Tenants,
    sources: Sequence[ChunkSource],
    settings: Settings,
    *,
    link_free_at: Sequence[float] | None = None,
    earlier: Sequence[Transfer] = (),
) -> list[Transfer]:
    """Greedy-spread ``sources`` to the tenants' goals after ``earlier``; prune; re-time."""
    wants = tenants.wants(topology.num_nodes, sources)
    spread = greedy_spread(
        topology,
        sources,
        wants,
        tenants.chunk_bytes,
        settings.rng,
        policy=settings.policy,
        link_free_at=link_free_at,
        index_offset=len(earlier),
        on_delivery=settings.on_delivery,
        sends_in_flight=settings.sends_in_flight,
        own_first=settings.own_first,
        near_fraction=settings.near_fraction,
        fewest_first=settings.fewest_first,
    )
    combined = [*earlier, *spread]
    in_order = renumber(
        combined,
        sorted(range(len(combined)), key=lambda i: (combined[i].start, combined[i].link, i)),
    )
    kept = prune(in_order, lambda t: t.op is Op.REDUCE or bool(wants[t.dst] >> t.chunk & 1))

    def retime(transfers: Sequence[Transfer]) -> list[Transfer]:
        return retime_asap(transfers, topology, tenants.chunk_bytes, settings.sends_in_flight)

    retimed = retime(kept)
    table = TransferTable.from_transfers(retimed)
    shortened = shorten_tail(
        table, topology, lambda swapped: TransferTable.from_transfers(retime(list(swapped)))
    )
    return retimed if shortened is table else list(shortened)
