"""Collectives built on the greedy All-Gather core.

* All-Gather: spread each rank's chunks to every other rank.
* Reduce-Scatter: an All-Gather on the transposed topology, played backwards:
  each All-Gather tree of chunk ``c`` becomes a reduction tree into the owner
  of ``c``, and copies become reductions.
* All-Reduce: Reduce-Scatter, then an All-Gather of the reduced chunks that
  starts each chunk as soon as its reduction completes and each link as soon as
  its Reduce-Scatter work is done (the two phases overlap).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from tacos.collective import Collective
from tacos.schedule import Op, Transfer
from tacos.synthesizer.greedy import ChunkPolicy, ChunkSource, DeliveryCallback, greedy_spread
from tacos.synthesizer.timing import prune, renumber, retime_asap
from tacos.topology import Topology


def all_gather(
    topology: Topology,
    spec: Collective,
    rng: random.Random,
    policy: ChunkPolicy = "rarest",
    on_delivery: DeliveryCallback | None = None,
) -> list[Transfer]:
    """Every rank ends with every chunk; chunk ``c`` starts at ``spec.owner(c)``."""
    sources = [ChunkSource(spec.owner(c), c) for c in range(spec.num_chunks)]
    return _spread_and_tighten(topology, spec, sources, rng, policy, on_delivery=on_delivery)


def reduce_scatter(
    topology: Topology,
    spec: Collective,
    rng: random.Random,
    policy: ChunkPolicy = "rarest",
    on_delivery: DeliveryCallback | None = None,
) -> list[Transfer]:
    """The owner of every chunk ends with the reduction of all ranks' contributions."""
    gather = all_gather(topology.transposed(), spec, rng, policy, on_delivery)
    finish = max(t.end for t in gather)
    # In the gather, the sends of chunk c out of node v follow v's receipt of c.
    # Played backwards, they become the reductions into v that must precede v's send.
    sends_from: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, t in enumerate(gather):
        sends_from[(t.src, t.chunk)].append(index)
    backwards = [
        Transfer(
            chunk=t.chunk,
            src=t.dst,
            dst=t.src,
            link=t.link,
            start=finish - t.end,
            end=finish - t.start,
            op=Op.REDUCE,
            deps=tuple(sends_from[(t.dst, t.chunk)]),
        )
        for t in gather
    ]
    order = sorted(range(len(backwards)), key=lambda i: (backwards[i].start, backwards[i].link))
    return retime_asap(renumber(backwards, order), topology.link_times_us(spec.chunk_bytes))


def all_reduce(
    topology: Topology,
    spec: Collective,
    rng: random.Random,
    policy: ChunkPolicy = "rarest",
    on_delivery: DeliveryCallback | None = None,
) -> list[Transfer]:
    """Reduce-Scatter, then All-Gather of each reduced chunk from its owner."""
    reduction = reduce_scatter(topology, spec, rng, policy, on_delivery)
    reduced_by: dict[int, list[int]] = defaultdict(list)
    link_free_at = [0.0] * len(topology.links)
    for index, t in enumerate(reduction):
        if t.dst == spec.owner(t.chunk):
            reduced_by[t.chunk].append(index)
        link_free_at[t.link] = max(link_free_at[t.link], t.end)
    sources = [
        ChunkSource(
            spec.owner(c),
            c,
            time=max(reduction[i].end for i in reduced_by[c]),
            deps=tuple(reduced_by[c]),
        )
        for c in range(spec.num_chunks)
    ]
    return _spread_and_tighten(
        topology,
        spec,
        sources,
        rng,
        policy,
        link_free_at=link_free_at,
        earlier=reduction,
        on_delivery=on_delivery,
    )


def _spread_and_tighten(
    topology: Topology,
    spec: Collective,
    sources: Sequence[ChunkSource],
    rng: random.Random,
    policy: ChunkPolicy,
    *,
    link_free_at: Sequence[float] | None = None,
    earlier: Sequence[Transfer] = (),
    on_delivery: DeliveryCallback | None = None,
) -> list[Transfer]:
    """Greedy-spread ``sources`` to every rank after ``earlier``; prune; re-time."""
    everything = (1 << spec.num_chunks) - 1
    own = {s.node: 0 for s in sources}
    for s in sources:
        own[s.node] |= 1 << s.chunk
    wants = [0] * topology.num_nodes
    for rank in spec.ranks:
        wants[rank] = everything & ~own.get(rank, 0)
    spread = greedy_spread(
        topology,
        sources,
        wants,
        spec.chunk_bytes,
        rng,
        policy=policy,
        link_free_at=link_free_at,
        index_offset=len(earlier),
        on_delivery=on_delivery,
    )
    kept = prune(
        [*earlier, *spread],
        lambda t: t.op is Op.REDUCE or bool(wants[t.dst] >> t.chunk & 1),
    )
    return retime_asap(kept, topology.link_times_us(spec.chunk_bytes))
