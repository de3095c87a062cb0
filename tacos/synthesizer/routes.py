"""Routes: the NPU-to-NPU paths the greedy matcher chooses between.

NPUs have buffers, so a chunk can rest on any NPU and be forwarded later; a
direct link between two NPUs is a one-hop route. Switches have no buffers a
schedule could use: a chunk entering a switch must leave it towards one NPU
(unicast, as in ASTRA-sim and NCCL). So for every NPU ``u`` and every NPU ``v``
reachable from ``u`` through switches only, there is one route: the fastest
such path (per-chunk link times; ties to the lowest link ids). Routes say who
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


def routes_from(
    topology: Topology, chunk_bytes: int, fabric: Fabric | None = None
) -> list[list[Route]]:
    """For each node, the routes leaving it, ordered by first link, then destination.

    Switch nodes get no routes of their own: they are only passed through. A
    route through switches is a fastest path (in whole picoseconds; ties to the
    lowest first link, then to the lowest link ids), found from the shortest
    paths of the ``fabric`` (made here if not given) its first link enters.
    """
    times = topology.link_times_us(chunk_bytes)
    if fabric is None:
        fabric = Fabric(topology, times)
    table: list[list[Route]] = [[] for _ in range(topology.num_nodes)]
    static_paths: dict[int, list[tuple[int, ...]]] = {}
    for u in topology.npus:
        fastest: dict[int, tuple[int, int, int, int]] = {}
        for link_id in topology.out_links[u]:
            v = topology.links[link_id].dst
            if not topology.is_switch(v):
                table[u].append(Route(u, v, (link_id,)))
                continue
            dag = fabric.paths_from(v)
            first_ps = fabric.cost_ps[link_id]
            for i in range(dag.first_npu, len(dag.nodes)):
                npu, length_ps = dag.nodes[i], first_ps + dag.length_ps[i]
                if npu != u and (npu not in fastest or length_ps < fastest[npu][0]):
                    fastest[npu] = (length_ps, link_id, v, i)
        for npu, (_, link_id, switch, i) in fastest.items():
            if switch not in static_paths:
                static_paths[switch] = fabric.paths_from(switch).static_paths()
            table[u].append(Route(u, npu, (link_id, *static_paths[switch][i])))
        table[u].sort(key=lambda r: (r.links[0], r.dst))
    return table


def crossbars(topology: Topology) -> list[bool]:
    """Per node, whether it is a crossbar: a switch linked to NPUs only (an NVSwitch, the
    one switch of a star). Its inputs contend for nothing but its outputs, so the uplinks
    into it are matched with destinations each instant (``greedy._SpreadState.match_uplinks``).
    """
    is_crossbar = [topology.is_switch(node) for node in range(topology.num_nodes)]
    for link in topology.links:
        if topology.is_switch(link.src) and topology.is_switch(link.dst):
            is_crossbar[link.src] = is_crossbar[link.dst] = False
    return is_crossbar


def matching_groups(topology: Topology) -> list[int]:
    """Per node, the group the uplinks into it are matched in: a switch id, -1 for none.

    A crossbar's uplinks are matched together (:func:`crossbars`). So are
    those into the NICs of one leaf: a NIC is a switch that one NPU feeds
    and that has one link onward, to its leaf, whose links down to the NICs
    are what those uplinks contend for, as a crossbar's outputs are (each
    GPU of a rail sends to a distinct peer each round).
    """
    groups = [node if is_crossbar else -1 for node, is_crossbar in enumerate(crossbars(topology))]
    links = topology.links
    for node in range(topology.num_npus, topology.num_nodes):
        fed_by = [i for i in topology.in_links[node] if not topology.is_switch(links[i].src)]
        onward = [i for i in topology.out_links[node] if topology.is_switch(links[i].dst)]
        if len(fed_by) == 1 and len(onward) == 1:
            groups[node] = links[onward[0]].dst
    return groups


def rarest_neighbours(topology: Topology) -> list[list[int]]:
    """Per node, the NPUs the "rarest" chunk policy counts as its in-neighbours, by id.

    Those with a direct link into the node or a route through one switch: the
    nodes that compete to feed it over its own ingress links. Farther senders
    (through a NIC and a leaf switch, say) reach every node of a cluster alike,
    so counting them says nothing about this node and costs a pass over all
    NPUs per decision.
    """
    links = topology.links
    found: list[set[int]] = [set() for _ in range(topology.num_nodes)]
    for node in topology.npus:
        for link_id in topology.in_links[node]:
            sender = links[link_id].src
            if not topology.is_switch(sender):
                found[node].add(sender)
                continue
            for into_switch in topology.in_links[sender]:
                npu = links[into_switch].src
                if npu != node and not topology.is_switch(npu):
                    found[node].add(npu)
    return [sorted(s) for s in found]


def one_uplink_hosts(topology: Topology) -> list[bool]:
    """Per node, whether it is an NPU whose only link out leads into a switch (a fat
    tree's host): the NPUs that send their own chunks first, when asked to."""
    links = topology.links
    return [
        not topology.is_switch(node)
        and len(topology.out_links[node]) == 1
        and topology.is_switch(links[topology.out_links[node][0]].dst)
        for node in range(topology.num_nodes)
    ]


def faster_rivals(topology: Topology, durations: list[float]) -> list[tuple[int, ...]]:
    """Per link, the other direct links from NPUs into its receiver, if one of them is faster.

    The greedy lets a direct link leave a chunk to these rivals when they can
    bring the receiver everything it still lacks before this link's transfer
    would arrive (see ``greedy.py``): a slow link taking the last chunk of a
    node that a fast link would deliver sooner delays the whole collective.
    Only a strictly faster rival can arrive strictly sooner than a link free
    now, so links whose rivals are no faster get none and never wait (meshes
    and tori of one link speed keep their schedules). Links into or out of
    switches get none: a switch's link carries chunks from many senders, so
    what it could bring one receiver is not known.
    """
    links = topology.links
    rivals: list[tuple[int, ...]] = [() for _ in links]
    for link_id, link in enumerate(links):
        if topology.is_switch(link.src) or topology.is_switch(link.dst):
            continue
        others = tuple(
            other
            for other in topology.in_links[link.dst]
            if other != link_id and not topology.is_switch(links[other].src)
        )
        if any(durations[other] < durations[link_id] for other in others):
            rivals[link_id] = others
    return rivals


def overtakable_in_links(topology: Topology, rivals: list[tuple[int, ...]]) -> list[list[int]]:
    """Per node, its in-links that have faster rivals: those whose transfers a faster
    link may overtake (see ``greedy.py``, module docs)."""
    return [[lk for lk in topology.in_links[v] if rivals[lk]] for v in range(topology.num_nodes)]


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
    length_ps: tuple[int, ...]
    first_npu: int  # position of the first NPU in ``nodes``

    def static_paths(self) -> list[tuple[int, ...]]:
        """Per node, the links of the shortest path to it through the lowest link ids."""
        paths: list[tuple[int, ...]] = [()]
        for edges in self.edges_into[1:]:
            link_id, pred = edges[0]
            paths.append((*paths[pred], link_id))
        return paths


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
        self.cost_ps = self.cost_ps_of(times)
        self._out = [
            [(link_id, topology.links[link_id].dst) for link_id in topology.out_links[node]]
            for node in range(topology.num_nodes)
        ]
        self._from_switch: dict[int, ShortestPaths] = {}

    @staticmethod
    def cost_ps_of(times: list[float]) -> list[int]:
        """Link times in whole picoseconds, the unit path lengths are compared in."""
        return [round(t * 1e6) for t in times]

    def paths_from(self, switch: int) -> ShortestPaths:
        """The shortest paths from ``switch`` (found on first use)."""
        found = self._from_switch.get(switch)
        if found is None:
            found = self._shortest_paths(switch)
            self._from_switch[switch] = found
        return found

    def _shortest_paths(self, entry: int) -> ShortestPaths:
        """Dijkstra over the switches from ``entry`` (integer costs), then the DAG's edges."""
        cost, out, num_npus = self.cost_ps, self._out, self.topology.num_npus
        length = {entry: 0}
        settled: dict[int, None] = {}  # in settling order: every DAG edge points forwards
        heap = [(0, entry)]
        while heap:
            here, node = heapq.heappop(heap)
            if node in settled or here > length[node]:
                continue
            settled[node] = None
            for link_id, nxt in out[node]:
                if nxt >= num_npus and here + cost[link_id] < length.get(nxt, 2**63):
                    length[nxt] = here + cost[link_id]
                    heapq.heappush(heap, (length[nxt], nxt))
        for node in settled:
            for link_id, nxt in out[node]:
                if nxt < num_npus:
                    length[nxt] = min(length.get(nxt, 2**63), length[node] + cost[link_id])
        nodes = (*settled, *sorted(n for n in length if n < num_npus))
        position = {node: i for i, node in enumerate(nodes)}
        edges_into: list[list[tuple[int, int]]] = [[] for _ in nodes]
        for node in settled:
            here = length[node]
            for link_id, nxt in out[node]:
                at = position.get(nxt, 0)
                if at and here + cost[link_id] == length[nxt]:
                    edges_into[at].append((link_id, position[node]))
        path_us = [0.0] * len(nodes)
        for i in range(1, len(nodes)):
            edges_into[i].sort()
            link_id, pred = edges_into[i][0]
            path_us[i] = path_us[pred] + self.times[link_id]
        return ShortestPaths(
            nodes,
            tuple(map(tuple, edges_into)),
            tuple(path_us),
            tuple(length[node] for node in nodes),
            len(settled),
        )

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
