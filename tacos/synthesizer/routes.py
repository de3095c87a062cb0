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
import math
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


@dataclass(frozen=True, slots=True)
class ShortestPaths:
    """The statically shortest paths from one switch into the fabric and out to NPUs.

    A directed acyclic graph: ``nodes`` lists the switches reached (the entry
    first) and then the NPUs reached, each switch after every switch on a
    shortest path to it, NPUs by id; ``edges_into[i]`` are the ``(link,
    predecessor position)`` pairs that end a shortest path at ``nodes[i]``, by
    link id; ``path_us[i]`` is the per-chunk time of a shortest path from the
    entry to ``nodes[i]``. Lengths are compared in whole picoseconds, so that
    equal-cost paths whose float sums differ in the last bit still count as equal.
    """

    nodes: tuple[int, ...]
    edges_into: tuple[tuple[tuple[int, int], ...], ...]
    path_us: tuple[float, ...]
    first_npu: int  # position of the first NPU in ``nodes``

    @classmethod
    def from_switch(cls, topology: Topology, times: list[float], entry: int) -> ShortestPaths:
        cost = [round(t * 1e6) for t in times]
        length = {entry: 0}
        settled: dict[int, None] = {}  # in settling order: every DAG edge points forwards
        heap = [(0, entry)]
        while heap:
            here, node = heapq.heappop(heap)
            if node in settled or here > length[node]:
                continue
            settled[node] = None
            for link_id in topology.out_links[node]:
                nxt = topology.links[link_id].dst
                if topology.is_switch(nxt) and here + cost[link_id] < length.get(nxt, 2**63):
                    length[nxt] = here + cost[link_id]
                    heapq.heappush(heap, (length[nxt], nxt))
        npu_length: dict[int, int] = {}
        for node in settled:
            for link_id in topology.out_links[node]:
                nxt = topology.links[link_id].dst
                if not topology.is_switch(nxt):
                    npu_length[nxt] = min(npu_length.get(nxt, 2**63), length[node] + cost[link_id])
        nodes = (*settled, *sorted(npu_length))
        position = {node: i for i, node in enumerate(nodes)}
        target = {**length, **npu_length}
        edges_into: list[list[tuple[int, int]]] = [[] for _ in nodes]
        for node in settled:
            for link_id in topology.out_links[node]:
                nxt = topology.links[link_id].dst
                if nxt in position and length[node] + cost[link_id] == target[nxt] and nxt != entry:
                    edges_into[position[nxt]].append((link_id, position[node]))
        path_us = [0.0] * len(nodes)
        for i in range(1, len(nodes)):
            edges_into[i].sort()
            link_id, pred = edges_into[i][0]
            path_us[i] = path_us[pred] + times[link_id]
        return cls(nodes, tuple(map(tuple, edges_into)), tuple(path_us), len(settled))


class Fabric:
    """Paths through the switches, chosen when a chunk is sent.

    A chunk entering the switch fabric may take any of its shortest paths (in
    per-chunk link time: the equal-cost multipath of real fabrics, parallel
    cables included); of those it takes the one that arrives first given when
    each link is already booked, queueing in a switch until its next link is
    free (ties to the lowest link ids). One fixed path per NPU pair would send
    every chunk between two pods of a fat tree over the same core link while
    the others idle. The shortest paths from each switch are found once
    (:class:`ShortestPaths`); a send only walks them in order.
    """

    def __init__(self, topology: Topology, times: list[float]) -> None:
        self.topology = topology
        self.times = times
        self._from_switch: dict[int, ShortestPaths] = {}

    def paths_from(self, switch: int) -> ShortestPaths:
        """The shortest paths from ``switch`` (found on first use)."""
        found = self._from_switch.get(switch)
        if found is None:
            found = ShortestPaths.from_switch(self.topology, self.times, switch)
            self._from_switch[switch] = found
        return found

    def earliest(
        self, first_link: int, start: float, free_at: list[float]
    ) -> dict[int, tuple[float, float, tuple[int, ...]]]:
        """Per NPU reached through the switch at the end of ``first_link``, by id: its path.

        A path is (arrival time, per-chunk path time without queueing, links).
        The chunk leaves on ``first_link`` at ``start``; every path is a
        statically shortest one, and among those the earliest to arrive.
        """
        source = self.topology.links[first_link].src
        dag = self.paths_from(self.topology.links[first_link].dst)
        arrival = [0.0] * len(dag.nodes)
        came_by: list[tuple[int, int]] = [(first_link, -1)] * len(dag.nodes)
        arrival[0] = max(start, free_at[first_link]) + self.times[first_link]
        for i in range(1, len(dag.nodes)):
            best = math.inf
            for link_id, pred in dag.edges_into[i]:
                candidate = max(arrival[pred], free_at[link_id]) + self.times[link_id]
                if candidate < best:
                    best, came_by[i] = candidate, (link_id, pred)
            arrival[i] = best
        found = {}
        for i in range(dag.first_npu, len(dag.nodes)):
            if dag.nodes[i] == source:
                continue
            links = []
            at = i
            while at >= 0:
                link_id, at = came_by[at]
                links.append(link_id)
            path_us = self.times[first_link] + dag.path_us[i]
            found[dag.nodes[i]] = (arrival[i], path_us, tuple(reversed(links)))
        return found
