"""Post-passes on synthesized transfers: drop useless ones, then re-time as soon as possible.

Both passes keep each NPU link's order of transfers and every dependency, so a
valid schedule stays valid. Re-timing makes the schedule *tight*: every
transfer starts as soon as its link and its dependencies allow, exactly as the
replay in :mod:`tacos.simulate` computes it, so synthesized and simulated times
agree to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tacos.schedule import Transfer
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
