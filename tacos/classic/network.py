"""What the classic algorithms need to know about a network: paths, ring orders, node groups.

* :meth:`Network.path` -- the route of one logical message ``a -> b``: fewest
  hops, then fastest (per-chunk link times), ties to the lowest node ids. It may
  pass through switches (which forward) and NPUs (which store and forward).
* :func:`ring_order` -- the ranks ordered into a cycle that follows the
  topology: a Hamiltonian cycle of direct links when a cheap construction finds
  one (snake orders of grids in any factorization, Gray code on hypercubes),
  else the cheapest of rank order and a nearest-neighbour tour (improved by
  2-opt on small networks), all measured in path time; rank order on one
  switch, where every cycle costs the same.
* :func:`node_groups` -- the "nodes" of a hierarchical network: NPUs joined by
  links faster than the slowest tier (the fastest tier that makes groups), or
  NPUs sharing their first-hop switch; None when there is only one group.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence

from tacos.topology import Topology

TWO_OPT_MAX = 128
"""Ring orders of up to this many ranks are improved by 2-opt over all pairs."""
NEAREST_NEIGHBOUR_MAX = 4096
"""A nearest-neighbour ring tour is tried for up to this many ranks."""


class Network:
    """A topology with per-chunk link times and a cache of message paths."""

    def __init__(self, topology: Topology, chunk_bytes: int) -> None:
        self.topology = topology
        self.times = topology.link_times_us(chunk_bytes)
        self.num_npus = topology.num_npus
        self._paths: dict[tuple[int, int], tuple[int, ...]] = {}
        self.rings: dict[tuple[int, ...], list[int]] = {}
        self._direct: dict[tuple[int, int], int] = {}
        for link_id, link in enumerate(topology.links):
            if link.dst < self.num_npus and link.src < self.num_npus:
                key = (link.src, link.dst)
                best = self._direct.get(key)
                if best is None or self.times[link_id] < self.times[best]:
                    self._direct[key] = link_id

    def direct(self, a: int, b: int) -> bool:
        """Whether NPU ``a`` has a link straight to NPU ``b``."""
        return (a, b) in self._direct

    def path(self, a: int, b: int) -> tuple[int, ...]:
        """Link ids of the route ``a -> b`` (fewest hops, then fastest)."""
        key = (a, b)
        found = self._paths.get(key)
        if found is None:
            link_id = self._direct.get(key)
            found = (link_id,) if link_id is not None else self._search(a, stop=b)[b]
            self._paths[key] = found
        return found

    def path_time(self, a: int, b: int) -> float:
        return sum(self.times[link_id] for link_id in self.path(a, b))

    def paths_from(self, a: int) -> dict[int, tuple[int, ...]]:
        """Routes from ``a`` to every NPU it reaches (and caches them)."""
        found = self._search(a, stop=None)
        for b, links in found.items():
            self._paths.setdefault((a, b), self._direct_or(a, b, links))
        return {b: self._paths[(a, b)] for b in found}

    def _direct_or(self, a: int, b: int, links: tuple[int, ...]) -> tuple[int, ...]:
        link_id = self._direct.get((a, b))
        return (link_id,) if link_id is not None else links

    def _search(self, source: int, stop: int | None) -> dict[int, tuple[int, ...]]:
        """Lexicographic (hops, time) Dijkstra from ``source``: paths to NPUs (to ``stop`` only
        when given; the search ends when it is settled)."""
        topo, times = self.topology, self.times
        best: dict[int, tuple[int, float]] = {source: (0, 0.0)}
        via: dict[int, int] = {}
        heap: list[tuple[int, float, int]] = [(0, 0.0, source)]
        settled: set[int] = set()
        while heap:
            hops, elapsed, node = heapq.heappop(heap)
            if node in settled:
                continue
            settled.add(node)
            if node == stop:
                break
            for link_id in topo.out_links[node]:
                nxt = topo.links[link_id].dst
                if nxt in settled:
                    continue
                key = (hops + 1, elapsed + times[link_id])
                if nxt not in best or key < best[nxt]:
                    best[nxt] = key
                    via[nxt] = link_id
                    heapq.heappush(heap, (key[0], key[1], nxt))
        targets = [stop] if stop is not None else [n for n in settled if n < self.num_npus]
        out: dict[int, tuple[int, ...]] = {}
        for target in targets:
            if target == source or target not in settled:
                continue
            links: list[int] = []
            node = target
            while node != source:
                link_id = via[node]
                links.append(link_id)
                node = topo.links[link_id].src
            out[target] = tuple(reversed(links))
        return out


# ------------------------------------------------------------------ ring orders
def ring_order(net: Network, ranks: Sequence[int]) -> list[int]:
    """``ranks`` as a cycle that follows the topology (see the module docs).

    The cost of a cycle is the path time of its hops in both directions, so the
    order suits unidirectional and bidirectional rings alike.
    """
    key = tuple(sorted(ranks))
    if key not in net.rings:
        net.rings[key] = _ring_order(net, list(key))
    return net.rings[key]


def _ring_order(net: Network, ranks: list[int]) -> list[int]:
    n = len(ranks)
    if n <= 3 or _behind_one_switch(net.topology, ranks):
        return ranks
    candidates = [ranks]
    for order in _structured_cycles(ranks):
        if all(
            net.direct(order[i], order[(i + 1) % n]) and net.direct(order[(i + 1) % n], order[i])
            for i in range(n)
        ):
            candidates.append(order)
            break  # a Hamiltonian cycle of direct links: nothing is cheaper per hop
    if n <= NEAREST_NEIGHBOUR_MAX and len(candidates) == 1:
        candidates.append(_nearest_neighbour(net, ranks))
    best = min(candidates, key=lambda order: _cycle_cost(net, order))
    if n <= TWO_OPT_MAX and not _all_direct(net, best):
        best = _two_opt(net, best)
    return best


def _behind_one_switch(topology: Topology, ranks: Sequence[int]) -> bool:
    """Whether every rank's one link out goes to, and its one link in comes from, a switch
    they all share: a hop between two ranks is then the sender's link up and the
    receiver's link down, every cycle crosses each rank's two links once each way, and
    all cost the same (the search took a broadcast on a 2000-NPU switch from 13.2 to 16.6 s)."""
    hubs = set()
    for rank in ranks:
        if len(topology.out_links[rank]) != 1 or len(topology.in_links[rank]) != 1:
            return False
        up = topology.links[topology.out_links[rank][0]]
        down = topology.links[topology.in_links[rank][0]]
        if up.dst != down.src or not topology.is_switch(up.dst):
            return False
        hubs.add(up.dst)
    return len(hubs) == 1


def _all_direct(net: Network, order: Sequence[int]) -> bool:
    n = len(order)
    return all(net.direct(order[i], order[(i + 1) % n]) for i in range(n))


def _cycle_cost(net: Network, order: Sequence[int]) -> float:
    n = len(order)
    return sum(
        net.path_time(order[i], order[(i + 1) % n]) + net.path_time(order[(i + 1) % n], order[i])
        for i in range(n)
    )


def _structured_cycles(ranks: Sequence[int]) -> list[list[int]]:
    """Cycles that are Hamiltonian on grids and hypercubes numbered like the generators.

    Positions are indices into the sorted ranks. For every factorization
    ``n = d0 x d1 [x d2]`` (dimension 0 fastest) with an even side, the classic
    2D construction: along one side, then snaking back over the rest. Only the
    caller's adjacency check decides whether a candidate is used.
    """
    n = len(ranks)
    orders: list[list[int]] = []
    if n & (n - 1) == 0:
        orders.append([ranks[i ^ (i >> 1)] for i in range(n)])  # Gray code
    for dims in _factorizations(n, max_parts=3):
        if len(dims) < 2:
            continue
        first, rest = dims[0], dims[1:]
        line = _snake(rest)  # a path over the other dimensions, consecutive cells adjacent
        for rows_are_first in (False, True):
            rows, cols = (first, len(line)) if rows_are_first else (len(line), first)
            if rows % 2:
                continue
            order = []
            for r, c in _grid_cycle(rows, cols):
                i, j = (r, c) if rows_are_first else (c, r)
                order.append(ranks[i + first * line[j]])
            orders.append(order)
    return orders


def _factorizations(n: int, max_parts: int) -> list[tuple[int, ...]]:
    if max_parts == 1:
        return [(n,)] if n >= 2 else []
    out: list[tuple[int, ...]] = [(n,)] if n >= 2 else []
    for d in range(2, n // 2 + 1):
        if n % d == 0:
            out.extend((d, *rest) for rest in _factorizations(n // d, max_parts - 1))
    return out


def _snake(dims: Sequence[int]) -> list[int]:
    """Boustrophedon path over a grid of ``dims`` (first fastest), as flat indices."""
    if len(dims) == 1:
        return list(range(dims[0]))
    inner = _snake(dims[:-1])
    stride = math.prod(dims[:-1])
    out: list[int] = []
    for k in range(dims[-1]):
        part = inner if k % 2 == 0 else inner[::-1]
        out.extend(k * stride + x for x in part)
    return out


def _grid_cycle(rows: int, cols: int) -> list[tuple[int, int]]:
    """A Hamiltonian cycle of a ``rows x cols`` grid graph (``rows`` even, ``cols`` >= 2)."""
    cells = [(0, c) for c in range(cols)]
    for r in range(1, rows):
        span = range(cols - 1, 0, -1) if r % 2 else range(1, cols)
        cells.extend((r, c) for c in span)
    cells.extend((r, 0) for r in range(rows - 1, 0, -1))
    return cells


def _nearest_neighbour(net: Network, ranks: Sequence[int]) -> list[int]:
    """Greedy tour: from the first rank, always on to the unvisited rank with the fastest path."""
    order = [ranks[0]]
    left = set(ranks[1:])
    topo, times = net.topology, net.times
    while left:
        current = order[-1]
        nxt = None
        for link_id in topo.out_links[current]:  # a direct neighbour, fastest then lowest id
            v = topo.links[link_id].dst
            if v in left and (nxt is None or (times[link_id], v) < nxt):
                nxt = (times[link_id], v)
        chosen = nxt[1] if nxt is not None else _nearest_unvisited(net, current, left)
        order.append(chosen)
        left.discard(chosen)
    return order


def _nearest_unvisited(net: Network, source: int, left: set[int]) -> int:
    """The unvisited rank with the fastest path from ``source`` (then lowest id)."""
    topo, times = net.topology, net.times
    heap: list[tuple[float, int]] = [(0.0, source)]
    settled: set[int] = set()
    while heap:
        elapsed, node = heapq.heappop(heap)
        if node in settled:
            continue
        settled.add(node)
        if node in left:
            return node
        for link_id in topo.out_links[node]:
            nxt = topo.links[link_id].dst
            if nxt not in settled:
                heapq.heappush(heap, (elapsed + times[link_id], nxt))
    return min(left)  # unreachable ranks are refused before: keep the tour total


def _two_opt(net: Network, order: list[int]) -> list[int]:
    """Reverse segments while that lowers the symmetric path-time cost of the cycle."""
    n = len(order)
    index = {rank: i for i, rank in enumerate(order)}
    for a in order:
        net.paths_from(a)  # one search per rank instead of one per pair
    cost = [[0.0] * n for _ in range(n)]
    for a, b in itertools.permutations(order, 2):
        cost[index[a]][index[b]] = net.path_time(a, b) + net.path_time(b, a)
    tour = list(range(n))
    improved = True
    passes = 0
    while improved and passes < 20:
        improved = False
        passes += 1
        for i in range(n - 1):
            for j in range(i + 2, n if i else n - 1):
                a, b, c, d = tour[i], tour[i + 1], tour[j], tour[(j + 1) % n]
                if cost[a][c] + cost[b][d] < cost[a][b] + cost[c][d] - 1e-9:
                    tour[i + 1 : j + 1] = tour[i + 1 : j + 1][::-1]
                    improved = True
    return [order[k] for k in tour]


# ------------------------------------------------------------------ node groups
def node_groups(topology: Topology, ranks: Sequence[int]) -> list[list[int]] | None:
    """The ranks split into equal "nodes" (see the module docs), or None if there are none."""
    wanted = sorted(ranks)
    levels = sorted({link.bandwidth_GBps for link in topology.links}, reverse=True)
    for threshold in levels[:-1]:
        groups = _components(topology, wanted, threshold)
        if _usable(groups, len(wanted)):
            return groups
    by_switch: dict[int, list[int]] = {}
    for rank in wanted:
        switches = [
            topology.links[link_id].dst
            for link_id in topology.out_links[rank]
            if topology.is_switch(topology.links[link_id].dst)
        ]
        if not switches:
            return None
        by_switch.setdefault(min(switches), []).append(rank)
    groups = sorted(by_switch.values())
    return groups if _usable(groups, len(wanted)) else None


def _usable(groups: list[list[int]], count: int) -> bool:
    sizes = {len(g) for g in groups}
    return len(groups) >= 2 and len(groups) < count and len(sizes) == 1


def _components(topology: Topology, ranks: Sequence[int], threshold: float) -> list[list[int]]:
    root = topology.components_over(threshold)
    groups: dict[int, list[int]] = {}
    for rank in ranks:
        groups.setdefault(root[rank], []).append(rank)
    return sorted(groups.values())
