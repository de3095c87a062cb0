"""Post-passes on synthesized transfers: drop useless ones, re-time as soon as possible,
then shorten the tail.

The passes keep each NPU link's order of transfers and every dependency (the
tail pass swaps two chunks within one link's order, with their dependencies),
so a valid schedule stays valid. Re-timing makes the schedule *tight*: every
transfer starts as soon as its link and its dependencies allow, exactly as the
replay in :mod:`tacos.simulate` computes it, so synthesized and simulated times
agree to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tacos.schedule import Op, Transfer
from tacos.simulate import replay_times
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
    transfers: Sequence[Transfer],
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
) -> list[Transfer]:
    """Start every transfer as early as its link and its dependencies allow.

    Uses the replay of :mod:`tacos.simulate` (one timing model in the code
    base): an NPU's link keeps the order ``transfers`` lists, a switch's link
    serves transfers in the order they became ready. ``transfers`` must be in
    start-time order. The result is sorted by the new start times (ties by
    link, then position). ``sends_in_flight`` limits each NPU's outstanding
    messages, as in :func:`tacos.simulate.simulate`.
    """
    starts, ends = replay_times(transfers, topology, chunk_bytes, sends_in_flight)
    retimed = [replace(t, start=starts[i], end=ends[i]) for i, t in enumerate(transfers)]
    order = sorted(range(len(retimed)), key=lambda i: (retimed[i].start, retimed[i].link, i))
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


MAX_TAIL_TRANSFERS = 40_000
"""Schedules up to this many transfers get their tail shortened (each round re-times all)."""
MAX_TAIL_ROUNDS = 8
"""Rounds of :func:`shorten_tail`; most schedules stop after one or two."""


def shorten_tail(
    transfers: Sequence[Transfer],
    topology: Topology,
    retime: Callable[[list[Transfer]], Sequence[Transfer]],
) -> list[Transfer]:
    """Bring the last arrival forward by swapping chunks between two sends of one link.

    The greedy decides in time order, so a link into a node may bring it last
    the very chunk it still has to relay (the schedule's last hop then waits
    for it), and first a chunk nobody takes further. Swapping the two chunks
    between those two sends is safe when the sender held the relayed chunk at
    the earlier send: every transfer keeps its link and its place on it, the
    relayed chunk arrives sooner and the other one no later than the schedule
    ended, so after ``retime`` (as soon as possible, same link order) no
    time is later. Each round swaps, on the dependency chain of every last
    arrival, at the hop where it gains most; rounds go on while the finish
    time drops. ``transfers`` are in start order, dependencies by index.
    """
    current = list(transfers)
    if not current or len(current) > MAX_TAIL_TRANSFERS:
        return current
    for _ in range(MAX_TAIL_ROUNDS):
        finish = max(t.end for t in current)
        swapped = _swap_on_last_chains(current, topology, finish)
        if swapped is None:
            break
        retimed = list(retime(swapped))
        if max(t.end for t in retimed) >= finish:
            break
        current = retimed
    return current


def _swap_on_last_chains(
    transfers: list[Transfer], topology: Topology, finish: float
) -> list[Transfer] | None:
    """``transfers`` with one swap (see :func:`shorten_tail`) on the chain of each
    transfer ending at ``finish``; None when no chain has one."""
    dependants: list[list[int]] = [[] for _ in transfers]
    on_link: dict[int, list[int]] = {}
    for index, t in enumerate(transfers):
        for dep in t.deps:
            dependants[dep].append(index)
        on_link.setdefault(t.link, []).append(index)
    result = list(transfers)
    touched: set[int] = set()
    for last in (i for i, t in enumerate(transfers) if t.end == finish):
        best: tuple[float, int, int] | None = None  # (gain, late send, early send)
        hop = last
        while len(transfers[hop].deps) == 1:
            hop = transfers[hop].deps[0]
            late = transfers[hop]
            if late.op is not Op.COPY:
                break
            if topology.is_switch(late.src) or topology.is_switch(late.dst):
                continue
            held_from = max((transfers[d].end for d in late.deps), default=0.0)
            for early in on_link[late.link]:
                t = transfers[early]
                if t.start >= late.start:
                    break
                if t.start >= held_from and t.op is Op.COPY and not dependants[early]:
                    gain = late.end - t.end
                    if best is None or gain > best[0]:
                        best = (gain, hop, early)
                    break  # the earliest such send gains most on this hop
        if best is None or touched & {best[1], best[2], *dependants[best[1]]}:
            continue
        _, hop, early = best
        touched.update((hop, early, *dependants[hop]))
        late_t, early_t = transfers[hop], transfers[early]
        result[early] = replace(early_t, chunk=late_t.chunk, deps=late_t.deps)
        result[hop] = replace(late_t, chunk=early_t.chunk, deps=early_t.deps)
        for child in dependants[hop]:
            deps = tuple(sorted(early if d == hop else d for d in result[child].deps))
            result[child] = replace(result[child], deps=deps)
    return None if not touched else result
