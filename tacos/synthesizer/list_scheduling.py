"""List scheduling of fixed transfers on their links, forwards or backwards in time.

A plan fixes which transfers there are, on which links, and what each waits
for; this decides when. Whenever a link is free it starts, of its transfers
whose dependencies have all ended, the one of lowest rank (a priority given per
transfer). Scheduling the reversed dependency graph the same way gives a
backward schedule, whose end times make good priorities for the next forward
pass (forward-backward improvement, as for resource-constrained project
scheduling). :mod:`.all_reduce_trees` runs it on its trees.

The loop is compiled: each link's ready transfers sit in a binary heap of ranks
in the link's own segment of one array, and events (links freeing, transfers
arriving) in the engines' event heap (:func:`~._kernels.heap_push`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from tacos.schedule import Op, Transfer
from tacos.synthesizer._kernels import C_HEAP, heap_pop, heap_push
from tacos.synthesizer.arrays import csr
from tacos.topology import Topology


@dataclass(frozen=True)
class Times:
    """When each transfer starts and ends, in us, by transfer index."""

    start: np.ndarray
    end: np.ndarray

    @property
    def finish_us(self) -> float:
        return float(self.end.max(initial=0.0))


class Timeline:
    """List scheduling of fixed transfers on their links, forwards or backwards in time."""

    def __init__(self, topology: Topology, transfers: Sequence[Transfer], chunk_bytes: int):
        self.num_links = len(topology.links)
        self.link = np.fromiter((t.link for t in transfers), np.int64, len(transfers))
        deps = [sorted(set(t.deps)) for t in transfers]
        self.deps = csr(deps)
        dependants: list[list[int]] = [[] for _ in transfers]
        for i, before in enumerate(deps):
            for d in before:
                dependants[d].append(i)
        self.dependants = csr(dependants)
        reduces = np.fromiter((t.op is Op.REDUCE for t in transfers), np.bool_, len(transfers))
        reduce_us = topology.reduce_time_us(chunk_bytes) if reduces.any() else 0.0
        arrival = np.asarray(topology.link_times_us(chunk_bytes))
        self.lasts_us = arrival[self.link] + np.where(reduces, reduce_us, 0.0)
        self.busy_us = np.asarray(topology.link_busy_times_us(chunk_bytes))[self.link]

    def forward(self, priority: Sequence[object] | np.ndarray) -> Times:
        """Each link serves its ready transfer of smallest ``priority`` whenever it is free
        (ties: the lower index)."""
        return self._run(self.deps, self.dependants, priority)

    def backward(self, priority: Sequence[object] | np.ndarray) -> Times:
        """The same on the reversed dependency graph (times count back from the end)."""
        return self._run(self.dependants, self.deps, priority)

    def _run(
        self,
        deps: tuple[np.ndarray, np.ndarray],
        dependants: tuple[np.ndarray, np.ndarray],
        priority: Sequence[object] | np.ndarray,
    ) -> Times:
        if isinstance(priority, np.ndarray):
            by_priority = np.lexsort((np.arange(len(priority)), priority))
        else:
            by_priority = np.array(sorted(range(len(priority)), key=lambda i: (priority[i], i)))
        rank = np.empty(len(by_priority), np.int64)
        rank[by_priority] = np.arange(len(by_priority))
        start, end = _list_schedule(
            self.link, self.lasts_us, self.busy_us, *deps, *dependants, rank, self.num_links
        )
        return Times(start, end)


@njit(cache=True)
def _list_schedule(
    link: np.ndarray,
    lasts_us: np.ndarray,
    busy_us: np.ndarray,
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    out_ptr: np.ndarray,
    out_idx: np.ndarray,
    rank: np.ndarray,
    num_links: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every transfer: whenever a link is free, it starts its ready
    transfer of lowest ``rank``; a transfer is ready once all its dependencies ended.

    Events at one instant (links freeing, then arrivals, each by id) are all applied
    before anything starts. Each link's ready transfers sit in a binary heap of
    ranks in the link's own segment of one array.
    """
    count = link.size
    by_rank = np.empty(count, np.int64)
    by_rank[rank] = np.arange(count)
    segment = np.zeros(num_links + 1, np.int64)
    segment[1:] = np.cumsum(np.bincount(link, minlength=num_links))
    ranks = np.empty(count, np.int64)
    queued = np.zeros(num_links, np.int64)
    free_at = np.zeros(num_links)
    waiting = dep_ptr[1:] - dep_ptr[:-1]
    start, end = np.zeros(count), np.zeros(count)
    big = max(count, num_links)
    event_us = np.empty(2 * count)
    event_code = np.empty(2 * count, np.int64)  # a link that frees, or big + an arrival
    counters = np.zeros(C_HEAP + 1, np.int64)
    touched = np.empty(num_links, np.int64)
    is_touched = np.zeros(num_links, np.bool_)
    num_touched = 0
    for i in range(count):
        if waiting[i] == 0:
            _rank_push(ranks, segment[link[i]], queued, link[i], rank[i])
            num_touched = _touch(link[i], touched, is_touched, num_touched)
    now = 0.0
    while True:
        for k in range(num_touched):
            lk = touched[k]
            is_touched[lk] = False
            if queued[lk] and free_at[lk] <= now:
                i = by_rank[_rank_pop(ranks, segment[lk], queued, lk)]
                start[i], end[i] = now, now + lasts_us[i]
                free_at[lk] = now + busy_us[i]
                heap_push(event_us, event_code, counters, free_at[lk], lk)
                heap_push(event_us, event_code, counters, end[i], big + i)
        num_touched = 0
        if counters[C_HEAP] == 0:
            return start, end
        now = event_us[0]
        while counters[C_HEAP] and event_us[0] == now:
            code = heap_pop(event_us, event_code, counters)
            if code < big:
                num_touched = _touch(code, touched, is_touched, num_touched)
                continue
            for k in range(out_ptr[code - big], out_ptr[code - big + 1]):
                j = out_idx[k]
                waiting[j] -= 1
                if waiting[j] == 0:
                    _rank_push(ranks, segment[link[j]], queued, link[j], rank[j])
                    num_touched = _touch(link[j], touched, is_touched, num_touched)


@njit(cache=True, inline="always")
def _touch(lk: int, touched: np.ndarray, is_touched: np.ndarray, num_touched: int) -> int:
    """Note that link ``lk`` may start something now; the new count of such links."""
    if is_touched[lk]:
        return num_touched
    is_touched[lk] = True
    touched[num_touched] = lk
    return num_touched + 1


@njit(cache=True, inline="always")
def _rank_push(ranks: np.ndarray, base: int, queued: np.ndarray, lk: int, value: int) -> None:
    """Queue ``value`` on link ``lk``'s min-heap, ``ranks[base : base + queued[lk]]``."""
    pos = queued[lk]
    queued[lk] += 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if ranks[base + parent] <= value:
            break
        ranks[base + pos] = ranks[base + parent]
        pos = parent
    ranks[base + pos] = value


@njit(cache=True, inline="always")
def _rank_pop(ranks: np.ndarray, base: int, queued: np.ndarray, lk: int) -> int:
    """Take the lowest rank off link ``lk``'s min-heap."""
    top = ranks[base]
    queued[lk] -= 1
    last, n, pos = ranks[base + queued[lk]], queued[lk], 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and ranks[base + child + 1] < ranks[base + child]:
            child += 1
        if ranks[base + child] >= last:
            break
        ranks[base + pos] = ranks[base + child]
        pos = child
    if n:
        ranks[base + pos] = last
    return top
