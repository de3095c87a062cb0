"""Throughput-optimal cut bounds (ForestColl, arXiv 2402.06787), exact, by max-flow.

Ignoring latency, a collective that must move ``D(S)`` bytes out of a node set
``S`` takes at least ``D(S) / B+(S)``, where ``B+(S)`` is the bandwidth of the
links leaving ``S``. Switches and NPUs outside the collective belong to ``S``
or not as the cut pleases: they hold no data. For All-Gather every rank in
``S`` owns ``m`` bytes that every rank outside needs, so ``D(S) = m |S & V|``
and the best such bound is

    T* = m / x*,   x* = min over S (S & V and V - S not empty) of B+(S) / |S & V|,

which ForestColl shows is also achievable (by spanning-tree packing), so no
cut is missing. Reduce-Scatter is the same on the transposed network.

Computing ``x*`` exactly (Dinkelbach on a parametric cut). Add a source ``s``
with an arc ``s -> v`` of capacity ``x`` to every rank ``v``. A cut between
``{s} + S`` and the rest costs ``B+(S) + x (N - |S & V|)``, so

    min over sinks c of maxflow(s, c) - N x = min over S of B+(S) - x |S & V|,

which is negative exactly when some cut has a ratio below ``x``, and then its
minimising ``S`` has a smaller ratio: jump to it and repeat. Starting from a
real cut's ratio (every rank but one: the ``ingress`` cut), every ``x`` is
itself a valid bound, and the first ``x`` with no negative cut is ``x*``.

What makes it fast, each step exact:

* Instead of ``N`` independent flows, the ranks are taken in an order
  ``c1 .. cN``: the best ``S`` leaves out some first ``ci`` and so contains
  ``c1 .. c(i-1)``, which may therefore join the source for the flow to ``ci``
  (as in Hao and Orlin's global min cut). Lowering ``x`` only raises
  ``B+(S) - x |S & V|``, so phases already passed stay passed: one sweep,
  re-running a phase after each jump.
* A phase only has to *decide* whether the flow reaches ``N x``: it stops
  there. The order is breadth-first, so the merged ranks surround ``ci`` and
  a phase usually explores a few links around it.
* A phase keeps the previous phases' flow (still feasible: their sinks are
  sources now) and pushes only what is missing.
* ``s`` is no node: a rank with some of its ``x`` unused is a small source.
* Links ``u -> v`` and ``v -> u`` share one pair of arcs, so one augmenting
  path can cancel flow one way and use capacity the other (a ring needs one
  path per phase instead of one per rank).

Everything is integer: bandwidths become exact integers (``bandwidth *
2**k``, the floats' common denominator), ``x = p / q`` with arcs of capacity
``q * b`` and supplies ``p``, so there is no rounding at all unless the
integers would overflow; then ``k`` is lowered and bandwidths are rounded
*up*, which can only lower the bound (it stays valid, see
:func:`_scaled_bandwidths`).
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.gossip_bound import gossip_bound_us
from tacos.topology import GIB, Direction, Topology

_MAX_FLOW_VALUE = 2**60
"""Largest flow the int64 arithmetic may meet (``2 N sum(b)`` must stay below it)."""
MAX_WORK = 400_000_000
"""Arc scans one sweep may spend before it settles for the best cut found so far.

The bound is then still valid (it is that cut's), only perhaps not the optimum:
see :attr:`Rate.exact`. Measured sweeps need far less (mesh2d:200x200, 40,000
ranks: 9 million; ring:8192, a worst case: 140 million, about a second);
this only caps pathological inputs.
"""
_CACHE_SIZE = 16
"""Entries kept: results and flow networks (a few MB at 40,000 NPUs), oldest out first."""


@dataclass(frozen=True)
class Rate:
    """A cut quantity in GB/s as an exact fraction, and whether it is the proven optimum.

    ``exact`` is False when bandwidths had to be rounded up to fit 64-bit flows
    or the work cap stopped the sweep early; the value is then the ratio (or
    capacity) of a real cut of a network at least as fast, so bounds made from
    it remain valid lower bounds.
    """

    GBps: Fraction
    exact: bool


def throughput_bound_us(topology: Topology, collective: Collective) -> float:
    """The throughput-optimal (bandwidth-only) lower bound for ``collective``, in us.

    * All-Gather: ``m / x*`` (module docs) with ``m = chunks_per_rank * chunk_bytes``;
      Reduce-Scatter: the same on links entering ``S``.
    * All-Reduce: every chunk's result depends on every rank, so each chunk
      crosses every cut with ranks on both sides at least once each way: the
      whole buffer over the smallest such cut, ``M / min_S B+(S)``; and, when
      every NPU is a rank, at least the ports' share of ``2 (N - 1)`` messages
      per chunk among ``N`` NPUs or servers (:mod:`tacos.gossip_bound`). (Both are valid
      for any schedule; :func:`rs_plus_ag_us` is often larger but holds only for
      schedules that finish reducing before they gather, see there.)
    * Broadcast: the root's buffer over the smallest cut from the root to a rank
      (Edmonds: also achievable); Reduce: the same with links reversed.
    * Gather: ``m |S & V| / B+(S)`` over sets ``S`` without the root, i.e. one
      phase of the All-Gather sweep with the root as the only sink; Scatter:
      reversed.
    * All-to-All: 0.0 (its cut demand ``m |S & V| |V - S|`` is not of this
      linear form; the per-node cuts are already the ``ingress`` bound).

    Raises :class:`TacosError` when a rank is not an NPU or cannot reach another.
    """
    kind = collective.kind
    if kind is CollectiveKind.ALL_TO_ALL:
        return 0.0
    _check_ranks(topology, collective.ranks)
    per_rank = collective.chunks_per_rank * collective.chunk_bytes
    ranks, root = collective.ranks, collective.root
    if kind is CollectiveKind.ALL_GATHER:
        return _time_us(per_rank, share_rate(topology, ranks, "out"))
    if kind is CollectiveKind.REDUCE_SCATTER:
        return _time_us(per_rank, share_rate(topology, ranks, "in"))
    whole = collective.num_chunks * collective.chunk_bytes
    if kind is CollectiveKind.ALL_REDUCE:
        cut_us = _time_us(whole, min_cut(topology, ranks, None, "out"))
        return max(cut_us, gossip_bound_us(topology, collective))
    assert root is not None
    if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        direction: Direction = "out" if kind is CollectiveKind.BROADCAST else "in"
        return _time_us(whole, min_cut(topology, ranks, root, direction))
    direction = "out" if kind is CollectiveKind.GATHER else "in"
    return _time_us(per_rank, share_rate(topology, ranks, direction, sink=root))


def rs_plus_ag_us(topology: Topology, collective: Collective) -> float:
    """All-Reduce as Reduce-Scatter then All-Gather: the sum of the two optima, in us.

    This is ForestColl's All-Reduce optimum, and a lower bound for schedules whose
    gathering starts after all reducing ends. It is *not* a bound for every
    All-Reduce: a schedule may start gathering a chunk while others are still
    being reduced, and the two halves' bottlenecks can lie on different links
    (e.g. ranks 1 and 2 joined by a fast link, rank 0 hanging off rank 1 by a
    slow link of bandwidth ``b`` each way: RS + AG gives ``4 m / b`` for ``m``
    bytes per rank, while rank 0 streaming its buffer to rank 1 and getting the
    sums back pipelined takes about ``3 m / b``). tacos's own All-Reduce starts
    gathering each chunk once it is reduced and does beat it there
    (tests/test_throughput_bound.py), so :attr:`LowerBounds.best_us` leaves it out.
    """
    if collective.kind is not CollectiveKind.ALL_REDUCE:
        raise TacosError(f"rs_plus_ag_us is for all-reduce, not {collective.kind}")
    _check_ranks(topology, collective.ranks)
    per_rank = collective.chunks_per_rank * collective.chunk_bytes
    ranks = collective.ranks
    return _time_us(per_rank, share_rate(topology, ranks, "in")) + _time_us(
        per_rank, share_rate(topology, ranks, "out")
    )


def _time_us(nbytes: int, rate: Rate) -> float:
    """``nbytes`` at ``rate`` GB/s (1 GB = 2**30 bytes), as Link.transfer_time_us counts."""
    return float(nbytes * 1_000_000 / (rate.GBps * GIB))


def _check_ranks(topology: Topology, ranks: tuple[int, ...]) -> None:
    """Every rank an NPU, every rank reaching every other (once per topology and ranks)."""
    if _cache_get(topology, ("connected", ranks)) is not None:
        return
    topology.check_ranks(ranks)
    _cache_put(topology, ("connected", ranks), True)


# ------------------------------------------------------------------ the two problems
def share_rate(
    topology: Topology, ranks: tuple[int, ...], direction: Direction, *, sink: int | None = None
) -> Rate:
    """``x* = min B(S) / |S & ranks|`` over sets ``S`` with ranks on both sides, in GB/s.

    ``B`` counts links leaving ``S`` (``direction="out"``) or entering it
    (``"in"``). With ``sink``, only sets without ``sink`` count (Gather, Scatter).
    Cached per topology object, ranks, direction and sink.
    """
    key = ("share", direction, ranks, sink)
    cached = _cache_get(topology, key)
    if isinstance(cached, Rate):
        return cached
    net = _network(topology, ranks, direction)
    n = len(ranks)
    if sink is None:
        order = net.order
        p = int(net.in_bandwidth[order].min())  # every rank but one: the ingress cut
    else:
        order = np.asarray([sink], np.int64)
        p = int(net.in_bandwidth[sink])
    q = n - 1
    first_phase = 0
    p, q, complete = _sweep(
        net.first, net.head, net.mate, net.base, net.is_rank, order, first_phase,
        p, q, True, MAX_WORK,
    )  # fmt: skip
    if p == 0:  # a cut without bandwidth: _check_ranks lets none through
        raise TacosError(f"topology {topology.name!r}: some rank cannot reach another")
    rate = Rate(Fraction(p, q) / 2**net.scale_exponent, complete and net.exact)
    _cache_put(topology, key, rate)
    return rate


def min_cut(
    topology: Topology, ranks: tuple[int, ...], root: int | None, direction: Direction
) -> Rate:
    """The least bandwidth of a cut with ranks on both sides, in GB/s.

    With ``root``: cuts ``S`` containing the root (links leaving ``S`` for
    ``"out"``, entering for ``"in"``): the root-to-every-rank min cut. Without:
    every cut, both ways (``S`` with ``ranks[0]`` on the ``"out"`` network, or
    without it, which is ``ranks[0]``'s side on the reversed network).
    """
    key = ("cut", direction, ranks, root)
    cached = _cache_get(topology, key)
    if isinstance(cached, Rate):
        return cached
    if root is None:
        forward = min_cut(topology, ranks, ranks[0], "out")
        backward = min_cut(topology, ranks, ranks[0], "in")
        rate = Rate(min(forward.GBps, backward.GBps), forward.exact and backward.exact)
    else:
        net = _network(topology, ranks, direction)
        order = np.asarray([root, *(int(r) for r in net.order if r != root)], np.int64)
        best = int(net.in_bandwidth[order[1:]].min())  # all but one rank: the ingress cut
        best, _, complete = _sweep(
            net.first, net.head, net.mate, net.base, net.is_rank, order, 1,
            best, 1, False, MAX_WORK,
        )  # fmt: skip
        if best == 0:  # a cut without bandwidth: _check_ranks lets none through
            raise TacosError(f"topology {topology.name!r}: some rank cannot reach another")
        rate = Rate(Fraction(best, 2**net.scale_exponent), complete and net.exact)
    _cache_put(topology, key, rate)
    return rate


# ----------------------------------------------------------------------- caching
_cache: dict[tuple[object, ...], tuple[weakref.ref[Topology], object]] = {}


def _cache_get(topology: Topology, key: tuple[object, ...]) -> object:
    """What was computed for this very topology object, or None.

    The benchmarks ask for AG, RS and AR on one topology in a row, and All-Reduce
    needs both directions' networks twice; the key holds ``id(topology)`` and the
    entry a weak reference, so a new topology that reuses a dead one's id misses.
    """
    entry = _cache.get((id(topology), *key))
    if entry is not None and entry[0]() is topology:
        return entry[1]
    return None


def _cache_put(topology: Topology, key: tuple[object, ...], value: object) -> None:
    while len(_cache) >= _CACHE_SIZE:
        del _cache[next(iter(_cache))]
    _cache[(id(topology), *key)] = (weakref.ref(topology), value)


# ----------------------------------------------------------------- flow network
@dataclass(frozen=True)
class _Network:
    """The topology as a residual flow network.

    Arcs are grouped by tail (``first[v] .. first[v+1]``); ``mate[a]`` is the
    arc the other way between the same two nodes. ``base[a]`` is the scaled
    bandwidth of the links along ``a`` (0 if none) and ``q * base[a]`` its
    capacity; pushing flow along ``a`` frees as much on ``mate[a]``.
    """

    first: np.ndarray
    head: np.ndarray
    mate: np.ndarray
    base: np.ndarray
    is_rank: np.ndarray
    order: np.ndarray  # the ranks, breadth-first from ranks[0]
    in_bandwidth: np.ndarray  # per node, the scaled bandwidth into it
    scale_exponent: int  # base = ceil(bandwidth * 2**scale_exponent)
    exact: bool  # base = bandwidth * 2**scale_exponent exactly


def _network(topology: Topology, ranks: tuple[int, ...], direction: Direction) -> _Network:
    key = ("network", direction, ranks)
    cached = _cache_get(topology, key)
    if isinstance(cached, _Network):
        return cached
    net = _build_network(topology, ranks, direction)
    _cache_put(topology, key, net)
    return net


def _build_network(topology: Topology, ranks: tuple[int, ...], direction: Direction) -> _Network:
    n = topology.num_nodes
    links = topology.links
    src = np.fromiter((lk.src for lk in links), np.int64, len(links))
    dst = np.fromiter((lk.dst for lk in links), np.int64, len(links))
    if direction == "in":
        src, dst = dst, src
    bandwidth = np.fromiter((lk.bandwidth_GBps for lk in links), np.float64, len(links))
    scaled, exponent, exact = _scaled_bandwidths(bandwidth, len(ranks))
    # One pair of mate arcs per pair of nodes: arc u -> v (u < v) starts with the
    # bandwidth of every link u -> v, its mate with that of every link v -> u. So
    # parallel links act as one, and one path can both cancel flow one way and
    # use the other: a net flow is all any cut sees.
    low, high = np.minimum(src, dst), np.maximum(src, dst)
    pair, where = np.unique(low * n + high, return_inverse=True)
    up = np.zeros(len(pair), np.int64)
    down = np.zeros(len(pair), np.int64)
    np.add.at(up, where[src < dst], scaled[src < dst])
    np.add.at(down, where[src > dst], scaled[src > dst])
    u, v = pair // n, pair % n
    m = len(pair)
    tails = np.concatenate([u, v])
    mates = np.concatenate([np.arange(m, 2 * m), np.arange(m)])
    by_tail = np.argsort(tails, kind="stable")
    position = np.empty_like(by_tail)
    position[by_tail] = np.arange(2 * m)
    first = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(tails, minlength=n), out=first[1:])
    is_rank = np.zeros(n, np.bool_)
    is_rank[list(ranks)] = True
    in_bandwidth = np.zeros(n, np.int64)
    np.add.at(in_bandwidth, dst, scaled)
    return _Network(
        first=first,
        head=np.concatenate([v, u])[by_tail],
        mate=position[mates[by_tail]],
        base=np.concatenate([up, down])[by_tail],
        is_rank=is_rank,
        order=_breadth_first_ranks(topology, ranks),
        in_bandwidth=in_bandwidth,
        scale_exponent=exponent,
        exact=exact,
    )


def _scaled_bandwidths(bandwidth: np.ndarray, num_ranks: int) -> tuple[np.ndarray, int, bool]:
    """Integers ``ceil(bandwidth * 2**k)``, exact (every float is a dyadic fraction) when
    they fit: flows stay below ``2 N sum(b)``, which must stay below 2**60 for int64.

    Otherwise ``k`` is lowered until they fit and the ceiling rounds bandwidths
    *up*: every cut gets at least as fast, so ``x*`` can only grow and the time
    bound only shrink; it stays a valid lower bound, just not exact.
    """
    values, counts = np.unique(bandwidth, return_counts=True)
    fractions = [Fraction(float(value)) for value in values]

    def scaled(exponent: int) -> list[int] | None:
        ints = [math.ceil(f * Fraction(2) ** exponent) for f in fractions]
        flows = 2 * num_ranks * sum(b * int(c) for b, c in zip(ints, counts, strict=True))
        return ints if flows < _MAX_FLOW_VALUE else None

    exponent = max(f.denominator.bit_length() - 1 for f in fractions)
    ints = scaled(exponent)
    exact = ints is not None
    if ints is None:
        demand = 2 * num_ranks * sum(f * int(c) for f, c in zip(fractions, counts, strict=True))
        magnitude = demand.numerator.bit_length() - demand.denominator.bit_length()
        exponent = min(exponent, _MAX_FLOW_VALUE.bit_length() - 3 - magnitude)
        while ints is None:
            exponent -= 1
            ints = scaled(exponent)
    lookup = np.searchsorted(values, bandwidth)
    return np.asarray(ints, np.int64)[lookup], exponent, exact


def _breadth_first_ranks(topology: Topology, ranks: tuple[int, ...]) -> np.ndarray:
    """The ranks in breadth-first order from ``ranks[0]``, links taken both ways.

    Any order gives the same exact answer; this one keeps each next rank beside
    the ranks already merged into the source, so its flow phase stays local.
    """
    wanted = set(ranks)
    seen = bytearray(topology.num_nodes)
    seen[ranks[0]] = 1
    queue = deque([ranks[0]])
    order = []
    out_links, in_links, links = topology.out_links, topology.in_links, topology.links
    while queue:
        node = queue.popleft()
        if node in wanted:
            order.append(node)
        for link_id in out_links[node]:
            nxt = links[link_id].dst
            if not seen[nxt]:
                seen[nxt] = 1
                queue.append(nxt)
        for link_id in in_links[node]:
            nxt = links[link_id].src
            if not seen[nxt]:
                seen[nxt] = 1
                queue.append(nxt)
    return np.asarray(order, np.int64)


# ------------------------------------------------------------------ compiled core
@njit(cache=True)
def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


@njit(cache=True)
def _sweep(  # type: ignore[no-untyped-def]
    first, head, mate, base, is_rank, order, first_phase, p, q, ratio, max_work
):
    """One pass over the ranks ``order[first_phase:]`` as sinks (module docs).

    ``ratio``: Dinkelbach on ``x = p / q``, every rank supplying ``p`` (the arc
    from ``s``: a rank with supply left is a source of that much, so ``s`` needs
    no node of its own); returns the optimal ``(p, q)``. Otherwise a plain min
    cut with ``order[:first_phase]`` as the first sources: ``p`` is the best cut
    so far (it must start as a real cut), returned as the minimum. The third
    value is False when ``max_work`` arc scans ran out; ``p`` and ``q`` then
    describe the best real cut found.

    A phase keeps the flow of the ones before: its sink becomes a source, so
    the flow stays feasible (with value 0 into the next sink) and only the
    difference has to be pushed. Only a new ``x`` starts over from zero flow.
    """
    num_nodes = first.shape[0] - 1
    num_ranks = 0
    for v in range(num_nodes):
        if is_rank[v]:
            num_ranks += 1
    cap = q * base
    supply = np.zeros(num_nodes, np.int64)
    if ratio:
        for v in range(num_nodes):
            if is_rank[v]:
                supply[v] = p
    level = np.full(num_nodes, -1, np.int64)
    current = np.zeros(num_nodes, np.int64)
    queue = np.empty(num_nodes, np.int64)
    sources = np.empty(num_nodes, np.int64)
    stack = np.empty(num_nodes + 1, np.int64)
    path = np.empty(num_nodes + 1, np.int64)
    in_sink_side = np.zeros(num_nodes, np.bool_)
    is_source = np.zeros(num_nodes, np.bool_)
    for i in range(first_phase):
        is_source[order[i]] = True
    work = 0
    for i in range(first_phase, order.shape[0]):
        sink = order[i]
        while True:
            threshold = num_ranks * p if ratio else p
            flow = supply[sink]  # the sink's own share reaches it at once
            supply[sink] = 0
            # Dinic-like rounds: levels are residual distances *to* the sink, from a
            # backward search that stops once the sources it met could cover what is
            # missing (a merged rank, or enough supply), at the end of that level.
            while flow < threshold:
                level[sink] = 0
                current[sink] = first[sink]
                queue[0] = sink
                tail, size, stop_level, num_sources, potential = 0, 1, -1, 0, 0
                while tail < size:
                    v = queue[tail]
                    tail += 1
                    if stop_level >= 0 and level[v] >= stop_level:
                        break
                    if is_source[v]:
                        continue  # a path on through a merged rank could start there
                    for a in range(first[v], first[v + 1]):
                        work += 1
                        u = head[a]
                        if level[u] < 0 and cap[mate[a]] > 0:
                            level[u] = level[v] + 1
                            current[u] = first[u]
                            queue[size] = u
                            size += 1
                            if is_source[u] or supply[u] > 0:
                                sources[num_sources] = u
                                num_sources += 1
                                potential = min(threshold, potential + supply[u])
                                if is_source[u]:
                                    potential = threshold
                                if stop_level < 0 and potential >= threshold - flow:
                                    stop_level = level[u]
                for k in range(num_sources):
                    source = sources[k]
                    while flow < threshold and (is_source[source] or supply[source] > 0):
                        # One augmenting path along falling levels, current-arc style.
                        depth = 0
                        stack[0] = source
                        v = source
                        pushed = 0
                        while True:
                            if v == sink:
                                pushed = threshold - flow
                                if not is_source[source]:
                                    pushed = min(pushed, supply[source])
                                for j in range(depth):
                                    pushed = min(pushed, cap[path[j]])
                                for j in range(depth):
                                    cap[path[j]] -= pushed
                                    cap[mate[path[j]]] += pushed
                                if not is_source[source]:
                                    supply[source] -= pushed
                                break
                            advanced = False
                            while current[v] < first[v + 1]:
                                a = current[v]
                                work += 1
                                w = head[a]
                                if cap[a] > 0 and level[w] == level[v] - 1:
                                    path[depth] = a
                                    depth += 1
                                    stack[depth] = w
                                    v = w
                                    advanced = True
                                    break
                                current[v] += 1
                            if not advanced:
                                if depth == 0:
                                    break
                                level[v] = -2  # a dead end for the rest of this round
                                depth -= 1
                                v = stack[depth]
                                current[v] += 1
                        if pushed == 0:
                            break
                        flow += pushed
                for j in range(size):
                    level[queue[j]] = -1
                if num_sources == 0:
                    break
            if flow >= threshold:
                break
            # The flow is maximum and below the threshold: the sink side of a
            # minimum cut is what still reaches the sink in the residual network.
            in_sink_side[sink] = True
            queue[0] = sink
            tail, size = 0, 1
            while tail < size:
                v = queue[tail]
                tail += 1
                for a in range(first[v], first[v + 1]):
                    work += 1
                    u = head[a]
                    if not in_sink_side[u] and cap[mate[a]] > 0:
                        in_sink_side[u] = True
                        queue[size] = u
                        size += 1
            if ratio:
                crossing = 0
                outside_ranks = 0
                for j in range(size):
                    v = queue[j]
                    if is_rank[v]:
                        outside_ranks += 1
                    for a in range(first[v], first[v + 1]):
                        if not in_sink_side[head[a]]:
                            crossing += base[mate[a]]  # the links from head[a] to v
                inside = num_ranks - outside_ranks
                g = _gcd(crossing, inside)
                p, q = crossing // g, inside // g
            else:
                p = flow
            for j in range(size):
                in_sink_side[queue[j]] = False
            if not ratio or p == 0:
                break
            # A new x changes every capacity: this phase starts over from no flow.
            cap = q * base
            for v in range(num_nodes):
                if is_rank[v]:
                    supply[v] = p
            if work > max_work:
                return p, q, False
        if p == 0:
            return p, q, True
        is_source[sink] = True
        if work > max_work:
            return p, q, False
    return p, q, True
