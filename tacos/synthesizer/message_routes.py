"""One-message routes between NPUs, for plans that send whole messages NPU to NPU.

A message goes from an NPU to an NPU over a direct link or through switches
only (never through another NPU, which would add itself into a sum in
passing), by a fastest such route. Of the equally fast routes (a fat tree's
planes, parallel cables), :meth:`MessageRoutes.cheapest` takes the one whose
links have the least booked so far, so the plans that use them
(:mod:`.trees`, :mod:`.rotation`) spread their messages over the fabric.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from tacos.shortest_paths import times_from
from tacos.topology import Topology

Route = tuple[int, ...]
"""The links one message crosses from an NPU to an NPU, through switches only."""
Reach = tuple[float, Route]
"""How an NPU reaches another in one message: microseconds for a chunk, and the route."""


class MessageRoutes:
    """One-message routes between NPUs: a direct link, or a path through switches only
    (fewest microseconds for one chunk, then fewest hops)."""

    def __init__(self, topology: Topology, chunk_bytes: int) -> None:
        self.topology = topology
        self.link_us = topology.link_times_us(chunk_bytes)
        self._from: dict[int, dict[int, Reach]] = {}
        self._into: dict[tuple[int, frozenset[int]], list[tuple[int, Reach]]] = {}
        self._out_of: dict[tuple[int, frozenset[int]], list[tuple[int, Reach]]] = {}
        self._fastest_into: dict[int, dict[int, list[int]]] = {}
        self._arrival: dict[int, dict[int, tuple[float, int]]] = {}
        self._on_fastest: dict[tuple[int, int], list[tuple[int, int, int, float]]] = {}
        self.longest_hops = 1

    def from_npu(self, source: int) -> dict[int, Reach]:
        """Every NPU one message from ``source`` reaches: its time and route."""
        found = self._from.get(source)
        if found is None:
            found = self._from[source] = self._search(source)
            self.longest_hops = max([self.longest_hops, *(len(r) for _, r in found.values())])
        return found

    def connect(self, groups: Sequence[Sequence[int]], places: bool = True) -> bool:
        """Whether messages inside each group join all its NPUs both ways, and (``places``)
        NPUs at one place of different groups reach each other in one message."""
        for group in groups:
            from_first, to_first = self.distances(group[0], frozenset(group))
            if len(from_first) != len(group) or len(to_first) != len(group):
                return False
        return not places or all(
            peer in self.from_npu(npu)
            for place in zip(*groups, strict=True)
            for npu in place
            for peer in place
            if peer != npu
        )

    def distances(
        self, root: int, members: frozenset[int]
    ) -> tuple[dict[int, float], dict[int, float]]:
        """Microseconds from ``root`` to each member, and from each member to ``root``, by
        messages between members."""
        return (
            times_from(root, lambda npu: [(b, us) for b, (us, _) in self.into(npu, members)]),
            times_from(root, lambda npu: [(a, us) for a, (us, _) in self.out_of(npu, members)]),
        )

    def into(self, source: int, members: frozenset[int]) -> list[tuple[int, Reach]]:
        """The members one message from ``source`` reaches (sorted)."""
        key = (source, members)
        if key not in self._into:
            found = self.from_npu(source)
            self._into[key] = sorted((b, found[b]) for b in found if b in members)
        return self._into[key]

    def out_of(self, target: int, members: frozenset[int]) -> list[tuple[int, Reach]]:
        """The members that reach ``target`` in one message (sorted)."""
        key = (target, members)
        if key not in self._out_of:
            self._out_of[key] = [(a, self.from_npu(a)[target]) for a in sorted(members)
                                 if target in self.from_npu(a)]  # fmt: skip
        return self._out_of[key]

    def cheapest(self, route: Route, load_us: Sequence[float]) -> tuple[float, Route]:
        """Of the fastest routes between ``route``'s ends, the one whose links have the
        least ``load_us`` booked plus their own time, and that sum: parallel links and the
        switches of a fat tree's other planes are taken in turn, not one path for every
        message."""
        links = self.topology.links
        source, target = links[route[0]].src, links[route[-1]].dst
        steps = self._fastest_steps(source, target)
        if len(steps) == len(route):  # the only fastest route
            return sum(load_us[link] + self.link_us[link] for link in route), route
        best: dict[int, tuple[float, Route]] = {source: (0.0, ())}
        for link, start, end, link_us in steps:
            cost, so_far = best[start]
            option = (cost + load_us[link] + link_us, (*so_far, link))
            if end not in best or option < best[end]:
                best[end] = option
        return best[target]

    def _fastest_steps(self, source: int, target: int) -> list[tuple[int, int, int, float]]:
        """The links on fastest routes from ``source`` to ``target`` (with their ends and
        time), each after the links into its start."""
        key = (source, target)
        if key not in self._on_fastest:
            self.from_npu(source)
            into, links = self._fastest_into[source], self.topology.links
            found, waiting = set(), [target]
            while waiting:
                node = waiting.pop()
                for link in into.get(node, ()):
                    if link not in found:
                        found.add(link)
                        waiting.append(links[link].src)
            arrival = self._arrival[source]
            self._on_fastest[key] = [
                (i, links[i].src, links[i].dst, self.link_us[i])
                for i in sorted(found, key=lambda i: (arrival[links[i].dst], i))
            ]
        return self._on_fastest[key]

    def _search(self, source: int) -> dict[int, Reach]:
        topology, best = self.topology, {source: (0.0, 0)}
        via: dict[int, list[int]] = {}
        heap = [(0.0, 0, source)]
        while heap:
            elapsed, hops, node = heapq.heappop(heap)
            if (elapsed, hops) > best[node] or (node != source and not topology.is_switch(node)):
                continue
            for link_id in topology.out_links[node]:
                nxt = topology.links[link_id].dst
                key = (elapsed + self.link_us[link_id], hops + 1)
                if nxt in best and _same(key, best[nxt]):
                    via[nxt].append(link_id)
                elif nxt not in best or key < best[nxt]:
                    best[nxt], via[nxt] = key, [link_id]
                    heapq.heappush(heap, (*key, nxt))
        self._fastest_into[source] = via
        self._arrival[source] = best
        found: dict[int, Reach] = {}
        for target in best:
            if target == source or topology.is_switch(target):
                continue
            route, node = [], target
            while node != source:
                route.append(via[node][0])
                node = topology.links[via[node][0]].src
            found[target] = (best[target][0], tuple(reversed(route)))
        return found


def _same(key: tuple[float, int], other: tuple[float, int]) -> bool:
    """Whether two (microseconds, hops) keys are one, up to the sums' rounding."""
    return key[1] == other[1] and abs(key[0] - other[0]) <= 1e-9 * max(1.0, key[0])
