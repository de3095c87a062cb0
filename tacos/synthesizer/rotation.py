"""All-Gather straight from each owner to every host, timed as a rotation.

Where every rank is a host behind one link (a fat tree's, or one switch's), an
All-Gather can send every chunk straight from its owner to each other host:
what decides its time is then only when each host's one link is busy. When
those links are all equally fast, a timetable keeps every one of them busy
without any search:

1. **Slots.** Ranks in id order, wrapping round. In each slot every host sends
   one of its chunks to the host a fixed number of places after it (the slot's
   *shift*), so every host sends one message and receives one.
2. **Routes.** A shift's messages travel together, so each takes, of its
   fastest routes (:class:`.message_routes.MessageRoutes`), the one its shift
   has used least so far, then the least booked overall: on a fat tree the
   messages leaving an edge switch take different uplinks, as d-mod-k routing
   would give them.
3. **Order.** The chunks one after another; for each, every shift, from the
   nearest on average to the farthest, so a host receives the near ones
   before the far ones have had time to arrive (fat-tree:8 at four chunks per
   host: 1.0118 of the best bound in shift order, 1.0079 so).
4. **Times.** The replay's: every host's link in slot order, each switch
   forwarding in order of arrival.

The list scheduler (:mod:`.trees`) found the same times on every fat tree and
single switch tried (fat-tree:4 and fat-tree:6 at one to four chunks per host,
switch:8 and switch:16) in a tenth of the time or less, and at sizes it cannot
reach: fat-tree:8 at sixteen chunks per host, 1.49 million transfers, takes
about 3 s and ties the ring (40803.66 us), where list scheduling took 30.8 s and
1.85 GB and the greedy is 0.6% slower. Where the hosts' links differ in speed
the slots do not line up (random host fabrics: up to 1.26x the list-scheduled
time), so there the trees list-schedule the same messages instead.
"""

from __future__ import annotations

import math

import numpy as np

from tacos.collective import Collective
from tacos.schedule import Op
from tacos.synthesizer.arrays import link_endpoints
from tacos.synthesizer.list_scheduling import replayed, with_times
from tacos.synthesizer.message_routes import MessageRoutes, Route
from tacos.synthesizer.ownership import owned_chunks
from tacos.topology import Topology
from tacos.transfers import OP_CODES, TransferTable


def slots_line_up(topology: Topology, ranks: tuple[int, ...] | list[int]) -> bool:
    """Whether every rank's links out and in are alike (bandwidth and latency), so one
    slot of the rotation is as long at every host."""
    outs = {_link_key(topology, i) for rank in ranks for i in topology.out_links[rank]}
    ins = {_link_key(topology, i) for rank in ranks for i in topology.in_links[rank]}
    return len(outs) == len(ins) == 1


def _link_key(topology: Topology, link: int) -> tuple[float, float]:
    return topology.links[link].bandwidth_GBps, topology.links[link].latency_us


def rotation(
    topology: Topology, spec: Collective, within_us: float = math.inf
) -> TransferTable | None:
    """The All-Gather of the module docstring, timed by the replay and sorted by (start,
    link); None when its busiest link is busy for ``within_us`` or longer (it cannot
    finish sooner). ``spec``'s ranks must each be a host behind one link."""
    ranks = sorted(spec.ranks)
    by_shift = _shift_routes(MessageRoutes(topology, spec.chunk_bytes), ranks)
    busy_us = np.asarray(topology.link_busy_times_us(spec.chunk_bytes))
    taken = np.concatenate([np.asarray(route, np.int64) for routes in by_shift for route in routes])
    load_us = np.bincount(taken, minlength=len(busy_us)) * spec.chunks_per_rank * busy_us
    if float(load_us.max()) >= within_us:
        return None
    table = _in_slots(topology, spec, ranks, by_shift)
    start, end = replayed(table, topology, spec.chunk_bytes)
    return with_times(table, start, end)


def _in_slots(
    topology: Topology, spec: Collective, ranks: list[int], by_shift: list[list[Route]]
) -> TransferTable:
    """Every message hop by hop, each hop waiting for the one before, recorded at its slot
    (the replay orders each host's link by it): chunk after chunk, for each the shifts
    nearest first, in each slot every host once."""
    count, per_rank = len(ranks), spec.chunks_per_rank
    hops = np.array([[len(route) for route in routes] for routes in by_shift], np.int64)
    padded = np.zeros((*hops.shape, int(hops.max())), np.int64)  # [shift, host, hop] -> link
    for shift, routes in enumerate(by_shift):
        for host, route in enumerate(routes):
            padded[shift, host, : len(route)] = route
    nearest_first = np.argsort(hops.sum(axis=1), kind="stable")
    slots = per_rank * (count - 1)
    shift_of = np.repeat(np.tile(nearest_first, per_rank), count)  # per message
    host_of = np.tile(np.arange(count), slots)
    place_of = np.repeat(np.arange(per_rank), (count - 1) * count)  # the host's j-th chunk
    slot_of = np.arange(len(shift_of)) // count
    message_hops = hops[shift_of, host_of]
    message = np.repeat(np.arange(len(shift_of)), message_hops)  # per transfer
    hop = np.arange(len(message)) - np.repeat(np.cumsum(message_hops) - message_hops, message_hops)
    link = padded[shift_of[message], host_of[message], hop]
    recorded = slot_of[message].astype(np.float64)
    relayed = hop > 0
    link_src, link_dst = link_endpoints(topology)
    return TransferTable(
        chunk=owned_chunks(spec, np.asarray(ranks)[host_of[message]], place_of[message]),
        src=link_src[link],
        dst=link_dst[link],
        link=link,
        start=recorded,
        end=recorded.copy(),
        op=np.full(len(link), OP_CODES.index(Op.COPY), np.uint8),
        deps_ptr=np.concatenate(([0], np.cumsum(relayed))).astype(np.int64),
        deps=np.flatnonzero(relayed) - 1,
    )


def _shift_routes(routes: MessageRoutes, ranks: list[int]) -> list[list[Route]]:
    """Per shift ``1 .. count - 1`` (index 0 up), every host's route to the host that many
    places after it: of its fastest routes, the least used by that shift so far, then the
    least booked by every shift."""
    count, link_us = len(ranks), routes.link_us
    booked_us = [0.0] * len(link_us)
    heavier = count * count * math.fsum(link_us)  # more than every shift books together
    by_shift = []
    for shift in range(1, count):
        load_us = list(booked_us)
        chosen = []
        for index, source in enumerate(ranks):
            fastest = routes.from_npu(source)[ranks[(index + shift) % count]][1]
            _, route = routes.cheapest(fastest, load_us)
            for link in route:
                load_us[link] += heavier + link_us[link]
                booked_us[link] += link_us[link]
            chosen.append(route)
        by_shift.append(chosen)
    return by_shift
