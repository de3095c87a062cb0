"""List scheduling of fixed transfers on their links, forwards or backwards in time.

A plan fixes which transfers there are, on which links, and what each waits
for; this decides when. Whenever a link out of an NPU is free it starts, of its
transfers whose dependencies have all ended, the one of lowest rank (a priority
given per transfer: an NPU runs a program, so it may send in any order). A link
out of a switch serves its transfers in the order they became ready, ties by
what they are, exactly as :mod:`tacos.simulate` replays a switch (a FIFO
queue), so a forward pass is the time the replay gives (in the paper's link
model; the pipelined one breaks ties by when messages entered the fabric, so
there the replay has the last word). Scheduling the
reversed dependency graph by rank gives a backward schedule, whose end times
make good priorities for the next forward pass (forward-backward improvement,
as for resource-constrained project scheduling). :mod:`.trees` runs
it on its trees; :func:`improved` on any schedule.

The loop is compiled: each link's ready transfers sit in a binary heap of ranks
in the link's own segment of one array, and events (links freeing, transfers
arriving) in the engines' event heap (:func:`~._kernels.heap_push`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from tacos.schedule import Op, Transfer
from tacos.simulate import replay_times
from tacos.synthesizer._kernels import C_HEAP, heap_pop, heap_push, segment_pop, segment_push
from tacos.synthesizer.fast_fabric import replay_times_of
from tacos.topology import Topology
from tacos.transfers import OP_CODES, TransferTable

FORWARD_BACKWARD_ROUNDS = 6
"""Rounds after the first pass (mesh2d:8x8 All-Reduce trees, 4 chunks per NPU, 4 seeds:
1.21-1.23 of the bound after 4 rounds, 1.19-1.22 after 8; greedy schedules of the
cluster suite gain nothing more from 20 or 60)."""
SETTLED_AFTER_IDLE_ROUNDS = 2
"""Rounds stop once this many in a row gained nothing (mesh2d:8x8 trees at 16 chunks per
NPU settle after three rounds; a100-2node at 4 gains again after one idle round)."""
PERTURBED_ROUNDS = 20
PERTURBED_AFTER_IDLE_ROUNDS = 5
"""Forward-backward rounds after each perturbed first pass (:func:`perturbed`), and the
idle rounds that end them: with 30 restarts, (20, 5) found what 100 restarts of (4, 2)
found on the meshes and heterogeneous meshes, in less time."""
COMPILED_REPLAY_ABOVE = 50_000
"""Smaller schedules are replayed by :mod:`tacos.simulate` itself (about 7 us a transfer,
measured on dgx:4x8 All-Gathers): a small synthesis then loads no compiled replay, whose
compiling took a first run on ring:8 about 11 s on this machine."""
MAX_REORDERED_TRANSFERS = 1_200_000
"""Larger schedules keep their order on every link. :func:`improved` takes about 2.5 s
per 500,000 transfers (a 512-GPU DGX-like All-Gather at one chunk per GPU, 588,800
transfers: 1.288 -> 1.194 of the throughput bound; dgx:16x8 All-Reduce at 16 chunks
per GPU, 1,163,264 transfers: 1.085 -> 1.076), next to the greedy's 1-3 s."""


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

    def __init__(
        self, topology: Topology, transfers: Sequence[Transfer] | TransferTable, chunk_bytes: int
    ):
        table = TransferTable.from_transfers(transfers)  # a table as it is
        self.num_links = len(topology.links)
        self.link = table.link
        self.deps = (table.deps_ptr, table.deps)
        self.dependants = table.dependants()  # a repeated dependency counts down twice
        reduces = table.op == OP_CODES.index(Op.REDUCE)
        reduce_us = topology.reduce_time_us(chunk_bytes) if reduces.any() else 0.0
        arrival = np.asarray(topology.link_times_us(chunk_bytes))
        self.lasts_us = arrival[self.link] + np.where(reduces, reduce_us, 0.0)
        self.busy_us = np.asarray(topology.link_busy_times_us(chunk_bytes))[self.link]
        self.fifo_link = np.fromiter(
            (topology.is_switch(lk.src) for lk in topology.links), np.bool_, self.num_links
        )
        self.by_identity = _by_identity(table, self.fifo_link)

    def forward(self, priority: Sequence[object] | np.ndarray) -> Times:
        """Each link out of an NPU serves its ready transfer of smallest ``priority``
        whenever it is free (ties: the lower index); each out of a switch, the one ready
        first (module docs)."""
        return self._run(self.deps, self.dependants, priority, self.fifo_link)

    def backward(self, priority: Sequence[object] | np.ndarray) -> Times:
        """Every link by ``priority`` on the reversed dependency graph (times count back
        from the end)."""
        return self._run(self.dependants, self.deps, priority, np.zeros_like(self.fifo_link))

    def _run(
        self,
        deps: tuple[np.ndarray, np.ndarray],
        dependants: tuple[np.ndarray, np.ndarray],
        priority: Sequence[object] | np.ndarray,
        fifo_link: np.ndarray,
    ) -> Times:
        if isinstance(priority, np.ndarray):
            by_priority = np.lexsort((np.arange(len(priority)), priority))
        else:
            by_priority = np.array(sorted(range(len(priority)), key=lambda i: (priority[i], i)))
        rank = np.empty(len(by_priority), np.int64)
        rank[by_priority] = np.arange(len(by_priority))
        start, end = _list_schedule(
            self.link, self.lasts_us, self.busy_us, *deps, *dependants, rank, self.num_links,
            fifo_link, self.by_identity,
        )  # fmt: skip
        return Times(start, end)


def _by_identity(table: TransferTable, fifo_link: np.ndarray) -> np.ndarray:
    """Transfer indices in the order a switch breaks ties between transfers that became
    ready at once (:mod:`tacos.simulate`'s ``enqueue``: chunk, whether it reduces, the
    links its dependencies came in on); the others after, by index."""
    fifo = fifo_link[table.link]
    num_deps = np.diff(table.deps_ptr)
    if (num_deps[fifo] == 1).all():  # one hop into the switch each: sort by columns
        came_in_on = np.full(len(table), -1, np.int64)
        came_in_on[fifo] = table.link[table.deps[table.deps_ptr[:-1][fifo]]]
        chunk, op = np.where(fifo, table.chunk, 0), np.where(fifo, table.op, 0)
        return np.lexsort((np.arange(len(table)), came_in_on, op, chunk, ~fifo))

    def identity(i: int) -> tuple[int, ...]:
        if not fifo[i]:
            return (1, i)
        deps = table.deps[table.deps_ptr[i] : table.deps_ptr[i + 1]]
        return (0, int(table.chunk[i]), int(table.op[i]), *table.link[deps].tolist())

    return np.array(sorted(range(len(table)), key=identity), np.int64)


def settled(timeline: Timeline, first: Sequence[object] | np.ndarray) -> Times:
    """The fastest of a first forward pass by ``first`` and the forward-backward rounds
    after it: each backward pass takes the transfers that ended last first, and the next
    forward pass the transfers by how late they ended in that backward one."""
    return refined(
        timeline, timeline.forward(first), FORWARD_BACKWARD_ROUNDS, SETTLED_AFTER_IDLE_ROUNDS
    )


def refined(timeline: Timeline, forward: Times, rounds: int, idle_rounds: int) -> Times:
    """The fastest of the forward pass ``forward`` and up to ``rounds`` forward-backward
    rounds after it (:func:`settled`), stopping once ``idle_rounds`` in a row gained
    nothing."""
    best, idle = forward, 0
    for _ in range(rounds):
        backward = timeline.backward(-forward.end)
        forward = timeline.forward(-backward.end)
        if forward.finish_us < best.finish_us:
            best, idle = forward, 0
        elif (idle := idle + 1) == idle_rounds:
            break
    return best


def perturbed(
    timeline: Timeline, best: Times, restarts: int, scale_us: float, rng: np.random.Generator
) -> Times:
    """Iterated local search around ``best``: ``restarts`` times, a forward pass by
    ``best``'s start times each moved by Gaussian noise of deviation ``scale_us``, then
    refined (:func:`refined`, as :func:`settled` does); the first strictly faster result
    replaces ``best`` as the centre. Forward-backward rounds settle in a local optimum
    where two transfers that each wait behind the other's chain never swap; the noise
    swaps such near ties at random."""
    for _ in range(restarts):
        noisy = best.start + rng.normal(0.0, scale_us, len(best.start))
        candidate = refined(
            timeline,
            timeline.forward(noisy),
            PERTURBED_ROUNDS,
            PERTURBED_AFTER_IDLE_ROUNDS,
        )
        if candidate.finish_us < best.finish_us:
            best = candidate
    return best


def longest_chains_us(table: TransferTable, link_us: Sequence[float]) -> np.ndarray:
    """Per transfer, the longest chain of link times from its start through what waits
    for it to the end (critical path first is how the classic algorithms rank their
    transfers). Every dependency must come before its dependants in ``table``."""
    return _chains_after(table.link, np.asarray(link_us, np.float64), table.deps_ptr, table.deps)


def replayed(
    recorded: TransferTable,
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every row as :mod:`tacos.simulate` replays it, an NPU's link
    taking its transfers in order of recorded start, each NPU ``sends_in_flight``
    messages at a time (compiled above :data:`COMPILED_REPLAY_ABOVE` transfers in the
    default cost model, the one the compiled replay knows; both give the same times)."""
    compiled = topology.cost.is_default and len(recorded) > COMPILED_REPLAY_ABOVE
    if compiled and sends_in_flight is None:  # it orders each NPU's link by start itself
        return replay_times_of(recorded, topology, chunk_bytes)
    order = np.lexsort((np.arange(len(recorded)), recorded.link, recorded.start))
    in_order = recorded.take(order)  # ports go to waiting messages in this order
    start, end = np.empty(len(recorded)), np.empty(len(recorded))
    if compiled:
        start[order], end[order] = replay_times_of(in_order, topology, chunk_bytes, sends_in_flight)
    else:
        start[order], end[order] = replay_times(
            list(in_order), topology, chunk_bytes, sends_in_flight
        )
    return start, end


def with_times(table: TransferTable, start: np.ndarray, end: np.ndarray) -> TransferTable:
    """``table``'s transfers at the given times, sorted by (start, link) as schedules list
    them (dependencies keep pointing at the same transfers)."""
    timed = replace(table, start=start, end=end)
    return timed.take(np.lexsort((table.link, start)))


def improved(
    topology: Topology, transfers: Sequence[Transfer] | TransferTable, chunk_bytes: int
) -> TransferTable | None:
    """The same transfers with each NPU's links reordered by forward-backward list
    scheduling, starting from the order they have, and timed as the replay times them;
    None unless that finishes strictly sooner (and for more than
    :data:`MAX_REORDERED_TRANSFERS` transfers, which keep their order).

    Only the order on links out of NPUs changes (switches stay FIFO), and every
    transfer still waits for the ones it depends on, so whatever the schedule
    delivered or reduced it still does. (A plan whose correctness also rests on an
    order the dependencies do not state, such as the exchange of
    :mod:`.trees`, must not come here.)
    """
    table = TransferTable.from_transfers(transfers)  # a table as it is
    if not 0 < len(table) <= MAX_REORDERED_TRANSFERS:
        return None
    best = settled(Timeline(topology, table, chunk_bytes), table.start)
    start, end = replayed(replace(table, start=best.start, end=best.end), topology, chunk_bytes)
    if end.max() >= table.end.max():
        return None
    return with_times(table, start, end)


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
    fifo_link: np.ndarray,
    by_identity: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every transfer: whenever a link is free, it starts its ready
    transfer of lowest ``rank``, or on a ``fifo_link`` the one ready first (ties in
    ``by_identity`` order); a transfer is ready once all its dependencies ended.

    Events at one instant (links freeing, then arrivals, each by id) are all applied
    before anything starts. Each link's ready transfers sit in a binary heap of
    keys in the link's own segment of one array: the rank, or on a FIFO link
    ``instant * count + place in by_identity`` (instants numbered in time order).
    """
    count = link.size
    by_rank = np.empty(count, np.int64)
    by_rank[rank] = np.arange(count)
    identity = np.empty(count, np.int64)
    identity[by_identity] = np.arange(count)
    instant = 0
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
            key = identity[i] if fifo_link[link[i]] else rank[i]
            segment_push(ranks, segment[link[i]], queued, link[i], key)
            num_touched = _touch(link[i], touched, is_touched, num_touched)
    now = 0.0
    while True:
        for k in range(num_touched):
            lk = touched[k]
            is_touched[lk] = False
            if queued[lk] and free_at[lk] <= now:
                key = segment_pop(ranks, segment[lk], queued, lk)
                i = by_identity[key % count] if fifo_link[lk] else by_rank[key]
                start[i], end[i] = now, now + lasts_us[i]
                free_at[lk] = now + busy_us[i]
                heap_push(event_us, event_code, counters, free_at[lk], lk)
                heap_push(event_us, event_code, counters, end[i], big + i)
        num_touched = 0
        if counters[C_HEAP] == 0:
            return start, end
        now = event_us[0]
        instant += 1
        while counters[C_HEAP] and event_us[0] == now:
            code = heap_pop(event_us, event_code, counters)
            if code < big:
                num_touched = _touch(code, touched, is_touched, num_touched)
                continue
            for k in range(out_ptr[code - big], out_ptr[code - big + 1]):
                j = out_idx[k]
                waiting[j] -= 1
                if waiting[j] == 0:
                    key = instant * count + identity[j] if fifo_link[link[j]] else rank[j]
                    segment_push(ranks, segment[link[j]], queued, link[j], key)
                    num_touched = _touch(link[j], touched, is_touched, num_touched)


@njit(cache=True)
def _chains_after(
    link: np.ndarray, link_us: np.ndarray, deps_ptr: np.ndarray, deps: np.ndarray
) -> np.ndarray:
    """:func:`longest_chains_us` over rows in dependency order, last row first."""
    rest = np.zeros(link.size)
    for i in range(link.size - 1, -1, -1):
        rest[i] += link_us[link[i]]
        for k in range(deps_ptr[i], deps_ptr[i + 1]):
            rest[deps[k]] = max(rest[deps[k]], rest[i])
    return rest


@njit(cache=True, inline="always")
def _touch(lk: int, touched: np.ndarray, is_touched: np.ndarray, num_touched: int) -> int:
    """Note that link ``lk`` may start something now; the new count of such links."""
    if is_touched[lk]:
        return num_touched
    is_touched[lk] = True
    touched[num_touched] = lk
    return num_touched + 1
