"""Routes: the NPU-to-NPU paths the greedy matcher chooses between.

NPUs have buffers, so a chunk can rest on any NPU and be forwarded later; a
direct link between two NPUs is a one-hop route. Switches have no buffers a
schedule could use: a chunk entering a switch must leave it towards one NPU
(unicast, as in ASTRA-sim and NCCL). So for every NPU ``u`` and every NPU ``v``
reachable from ``u`` through switches only, there is one route: the fastest
such path (per-chunk link times; ties to the lowest node ids). Routes say who
reaches whom and how far it is; which of the equally fast paths a chunk
really takes is chosen when it is sent, by :class:`Fabric`.

Example:
    >>> from tacos.topology import from_spec
    >>> [r.links for r in routes_from(from_spec("switch:3"), 2**20)[0]]
    [(0, 3), (0, 5)]
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from tacos.topology import Topology


@dataclass(frozen=True, slots=True)
class Route:
    """Links from NPU ``src`` to NPU ``dst``; every intermediate node is a switch."""

    src: int
    dst: int
    links: tuple[int, ...]


def routes_from(topology: Topology, chunk_bytes: int) -> list[list[Route]]:
    """For each node, the routes leaving it, ordered by first link, then destination.

    Switch nodes get no routes of their own: they are only passed through.
    """
    times = topology.link_times_us(chunk_bytes)
    table: list[list[Route]] = [[] for _ in range(topology.num_nodes)]
    for u in topology.npus:
        for link_id in topology.out_links[u]:
            v = topology.links[link_id].dst
            if not topology.is_switch(v):
                table[u].append(Route(u, v, (link_id,)))
        if topology.num_switches:
            table[u].extend(_switch_routes(topology, u, times))
        table[u].sort(key=lambda r: (r.links[0], r.dst))
    return table


def _switch_routes(topology: Topology, source: int, times: list[float]) -> list[Route]:
    """Fastest paths from ``source`` into the switch fabric and out to each NPU."""
    best: dict[int, tuple[float, tuple[int, ...]]] = {}
    heap: list[tuple[float, tuple[int, ...], int]] = []
    for link_id in topology.out_links[source]:
        switch = topology.links[link_id].dst
        if topology.is_switch(switch):
            heapq.heappush(heap, (times[link_id], (link_id,), switch))
    settled: set[int] = set()
    while heap:
        elapsed, path, node = heapq.heappop(heap)
        if node in settled:
            continue
        settled.add(node)
        for link_id in topology.out_links[node]:
            nxt = topology.links[link_id].dst
            arrival = elapsed + times[link_id]
            if topology.is_switch(nxt):
                if nxt not in settled:
                    heapq.heappush(heap, (arrival, (*path, link_id), nxt))
            elif nxt != source:
                candidate = (arrival, (*path, link_id))
                if nxt not in best or candidate < best[nxt]:
                    best[nxt] = candidate
    return [Route(source, dst, path) for dst, (_, path) in sorted(best.items())]


class Fabric:
    """Paths through the switches, chosen when a chunk is sent.

    A chunk entering the switch fabric may take any of its shortest paths (in
    per-chunk link time: the equal-cost multipath of real fabrics, parallel
    cables included); of those it takes the one that arrives first given when
    each link is already booked, queueing in a switch until its next link is
    free. One fixed path per NPU pair would send every chunk between two pods
    of a fat tree over the same core link while the others idle.
    """

    def __init__(self, topology: Topology, times: list[float]) -> None:
        self.topology = topology
        self.times = times
        # Static path lengths are compared in whole picoseconds, so that equal-cost
        # paths whose float sums differ in the last bit still count as equal.
        self._cost_ps = [round(t * 1e6) for t in times]

    def earliest(
        self, first_link: int, start: float, free_at: list[float]
    ) -> dict[int, tuple[float, float, tuple[int, ...]]]:
        """Per NPU reached through the switch at the end of ``first_link``: its path.

        A path is (arrival time, per-chunk path time without queueing, links).
        The chunk leaves on ``first_link`` at ``start``; every path is a
        statically shortest one, and among those the earliest to arrive.
        """
        topo, times, cost = self.topology, self.times, self._cost_ps
        source = topo.links[first_link].src
        entry = topo.links[first_link].dst
        arrival = max(start, free_at[first_link]) + times[first_link]
        heap: list[tuple[int, float, float, tuple[int, ...], int]] = [
            (cost[first_link], arrival, times[first_link], (first_link,), entry)
        ]
        settled: set[int] = set()
        found: dict[int, tuple[int, float, float, tuple[int, ...]]] = {}
        while heap:
            length, ready, path_us, path, node = heapq.heappop(heap)
            if node in settled:
                continue
            settled.add(node)
            for link_id in topo.out_links[node]:
                nxt = topo.links[link_id].dst
                label = (
                    length + cost[link_id],
                    max(ready, free_at[link_id]) + times[link_id],
                    path_us + times[link_id],
                    (*path, link_id),
                )
                if topo.is_switch(nxt):
                    if nxt not in settled:
                        heapq.heappush(heap, (*label, nxt))
                elif nxt != source and (nxt not in found or label[:2] < found[nxt][:2]):
                    found[nxt] = label
        return {npu: (arrive, path_us, links) for npu, (_, arrive, path_us, links) in found.items()}
