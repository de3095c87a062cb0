"""Lower bounds on the collective time, for judging a schedule's quality.

Every bound holds for any schedule under the topology's cost model
(:mod:`tacos.linkmodel`: a link moves one chunk at a time, each taking
``latency + chunk_bytes / bandwidth``; a pipelined link is busy for the
``chunk_bytes / bandwidth`` of each chunk only, so the chunk-counting bounds
count those):

* ``ingress``: chunks a node must receive (or send) over the sum of its link
  bandwidths; ignores latency and chunking.
* ``chunk_ingress``: the chunk-granular version: a node whose in-links take
  ``t_i`` per chunk receives at most ``sum_i floor(T / t_i)`` chunks by time
  ``T``; the smallest ``T`` that covers what it must receive (likewise for
  what it must send), maximised over nodes. For All-Reduce every rank must
  both receive and send a message for every chunk.
* ``link_capacity``: the same counting over *all* links for the total number of
  link transfers: one per (node, chunk) delivery; for All-to-All, as many as
  the hops between source and destination; for reductions ``k - 1`` per chunk
  with ``k`` contributors, and ``2(k - 1)`` for All-Reduce (one-way gossip
  needs ``2n - 2`` messages for ``n`` parties to learn everything).
* ``diameter``: the slowest chunk must cross the farthest source-destination
  pair, hop by hop (distances in per-chunk link times).
* ``throughput``: the throughput-optimal cut bound of ForestColl (arXiv
  2402.06787): over every node set ``S`` (switches included), what must leave
  ``S`` over the bandwidth leaving it, computed exactly by max-flow in
  :mod:`tacos.throughput` (which says what it is for each kind). It ignores
  latency and chunking but sees every bottleneck cut, not only single nodes.
  For All-Reduce ``rs_plus_ag`` is also reported: ForestColl's optimum for
  Reduce-Scatter then All-Gather. It bounds only schedules that finish
  reducing before gathering, so it is not part of ``best``.
* ``latency_cut``: cuts counted chunk by chunk, each chunk no sooner at a
  cut's link than it can travel there (:mod:`tacos.latency_cuts`): with few
  chunks per NPU, a cluster's NICs cannot start before the first chunks
  reach them, and move whole chunks one at a time. For All-Reduce every chunk
  entering a cut carries the data of the rank farthest from it (a mesh corner
  takes in no result before the opposite corner's data has crossed the mesh),
  and the gossip messages between servers (:mod:`tacos.gossip_bound`) are
  counted that way too, the last of them still to be told inside its server.
* ``combining``: All-Reduce only. The same links into a set, each message
  carrying no more far ranks' data than its sender can have combined when it
  left (:mod:`tacos.combining_bound`): early messages bring one far rank's
  data, only later ones the sum of many.

The counts come from the collective's own pre- and postcondition
(:meth:`tacos.collective.Collective.initial_data` and ``final_data``).

``best`` is the largest, the number ratios are quoted against.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.combining_bound import combining_bound_us
from tacos.latency_cuts import bisect_horizon, latency_cut_bound_us
from tacos.shortest_paths import LinkTimes
from tacos.throughput import rs_plus_ag_us, throughput_bound_us
from tacos.topology import GIB, Topology

_MAX_DIJKSTRA_WORK = 4_000_000
_SAMPLED_SOURCES = 64


@dataclass(frozen=True)
class LowerBounds:
    """Lower bounds in microseconds; ``best`` is the tightest.

    ``rs_plus_ag_us`` is set for All-Reduce only and is not a bound for every
    schedule (see the module docs), so ``best`` leaves it out.
    """

    ingress_us: float
    chunk_ingress_us: float
    link_capacity_us: float
    diameter_us: float
    throughput_us: float = 0.0
    latency_cut_us: float = 0.0
    combining_us: float = 0.0
    rs_plus_ag_us: float | None = None

    @property
    def best_us(self) -> float:
        return max(
            self.ingress_us,
            self.chunk_ingress_us,
            self.link_capacity_us,
            self.diameter_us,
            self.throughput_us,
            self.latency_cut_us,
            self.combining_us,
        )

    def as_dict(self) -> dict[str, float]:
        data = {
            "ingress_us": self.ingress_us,
            "chunk_ingress_us": self.chunk_ingress_us,
            "link_capacity_us": self.link_capacity_us,
            "diameter_us": self.diameter_us,
            "throughput_us": self.throughput_us,
            "latency_cut_us": self.latency_cut_us,
            "combining_us": self.combining_us,
        }
        if self.rs_plus_ag_us is not None:
            data["rs_plus_ag_us"] = self.rs_plus_ag_us
        data["best_us"] = self.best_us
        return data


def lower_bounds(topology: Topology, collective: Collective) -> LowerBounds:
    """All bounds for ``collective`` on ``topology``.

    Raises :class:`~tacos.errors.TacosError` when a rank is not an NPU of the
    topology or cannot reach another rank (the throughput bound needs both).

    >>> from tacos.topology import Topology
    >>> topo = Topology.ring(4)
    >>> spec = Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3), 1, 2**20)
    >>> lower_bounds(topo, spec).best_us  # 3 chunks over 2 in-links: 2 chunk times
    40.0625
    """
    throughput = throughput_bound_us(topology, collective)  # first: it checks the ranks
    two_phase = None
    if collective.kind is CollectiveKind.ALL_REDUCE:
        two_phase = rs_plus_ag_us(topology, collective)
    demand = _demand_closed_form(collective) or _demand(topology, collective)
    per_chunk = topology.link_busy_times_us(collective.chunk_bytes)
    ingress = chunk_ingress = 0.0
    # Nodes with the same link times and count have the same bound: big regular
    # topologies (meshes, tori) have a handful of distinct cases among 10^4 nodes.
    node_bounds: dict[tuple[tuple[float, ...], tuple[float, ...], int], tuple[float, float]] = {}
    for counts, incidence in (
        (demand.receive, topology.in_links),
        (demand.send, topology.out_links),
    ):
        for node, count in counts.items():
            link_ids = incidence[node]
            times = tuple(per_chunk[i] for i in link_ids)
            bandwidths = tuple(topology.links[i].bandwidth_GBps for i in link_ids)
            key = (times, bandwidths, count)
            if key not in node_bounds:
                bandwidth = sum(bandwidths) * GIB
                node_bounds[key] = (
                    count * collective.chunk_bytes / bandwidth * 1e6,
                    min_time_to_move(times, count),
                )
            ingress = max(ingress, node_bounds[key][0])
            chunk_ingress = max(chunk_ingress, node_bounds[key][1])
    capacity = min_time_to_move(per_chunk, demand.messages)
    if demand.unrouted_messages:
        transfers = demand.unrouted_messages * _fewest_hops_between_npus(topology)
        capacity = max(capacity, min_time_to_move(per_chunk, demand.messages + transfers))
    diameter = _diameter(topology, demand.pairs, topology.link_times_us(collective.chunk_bytes))
    return LowerBounds(
        ingress,
        chunk_ingress,
        capacity,
        diameter,
        throughput,
        latency_cut_bound_us(topology, collective),
        combining_bound_us(topology, collective),
        two_phase,
    )


@dataclass
class _Demand:
    """What any schedule must move: per-node message counts, total messages, far pairs."""

    receive: dict[int, int]
    send: dict[int, int]
    messages: int  # link transfers counted hop by hop
    unrouted_messages: int  # NPU-to-NPU messages, each at least the fewest hops between NPUs
    pairs: Mapping[int, Collection[int]]  # source node -> nodes its data must reach


class _EveryOtherRank(Mapping[int, Collection[int]]):
    """``pairs`` when every rank's data must reach every other rank (built on demand:
    a 40,000-rank All-Gather has 1.6 billion pairs)."""

    def __init__(self, ranks: tuple[int, ...]) -> None:
        self.ranks = np.asarray(ranks, np.int64)

    def __getitem__(self, source: int) -> Collection[int]:
        return self.ranks[self.ranks != source]  # type: ignore[return-value]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranks.tolist())

    def __len__(self) -> int:
        return len(self.ranks)


def _demand_closed_form(spec: Collective) -> _Demand | None:
    """:func:`_demand` without enumerating placements, for every kind but All-to-All.

    Each kind's pre- and postcondition has a simple shape (chunk ``c`` belongs to
    ``ranks[c // chunks_per_rank]``, or to the root), so the counts are sums over
    ranks; the tests check this against :func:`_demand` kind by kind.
    """
    kind, ranks, chunks = spec.kind, spec.ranks, spec.num_chunks
    per_rank, others = spec.chunks_per_rank, spec.num_ranks - 1
    root = spec.root
    every: dict[int, int] = dict.fromkeys(ranks, chunks)
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        foreign, own = dict.fromkeys(ranks, chunks - per_rank), dict.fromkeys(ranks, per_rank)
        receive, send = (foreign, own) if kind is CollectiveKind.ALL_GATHER else (own, foreign)
        return _Demand(receive, send, 0, chunks * others, _EveryOtherRank(ranks))
    if kind is CollectiveKind.ALL_REDUCE:
        return _Demand(every, dict(every), 0, 2 * chunks * others, _EveryOtherRank(ranks))
    if kind is CollectiveKind.ALL_TO_ALL:
        return None
    assert root is not None  # the remaining kinds are rooted
    non_root = [r for r in ranks if r != root]
    if kind is CollectiveKind.BROADCAST:
        everyone_else: dict[int, Collection[int]] = {root: set(non_root)}
        return _Demand(dict.fromkeys(non_root, chunks), {root: chunks}, 0, chunks * others,
                       everyone_else)  # fmt: skip
    to_root: dict[int, Collection[int]] = {r: {root} for r in non_root}
    if kind is CollectiveKind.REDUCE:
        return _Demand({root: chunks}, dict.fromkeys(non_root, chunks), 0, chunks * others, to_root)
    moved = chunks - per_rank
    if kind is CollectiveKind.GATHER:
        return _Demand({root: moved}, dict.fromkeys(non_root, per_rank), 0, moved, to_root)
    everyone_else = {root: set(non_root)}  # Scatter
    return _Demand(dict.fromkeys(non_root, per_rank), {root: moved}, 0, moved, everyone_else)


def _demand(topology: Topology, spec: Collective) -> _Demand:
    """Counting arguments, per chunk, from the collective's pre- and postcondition.

    Spreading: every node that must end with a chunk it lacks receives it at least
    once; a chunk that starts on one node leaves it at least once. Reducing: a
    contributor sends at least one message about the chunk unless it is the only
    target, and a target receives at least one unless it is the only contributor;
    merging k contributions at one target takes k - 1 messages, at all of them
    (All-Reduce, one-way gossip) 2(k - 1).
    """
    holders: dict[int, set[int]] = defaultdict(set)
    for node, chunk, _ in spec.initial_data():
        holders[chunk].add(node)
    targets: dict[int, set[int]] = defaultdict(set)
    for node, chunk, _ in spec.final_data():
        targets[chunk].add(node)
    receive: dict[int, int] = defaultdict(int)
    send: dict[int, int] = defaultdict(int)
    pairs: dict[int, set[int]] = defaultdict(set)
    messages = unrouted = 0
    hops = _hop_counter(topology) if spec.kind is CollectiveKind.ALL_TO_ALL else None
    for chunk, ends in targets.items():
        starts = holders[chunk]
        if spec.kind.reduces:
            for contributor in starts:
                if ends - {contributor}:
                    send[contributor] += 1
                    pairs[contributor] |= ends - {contributor}
            for target in ends:
                if starts - {target}:
                    receive[target] += 1
            merges = len(starts) - 1
            unrouted += 2 * merges if len(ends) > 1 else merges
            continue
        needing = ends - starts
        for target in needing:
            receive[target] += 1
        if len(starts) == 1 and needing:
            (source,) = starts
            send[source] += 1
            pairs[source] |= needing
            if hops is not None and len(needing) == 1:
                messages += hops(source, next(iter(needing)))
                continue
        unrouted += len(needing)
    return _Demand(dict(receive), dict(send), messages, unrouted, dict(pairs))


def _fewest_hops_between_npus(topology: Topology) -> int:
    """1 if some NPU links straight to another NPU, else 2 (through at least one switch)."""
    direct = any(
        not topology.is_switch(link.src) and not topology.is_switch(link.dst)
        for link in topology.links
    )
    return 1 if direct else 2


def _hop_counter(topology: Topology) -> Callable[[int, int], int]:
    """Fewest links from one node to another (breadth-first, cached per source)."""
    cache: dict[int, list[int]] = {}

    def hops(source: int, target: int) -> int:
        if source not in cache:
            dist = [-1] * topology.num_nodes
            dist[source] = 0
            frontier = [source]
            while frontier:
                following = []
                for node in frontier:
                    for link_id in topology.out_links[node]:
                        nxt = topology.links[link_id].dst
                        if dist[nxt] < 0:
                            dist[nxt] = dist[node] + 1
                            following.append(nxt)
                frontier = following
            cache[source] = dist
        return max(1, cache[source][target])

    return hops


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

    high = bisect_horizon(moved, count, min(distinct) * count)
    # The answer is a multiple of some t; the largest multiple not above `high`.
    return max(math.floor(high / t * (1 + 1e-12)) * t for t in distinct)


def _diameter(
    topology: Topology, pairs: Mapping[int, Collection[int]], per_chunk: Sequence[float]
) -> float:
    """Largest source-to-destination distance; from a sample of sources on big topologies.

    Any subset of sources still gives a valid (possibly weaker) bound.
    """
    sources = sorted(pairs)
    if len(sources) * max(1, len(topology.links)) > _MAX_DIJKSTRA_WORK:
        step = max(1, len(sources) // _SAMPLED_SOURCES)
        sources = sorted({*sources[::step], sources[-1]})
    graph = LinkTimes(topology, per_chunk)
    farthest = 0.0
    for source in sources:
        dist = graph.from_nodes((source,))
        targets = np.fromiter(pairs[source], np.int64)
        if len(targets):
            reached = dist[targets]
            farthest = max(farthest, float(np.where(np.isinf(reached), 0.0, reached).max()))
    return farthest
