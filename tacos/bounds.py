"""Lower bounds on the collective time, for judging a schedule's quality.

Every bound holds for any schedule under the link model of
:class:`tacos.topology.Link` (a link moves one chunk at a time, each taking
``latency + chunk_bytes / bandwidth``):

* ``ingress``: bytes a rank must receive (send, for Reduce-Scatter) over the
  sum of its link bandwidths; ignores latency and chunking.
* ``chunk_ingress``: the chunk-granular version: a rank whose in-links take
  ``t_i`` per chunk receives at most ``sum_i floor(T / t_i)`` chunks by time
  ``T``; the smallest ``T`` that covers what it must receive, maximised over
  ranks. For All-Reduce each rank must both receive and send a message for
  every chunk (``num_chunks`` each way).
* ``link_capacity``: the same counting over *all* links for the total number of
  messages: All-Gather and Reduce-Scatter need ``num_chunks * (ranks - 1)``;
  All-Reduce needs ``2 * (ranks - 1)`` per chunk (one-way gossip needs
  ``2n - 2`` messages for ``n`` parties to learn everything).
* ``diameter``: the slowest chunk must cross the farthest pair of ranks, hop
  by hop (distances in per-chunk link times).

``best`` is the largest, the number ratios are quoted against.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tacos.collective import Collective, CollectiveKind
from tacos.topology import GIB, Topology

_MAX_DIJKSTRA_WORK = 4_000_000
_SAMPLED_SOURCES = 64


@dataclass(frozen=True)
class LowerBounds:
    """Lower bounds in microseconds; ``best`` is the tightest."""

    ingress_us: float
    chunk_ingress_us: float
    link_capacity_us: float
    diameter_us: float

    @property
    def best_us(self) -> float:
        return max(self.ingress_us, self.chunk_ingress_us, self.link_capacity_us, self.diameter_us)

    def as_dict(self) -> dict[str, float]:
        return {
            "ingress_us": self.ingress_us,
            "chunk_ingress_us": self.chunk_ingress_us,
            "link_capacity_us": self.link_capacity_us,
            "diameter_us": self.diameter_us,
            "best_us": self.best_us,
        }


def lower_bounds(topology: Topology, collective: Collective) -> LowerBounds:
    """All bounds for ``collective`` on ``topology``.

    >>> from tacos.topology import Topology
    >>> topo = Topology.ring(4)
    >>> spec = Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3), 1, 2**20)
    >>> lower_bounds(topo, spec).best_us  # 3 chunks over 2 in-links: 2 chunk times
    40.0625
    """
    kind = collective.kind
    ranks, chunks = collective.num_ranks, collective.num_chunks
    per_chunk = topology.link_times_us(collective.chunk_bytes)
    if kind is CollectiveKind.ALL_GATHER:
        directions = [("in", chunks - collective.chunks_per_rank)]
        messages = chunks * (ranks - 1)
    elif kind is CollectiveKind.REDUCE_SCATTER:
        directions = [("out", chunks - collective.chunks_per_rank)]
        messages = chunks * (ranks - 1)
    else:
        directions = [("in", chunks), ("out", chunks)]
        messages = 2 * chunks * (ranks - 1)

    ingress = chunk_ingress = 0.0
    for direction, must_move in directions:
        incidence = topology.in_links if direction == "in" else topology.out_links
        for rank in collective.ranks:
            link_ids = incidence[rank]
            bandwidth = sum(topology.links[i].bandwidth_GBps for i in link_ids) * GIB
            ingress = max(ingress, must_move * collective.chunk_bytes / bandwidth * 1e6)
            times = [per_chunk[i] for i in link_ids]
            chunk_ingress = max(chunk_ingress, min_time_to_move(times, must_move))

    capacity = min_time_to_move(per_chunk, messages)
    diameter = _diameter(topology, collective.ranks, per_chunk)
    return LowerBounds(ingress, chunk_ingress, capacity, diameter)


def min_time_to_move(times: Sequence[float], count: int) -> float:
    """Smallest ``T`` with ``sum(floor(T / t) for t in times) >= count``.

    >>> min_time_to_move([2.0, 3.0], 4)  # by 6: 3 chunks on the first link, 2 on the second
    6.0
    """
    if count <= 0:
        return 0.0
    distinct: dict[float, int] = {}
    for t in times:
        distinct[t] = distinct.get(t, 0) + 1

    def moved(horizon: float) -> int:
        return sum(n * math.floor(horizon / t * (1 + 1e-12)) for t, n in distinct.items())

    low, high = 0.0, min(distinct) * count
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if moved(middle) >= count:
            high = middle
        else:
            low = middle
    # The answer is a multiple of some t; the largest multiple not above `high`.
    return max(math.floor(high / t * (1 + 1e-12)) * t for t in distinct)


def _diameter(topology: Topology, ranks: Sequence[int], per_chunk: Sequence[float]) -> float:
    """Largest rank-to-rank distance; from a sample of sources on big topologies.

    Any subset of sources still gives a valid (possibly weaker) bound.
    """
    sources: Sequence[int] = ranks
    if len(ranks) * max(1, len(topology.links)) > _MAX_DIJKSTRA_WORK:
        step = max(1, len(ranks) // _SAMPLED_SOURCES)
        sources = [*ranks[::step], ranks[-1]]
    rank_set = set(ranks)
    farthest = 0.0
    for source in sources:
        dist = _dijkstra(topology, source, per_chunk)
        farthest = max(farthest, max(d for node, d in dist.items() if node in rank_set))
    return farthest


def _dijkstra(topology: Topology, source: int, weight: Sequence[float]) -> dict[int, float]:
    dist = {source: 0.0}
    heap = [(0.0, source)]
    while heap:
        d, node = heapq.heappop(heap)
        if d > dist[node]:
            continue
        for link_id in topology.out_links[node]:
            nxt = topology.links[link_id].dst
            nd = d + weight[link_id]
            if nd < dist.get(nxt, math.inf):
                dist[nxt] = nd
                heapq.heappush(heap, (nd, nxt))
    return dist
