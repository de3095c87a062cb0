"""A cut bound that counts chunk by chunk and knows how far the chunks come from.

The throughput bound (:mod:`tacos.throughput`) divides the bytes that must cross
a cut by its bandwidth: right for many chunks, far too low for few, because the
first chunk reaches a cut only after crossing the network to it and the cut's
links move whole chunks one at a time. This bound keeps both. For a set ``X``
of nodes (a server, a pod, one rank) and chunks that must enter ``X``:

* a chunk that has to reach a rank in ``X`` crosses some link ``e = u -> v``
  into ``X`` on its way there; that transfer cannot start before the chunk can
  be at ``u``, i.e. ``r_e`` = the shortest time from the nearest rank the chunk
  may start at to ``u``, and from ``v`` the chunk still needs ``t_e`` = the
  shortest time from ``v`` to a rank of ``X``;
* a transfer carries one chunk, so these are ``K`` different transfers, and
  ``e`` starts one every ``b_e`` at most (its busy time per chunk), each
  taking ``d_e`` from start to arrival: the ``k``-th of them on ``e`` has the
  chunk at a rank of ``X`` no sooner than ``r_e + (k - 1) b_e + d_e + t_e``.

So the collective takes at least the smallest ``T`` by which the links into
``X`` can have brought ``K`` chunks that way (:func:`earliest_to_move`).
Chunks that must *leave* ``X`` are the same count on the links out of ``X``.
What ``K`` and the starting ranks are, per collective:

* All-Gather: into ``X``, the chunks of the ranks outside (they start there);
  out of ``X``, the chunks of the ranks inside. A far rank's chunk cannot be
  at a link before that rank's data can, so the chunks of the ranks at least
  some distance away count again from the nearest of them (a few such
  distances). And every chunk must reach every rank of ``X``: a transfer
  into ``X`` lands at one NPU (switches do not replicate), so those landing
  in the last hop-time between two ranks of ``X`` serve one rank each, and
  those a few hop-times before the end only as many as can be told by then
  (:func:`earliest_to_spread`; an MI250-like server's last NIC chunks still
  need one xGMI hop, which TACOS's schedule then meets exactly; a GPU on an
  NVSwitch tells one other per hop-time at most).
* Reduce-Scatter: the All-Gather bound on the transposed topology (a
  Reduce-Scatter run backwards in time over reversed links is an All-Gather,
  with the same links busy for the same times).
* All-Reduce: every chunk's result needs data from both sides of any cut with
  ranks on both sides, so every chunk enters ``X`` and leaves it. Entering, it
  carries the data of every rank outside, in particular of the one farthest
  from ``X``: for each chunk some transfer into ``X`` carries that rank's
  part, so ``r_e`` is the time from that one rank (a mesh corner cannot hold
  any result before the opposite corner's data has crossed the mesh, and
  then takes in a chunk at a time: mesh2d:8x8 with one chunk per NPU, 45
  chunk times where the link capacity gives 36). That rank's part must reach
  every rank of ``X``, so the last transfers in are spread as an All-Gather's
  are (an MI250-like pair of servers: one xGMI hop more, which TACOS's
  All-Reduce then meets exactly at 1, 4 and 16 chunks per GCD). Leaving, it
  starts from the ranks inside.

Which sets: the components of the links at least as fast as each bandwidth of
the topology but the slowest (a server's NVLink domain, a server with its
NICs, a pod), and single ranks; of each kind at most :data:`MAX_SETS`, spread
evenly (any sets give a valid bound, more sets only a tighter one).

All-Reduce over every NPU also counts its messages (:mod:`tacos.gossip_bound`):
among the ``S`` groups of a partition (servers, pods, single NPUs) at least
``2 (S - 1)`` messages per chunk go from one group to another, each entering
its last group for good over some link ``e = u -> v`` from outside it (and
leaving its first group for good over another). The same count, each no sooner
than ``r_e + d_e + t_e`` with ``r_e`` from the nearest NPU and ``t_e`` to the
nearest NPU (any NPU: a little weaker than the far side's, but two searches
serve every group), over all the partition's entering links together (and
leaving ones) bounds the collective (:func:`gossip_latency_bound_us`). On
dgx:16x8 with one chunk per GPU, 30 messages per chunk and NIC enter the 16
servers: 667 us, where a single server's cut sees 1 per chunk.

The last of those messages to land must still be told inside its group. Take
the messages in the order they land, and call one *news* when it brings its
group a part of its chunk that no member had: at least ``2 (S - 1)`` per chunk
are news (the others can be left out of the count and the groups still end up
knowing everything), so the last news lands no sooner than that count allows.
It lands at one NPU (switches do not replicate), and every other member needs
what it brought: either over the group's own links from that NPU, at least the
time one NPU takes to tell all the others (:func:`knowing_us`), or by a
message from outside that is not news, one more than the count. The bound
into the groups is the sooner of the two (dgx:16x8: the seven other GPUs of a
server hear 13.5 us after the last news, where one more message would take
20.5).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.gossip_bound import OUTSIDE, gossips, partitions
from tacos.shortest_paths import LinkTimes, times_from
from tacos.topology import Topology

MAX_SETS = 64
"""At most this many sets per bandwidth level, and this many single ranks."""
_Item = TypeVar("_Item")

MAX_SPREAD_RANKS = 16
"""Sets of at most this many ranks (a server) count the spread inside them."""
MAX_LEVELS = 8
"""All-Gather: at most this many distances from a set to count the farther ranks' chunks at."""


def latency_cut_bound_us(topology: Topology, collective: Collective) -> float:
    """The largest latency-aware cut bound over the chosen node sets, in us (0.0 when it
    does not apply: rooted collectives and All-to-All)."""
    kind = collective.kind
    if kind is CollectiveKind.REDUCE_SCATTER:
        topology = topology.transposed()
    elif kind not in (CollectiveKind.ALL_GATHER, CollectiveKind.ALL_REDUCE):
        return 0.0
    ranks = np.zeros(topology.num_nodes, bool)
    ranks[list(collective.ranks)] = True
    timed = TimedLinks(topology, collective.chunk_bytes)
    src, dst = timed.src, timed.dst

    def entering(inside: np.ndarray) -> float:
        """When the chunks that must enter ``inside`` can have reached its ranks."""
        outside_ranks = ranks & ~inside
        to_inside = timed.backward.from_nodes(np.flatnonzero(ranks & inside))
        into = ~inside[src] & inside[dst]
        candidates = np.flatnonzero(outside_ranks)
        knowing = spread_inside(topology, timed, ranks, inside)
        if kind is CollectiveKind.ALL_REDUCE:
            farthest = int(candidates[np.argmax(to_inside[candidates])])
            ready = timed.forward.from_nodes([farthest])[src[into]]
            first = _first_arrivals(timed, into, ready, to_inside)
            return earliest_to_spread(first, timed.busy[into], collective.num_chunks, knowing)
        # All-Gather: the chunks of the ranks at least some distance away, counted from
        # the nearest of those ranks, for a few such distances (farthest first); each
        # must then reach every rank inside.
        bound = 0.0
        for distance in _spread_levels(to_inside[candidates]):
            far = candidates[to_inside[candidates] >= distance]
            ready = timed.forward.from_nodes(far)[src[into]]
            first = _first_arrivals(timed, into, ready, to_inside)
            count = collective.chunks_per_rank * len(far)
            moved = earliest_to_spread(first, timed.busy[into], count, knowing)
            bound = max(bound, moved)
        return bound

    bound = 0.0
    for inside in cut_sets(topology, ranks):
        if ranks[inside].any() and (ranks & ~inside).any():
            bound = max(bound, entering(inside), entering(~inside))
    if gossips(topology, collective):
        bound = max(bound, _gossip_latency_us(topology, timed, collective.num_chunks))
    return bound


def _first_arrivals(
    timed: TimedLinks, into: np.ndarray, ready: np.ndarray, to_inside: np.ndarray
) -> np.ndarray:
    """Per link ``into`` a set, the soonest a chunk over it can be at a rank of the set,
    the chunk at the link's tail no sooner than ``ready``."""
    return ready + timed.duration[into] + to_inside[timed.dst[into]]


def spread_inside(
    topology: Topology, timed: TimedLinks, ranks: np.ndarray, inside: np.ndarray
) -> np.ndarray:
    """When one, two, ... of a set's ranks can know what one of them knew at 0, over the
    set's own links (:func:`knowing_us`: a path out of the set comes back in as another
    transfer into it, which the bounds count on its own); every rank at 0 when some NPU of
    the set is not a rank, or it has more than :data:`MAX_SPREAD_RANKS`."""
    members = np.flatnonzero(ranks & inside)
    npus = slice(topology.num_npus)
    if len(members) < 2 or len(members) > MAX_SPREAD_RANKS or (inside & ~ranks)[npus].any():
        return np.zeros(len(members))
    links = _Within(timed, np.flatnonzero(inside[timed.src] & inside[timed.dst]))
    return links.knowing_us(set(members.tolist()))


def earliest_to_spread(
    first_us: np.ndarray, step_us: np.ndarray, count: int, knowing_us: np.ndarray
) -> float:
    """Smallest ``T`` by which links moving chunks into a set (as for
    :func:`earliest_to_move`) can have brought ``count`` chunks to all its ranks, when
    ``knowing_us[k - 1]`` after one rank has a chunk at the soonest ``k`` can have it
    (:func:`spread_inside`; as many ranks as entries).

    Switches do not replicate, so a transfer into the set lands at one NPU; one that
    lands at ``a`` can have its chunk at no more than ``k`` ranks by ``T`` if ``T - a``
    is below ``knowing_us[k]``. Each chunk needs all ranks, so ``T`` needs the sum over
    ``k`` of (moved by ``T - knowing_us[k - 1]``) to be at least ranks x ``count``: the
    last chunks in must still be spread (an NIC's chunk into a server of GPUs, one or
    more GPU-to-GPU hops).

    >>> earliest_to_spread(np.array([0.0]), np.array([1.0]), 2, np.array([0.0, 0.5]))
    1.5
    """
    if count <= 0:
        return 0.0
    arrivals = _Arrivals(first_us, step_us)
    if not arrivals.first.size:
        return math.inf
    knowing = np.asarray(knowing_us, np.float64) if len(knowing_us) else np.zeros(1)
    ranks = len(knowing)
    delays, ranks_told = np.unique(knowing[np.isfinite(knowing)], return_counts=True)

    def served(horizon: float) -> int:
        return sum(
            int(told) * arrivals.count_by(horizon - delay)
            for delay, told in zip(delays, ranks_told, strict=True)
        )

    # Enough: every rank served by transfers of its own, or all once the last knows.
    high = float((arrivals.first + (ranks * count - 1) * arrivals.step).max())
    high = bisect_horizon(served, ranks * count, high)
    # The answer is the last arrival by `high - delay` plus that delay, for some delay.
    return float(
        max(
            arrivals.last_by(high - delay) + delay
            for delay in delays
            if arrivals.count_by(high - delay)
        )
    )


def _spread_levels(distances_us: np.ndarray) -> list[float]:
    """At most ``MAX_LEVELS`` of the distinct ``distances_us``, evenly spread, the
    smallest (every rank) and the largest included."""
    return [float(d) for d in _spread(np.unique(distances_us).tolist(), MAX_LEVELS)]


def gossip_latency_bound_us(topology: Topology, collective: Collective) -> float:
    """The All-Reduce's messages between groups, counted on the links into (and out of)
    the groups of each partition with their lead-in times (module docs), in us (0.0 when
    the count does not hold, see :func:`~tacos.gossip_bound.gossips`)."""
    if not gossips(topology, collective):
        return 0.0
    timed = TimedLinks(topology, collective.chunk_bytes)
    return _gossip_latency_us(topology, timed, collective.num_chunks)


class TimedLinks:
    """A topology's links as arrays, with one chunk's time on each: what the cuts count on."""

    def __init__(self, topology: Topology, chunk_bytes: int) -> None:
        self.duration = np.asarray(topology.link_times_us(chunk_bytes))
        self.busy = np.asarray(topology.link_busy_times_us(chunk_bytes))
        self.forward = LinkTimes(topology, self.duration)
        self.backward = LinkTimes(topology, self.duration, backwards=True)
        links = topology.links
        self.src = np.fromiter((lk.src for lk in links), np.int64, len(links))
        self.dst = np.fromiter((lk.dst for lk in links), np.int64, len(links))


def _gossip_latency_us(topology: Topology, timed: TimedLinks, num_chunks: int) -> float:
    """:func:`gossip_latency_bound_us` on links already timed."""
    npus = range(topology.num_npus)
    ready, onward = timed.forward.from_nodes(npus), timed.backward.from_nodes(npus)
    src, dst = timed.src, timed.dst
    first = ready[src] + timed.duration + onward[dst]
    bound = 0.0
    for partition, num_groups in partitions(topology):
        group_of = np.asarray(partition)
        count = 2 * (num_groups - 1) * num_chunks
        crossing = group_of[src] != group_of[dst]
        for side in (dst, src):  # into a group, out of one
            links = crossing & (group_of[side] != OUTSIDE)
            moved = earliest_to_move(first[links], timed.busy[links], count)
            if side is dst:  # the last news into a group is told inside, or comes in again
                told_us = moved + _slowest_to_tell_us(topology, timed, group_of)
                again_us = earliest_to_move(first[links], timed.busy[links], count + 1)
                moved = max(moved, min(told_us, again_us))
            bound = max(bound, moved)
    return bound


def _slowest_to_tell_us(topology: Topology, timed: TimedLinks, group_of: np.ndarray) -> float:
    """Of the groups of a partition (``group_of`` per node), the least time in which one
    NPU of a group can tell all the others something over the group's own links
    (:func:`knowing_us`; 0.0 if some group has one NPU, or more than
    :data:`MAX_SPREAD_RANKS`, where the search is not worth its time)."""
    npus = np.arange(topology.num_npus)
    within = _Within(timed, np.flatnonzero(group_of[timed.src] == group_of[timed.dst]))
    least = math.inf
    for group in np.unique(group_of[npus]).tolist():
        members = set(npus[group_of[npus] == group].tolist())
        if not 2 <= len(members) <= MAX_SPREAD_RANKS:  # one NPU has no one to tell
            return 0.0
        least = min(least, float(within.knowing_us(members)[-1]))
    return 0.0 if math.isinf(least) else least


class _Within:
    """Links of a set (or of each group of a partition: none between two groups), and how
    fast a member can tell the other members something over them."""

    def __init__(self, timed: TimedLinks, links: np.ndarray) -> None:
        self.timed = timed
        self.out_of: dict[int, list[tuple[int, int]]] = {}  # node -> (link, far end)
        for link in links.tolist():
            self.out_of.setdefault(int(timed.src[link]), []).append((link, int(timed.dst[link])))

    def knowing_us(self, members: set[int]) -> np.ndarray:
        """:func:`knowing_us` for NPUs ``members``: from the soonest a message can reach
        another member, the least busy time of the links such messages start on, and the
        most of those one member has."""
        reach_us, busy_us, most_links = math.inf, math.inf, 0
        for npu in members:
            starts = 0
            others = members - {npu}
            for link, far_end in self.out_of.get(npu, []):
                onward = times_from(far_end, partial(self._onward, avoided=npu))
                onward_us = min(onward.get(other, math.inf) for other in others)
                if math.isfinite(onward_us):
                    reach_us = min(reach_us, float(self.timed.duration[link]) + onward_us)
                    busy_us = min(busy_us, float(self.timed.busy[link]))
                    starts += 1
            most_links = max(most_links, starts)
        return knowing_us(len(members), reach_us, busy_us, most_links)

    def _onward(self, node: int, avoided: int) -> list[tuple[int, float]]:
        """The nodes one link of the set leads to from ``node``, with its time, never to
        ``avoided`` (a message back through its sender is one the sender could have
        started later)."""
        out_of, duration = self.out_of.get(node, []), self.timed.duration
        return [(far, float(duration[link])) for link, far in out_of if far != avoided]


def knowing_us(npus: int, reach_us: float, busy_us: float, links: int) -> np.ndarray:
    """When one, two, ... of ``npus`` NPUs can know what one knew at 0, at the soonest, if a
    message reaches a new one ``reach_us`` after it starts and an NPU starts at most one
    on each of its ``links`` links every ``busy_us`` (inf for those none can tell). This
    is the postal model of broadcasting (Bar-Noy and Kipnis, 1994): every NPU that knows
    sends as soon as it can, which tells the most NPUs by any time.

    Eight GPUs on an NVSwitch (400 GB/s, 1 MiB: 2.69 us a hop, the link busy as long):
    no switch copies a message, so the last hears after five hops::

        >>> (knowing_us(8, 2 * 2.69, 2.69, 1) / 2.69).round(2).tolist()
        [0.0, 2.0, 3.0, 4.0, 4.0, 5.0, 5.0, 5.0]
    """
    told = np.zeros(max(npus, 0))
    if npus <= 1:
        return told
    if links == 0 or math.isinf(reach_us):
        told[1:] = math.inf
        return told
    arrivals = [(reach_us, 0.0)] * links  # (when a message arrives, when it started)
    for k in range(1, npus):
        told[k], started_us = heapq.heappop(arrivals)
        heapq.heappush(arrivals, (started_us + busy_us + reach_us, started_us + busy_us))
        for _ in range(links):
            heapq.heappush(arrivals, (told[k] + reach_us, told[k]))
    return told


def earliest_to_move(
    first_us: Sequence[float] | np.ndarray, step_us: Sequence[float] | np.ndarray, count: int
) -> float:
    """Smallest ``T`` by which links can have moved ``count`` chunks, link ``i`` moving its
    ``k``-th at ``first_us[i] + (k - 1) step_us[i]`` at the soonest (inf if none can).

    >>> earliest_to_move([5.0, 1.0], [2.0, 3.0], 4)  # 1, 4, 5, 7
    7.0
    """
    if count <= 0:
        return 0.0
    arrivals = _Arrivals(first_us, step_us)
    if not arrivals.first.size:
        return math.inf
    high = float((arrivals.first + (count - 1) * arrivals.step).min())
    high = bisect_horizon(arrivals.count_by, count, high)
    # The answer is some link's k-th chunk: the latest such time not above `high`.
    return arrivals.last_by(high)


def soonest_arrivals(first_us: np.ndarray, step_us: np.ndarray, most: int) -> np.ndarray:
    """``earliest_to_move(first_us, step_us, j)`` for ``j = 1 .. most`` at once: the
    ``most`` soonest arrivals over all links, inf where they cannot move that many.

    >>> soonest_arrivals(np.array([5.0, 1.0]), np.array([2.0, 3.0]), 5).tolist()
    [1.0, 4.0, 5.0, 7.0, 7.0]
    """
    arrivals = _Arrivals(first_us, step_us)
    times = (arrivals.first[:, None] + np.arange(most) * arrivals.step[:, None]).ravel()
    times = np.sort(times)[:most]
    return np.concatenate([times, np.full(most - len(times), np.inf)])


class _Arrivals:
    """Links moving chunks, link ``i`` its ``k``-th at ``first[i] + (k - 1) step[i]`` at the
    soonest (links that never can are left out)."""

    def __init__(
        self, first_us: Sequence[float] | np.ndarray, step_us: Sequence[float] | np.ndarray
    ) -> None:
        first, step = np.asarray(first_us, np.float64), np.asarray(step_us, np.float64)
        finite = np.isfinite(first)
        self.first, self.step = first[finite], step[finite]

    def _last_index(self, horizon: float) -> tuple[np.ndarray, np.ndarray]:
        """The links that can move one by ``horizon``, and for each the index of its last."""
        started = self.first <= horizon
        index = np.floor((horizon - self.first[started]) / self.step[started] * (1 + 1e-12))
        return index, started

    def count_by(self, horizon: float) -> int:
        """How many chunks the links can have moved by ``horizon``."""
        return int((self._last_index(horizon)[0] + 1).sum())

    def last_by(self, horizon: float) -> float:
        """When the last chunk moved by ``horizon`` (some moved by then) can be in."""
        index, started = self._last_index(horizon)
        return float((self.first[started] + index * self.step[started]).max())


def bisect_horizon(moved: Callable[[float], int], count: int, high: float) -> float:
    """A time within rounding of the smallest ``T <= high`` with ``moved(T) >= count``
    (``moved`` grows with ``T``; ``moved(high) >= count``)."""
    low = 0.0
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if moved(middle) >= count:
            high = middle
        else:
            low = middle
    return high


def cut_sets(topology: Topology, ranks: np.ndarray) -> list[np.ndarray]:
    """The sets to cut around, as node masks: fast-link components per bandwidth level
    (all but the slowest) and single ranks, at most ``MAX_SETS`` of each, evenly spread.
    A set that two levels (or a level and a single rank) both give is listed once."""
    sets: dict[bytes, np.ndarray] = {}
    levels = sorted({link.bandwidth_GBps for link in topology.links}, reverse=True)[:-1]
    for threshold in levels:
        root = np.asarray(topology.components_over(threshold))
        for group in _spread(np.unique(root[ranks]).tolist()):
            mask = root == group
            sets.setdefault(mask.tobytes(), mask)
    for rank in _spread(np.flatnonzero(ranks).tolist()):
        single = np.zeros(topology.num_nodes, bool)
        single[rank] = True
        sets.setdefault(single.tobytes(), single)
    return list(sets.values())


def _spread(items: Sequence[_Item], most: int = MAX_SETS) -> list[_Item]:
    """At most ``most`` of ``items`` (sorted), evenly spaced, first and last included."""
    if len(items) <= most:
        return list(items)
    step = (len(items) - 1) / (most - 1)
    return [items[i] for i in sorted({round(i * step) for i in range(most)})]
