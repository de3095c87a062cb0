"""Post-passes on synthesized transfers: drop useless ones, then re-time as soon as possible.

Both passes keep each link's order of transfers and every dependency, so a
valid schedule stays valid. Re-timing makes the schedule *tight*: every
transfer starts at ``max(end of the previous transfer on its link, end of its
dependencies)``, which is exactly what an independent replay computes, so the
synthesized and simulated collective times agree to the last bit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import replace

from tacos.schedule import Transfer
from tacos.topology import Topology


def prune(transfers: Sequence[Transfer], is_goal: Callable[[Transfer], bool]) -> list[Transfer]:
    """Keep transfers that deliver a goal or feed, through dependencies, one that does.

    Relays can pick up chunks that nobody downstream needed; such transfers
    only occupy links. ``transfers`` must list dependencies before dependants.
    """
    needed = [False] * len(transfers)
    for index in range(len(transfers) - 1, -1, -1):
        if needed[index] or is_goal(transfers[index]):
            needed[index] = True
            for dep in transfers[index].deps:
                needed[dep] = True
    kept = [i for i in range(len(transfers)) if needed[i]]
    return renumber(transfers, kept)


def retime_asap(
    transfers: Sequence[Transfer], topology: Topology, chunk_bytes: int
) -> list[Transfer]:
    """Start every transfer as early as its link and its dependencies allow.

    An NPU's link keeps the order ``transfers`` lists (NPUs run programs); a
    switch's link serves transfers in the order they became ready (switches
    are FIFO queues), ties in list order. ``transfers`` must list dependencies
    first and each NPU link's transfers in order (start-time order does both).
    The result is sorted by the new start times (ties by link, then chunk).
    """
    durations = topology.link_times_us(chunk_bytes)
    count = len(transfers)
    waiting = [len(t.deps) for t in transfers]
    dependants: list[list[int]] = [[] for _ in range(count)]
    for i, t in enumerate(transfers):
        for d in t.deps:
            dependants[d].append(i)
    previous_on_link: dict[int, int] = {}
    follows: list[int | None] = [None] * count  # the NPU-link predecessor of each transfer
    for i, t in enumerate(transfers):
        if not topology.is_switch(t.src):
            follows[i] = previous_on_link.get(t.link)
            previous_on_link[t.link] = i
    next_on_link = {p: i for i, p in enumerate(follows) if p is not None}

    starts = [0.0] * count
    ends = [0.0] * count
    done = [False] * count
    link_end: dict[int, float] = {}
    ready_heap: list[tuple[float, int]] = []

    def release_if_ready(i: int) -> None:
        predecessor = follows[i]
        if waiting[i] == 0 and (predecessor is None or done[predecessor]):
            ready = max((ends[d] for d in transfers[i].deps), default=0.0)
            heapq.heappush(ready_heap, (ready, i))

    for i in range(count):
        release_if_ready(i)
    while ready_heap:
        ready, i = heapq.heappop(ready_heap)
        t = transfers[i]
        starts[i] = max(ready, link_end.get(t.link, 0.0))
        ends[i] = starts[i] + durations[t.link]
        link_end[t.link] = ends[i]
        done[i] = True
        for j in dependants[i]:
            waiting[j] -= 1
            if next_on_link.get(i) != j:
                release_if_ready(j)
        successor = next_on_link.get(i)
        if successor is not None:
            release_if_ready(successor)
    retimed = [replace(t, start=starts[i], end=ends[i]) for i, t in enumerate(transfers)]
    order = sorted(range(count), key=lambda i: (retimed[i].start, retimed[i].link, i))
    return renumber(retimed, order)


def renumber(transfers: Sequence[Transfer], order: Sequence[int]) -> list[Transfer]:
    """Transfers ``order[0], order[1], ...`` with dependency indices rewritten to match.

    Dependencies on transfers left out of ``order`` are dropped.
    """
    new_index = {old: new for new, old in enumerate(order)}
    return [
        replace(
            transfers[old],
            deps=tuple(sorted(new_index[d] for d in transfers[old].deps if d in new_index)),
        )
        for old in order
    ]
