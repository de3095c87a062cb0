"""Shortest times over a topology's links, compiled: what the lower bounds measure distances with.

A time here is a sum of per-link times along a path (a chunk crosses a link
whole before the next hop starts), so a shortest time is how soon a chunk can
get from one place to another on an idle network.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numba import njit

from tacos.topology import Topology


class LinkTimes:
    """A topology's links with a time each, ready for shortest-time searches.

    ``backwards=True`` follows every link against its direction, which gives
    the time from each node *to* a set of nodes instead of from it.
    """

    def __init__(
        self, topology: Topology, times_us: Sequence[float] | np.ndarray, *, backwards: bool = False
    ):
        incidence = topology.in_links if backwards else topology.out_links
        self._ptr = np.zeros(topology.num_nodes + 1, np.int64)
        np.cumsum([len(ids) for ids in incidence], out=self._ptr[1:])
        self._links = np.fromiter((i for ids in incidence for i in ids), np.int64, len(times_us))
        self._far_end = np.fromiter(
            (lk.src if backwards else lk.dst for lk in topology.links),
            np.int64,
            len(topology.links),
        )
        self._weight = np.asarray(times_us, np.float64)

    def from_nodes(self, sources: Iterable[int]) -> np.ndarray:
        """Per node, the shortest time from the nearest of ``sources`` (inf if none reaches it)."""
        starts = np.fromiter(sources, np.int64)
        return _dijkstra(starts, self._ptr, self._links, self._far_end, self._weight)


def times_from(root: int, neighbours: Callable[[int], list[tuple[int, float]]]) -> dict[int, float]:
    """Microseconds from ``root`` to every node ``neighbours`` (a node's ``(next node,
    us)`` pairs) leads to: Dijkstra in plain Python, for small graphs that are views of a
    topology (a server's links, routes between NPUs) rather than its arrays."""
    distance, heap = {root: 0.0}, [(0.0, root)]
    while heap:
        elapsed, node = heapq.heappop(heap)
        if elapsed > distance[node]:
            continue
        for other, us in neighbours(node):
            if elapsed + us < distance.get(other, float("inf")):
                distance[other] = elapsed + us
                heapq.heappush(heap, (elapsed + us, other))
    return distance


@njit(cache=True)
def _dijkstra(
    sources: np.ndarray,
    ptr: np.ndarray,
    links: np.ndarray,
    far_end: np.ndarray,
    weight: np.ndarray,
) -> np.ndarray:
    """Shortest times from the nearest of ``sources`` (inf where unreachable).

    A binary heap of (distance, node), popped in the order Python's ``heapq``
    pops such tuples, so the sums, and the bounds, are bit for bit those of a
    plain-Python Dijkstra.
    """
    n = ptr.shape[0] - 1
    dist = np.full(n, np.inf)
    heap_d = np.empty(far_end.shape[0] + sources.shape[0])
    heap_n = np.empty(far_end.shape[0] + sources.shape[0], np.int64)
    size = 0
    for source in np.sort(sources):  # equal keys: already a heap in node order
        if dist[source] != 0.0:
            dist[source] = 0.0
            heap_d[size], heap_n[size] = 0.0, source
            size += 1
    while size:
        d, node = heap_d[0], heap_n[0]
        size -= 1
        last_d, last_n = heap_d[size], heap_n[size]
        i = 0
        while 2 * i + 1 < size:
            c = 2 * i + 1
            if c + 1 < size and (
                heap_d[c + 1] < heap_d[c]
                or (heap_d[c + 1] == heap_d[c] and heap_n[c + 1] < heap_n[c])
            ):
                c += 1
            if last_d < heap_d[c] or (last_d == heap_d[c] and last_n <= heap_n[c]):
                break
            heap_d[i], heap_n[i] = heap_d[c], heap_n[c]
            i = c
        heap_d[i], heap_n[i] = last_d, last_n
        if d > dist[node]:
            continue
        for j in range(ptr[node], ptr[node + 1]):
            nxt = far_end[links[j]]
            nd = d + weight[links[j]]
            if nd < dist[nxt]:
                dist[nxt] = nd
                k = size
                size += 1
                while k > 0:
                    parent = (k - 1) >> 1
                    if heap_d[parent] < nd or (heap_d[parent] == nd and heap_n[parent] <= nxt):
                        break
                    heap_d[k], heap_n[k] = heap_d[parent], heap_n[parent]
                    k = parent
                heap_d[k], heap_n[k] = nd, nxt
    return dist
