"""Post-passes on synthesized transfers: drop useless ones, then re-time as soon as possible.

Both passes keep each link's order of transfers and every dependency, so a
valid schedule stays valid. Re-timing makes the schedule *tight*: every
transfer starts at ``max(end of the previous transfer on its link, end of its
dependencies)``, which is exactly what an independent replay computes, so the
synthesized and simulated collective times agree to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tacos.schedule import Transfer


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


def retime_asap(transfers: Sequence[Transfer], durations: Sequence[float]) -> list[Transfer]:
    """Start every transfer as early as its link and its dependencies allow.

    ``transfers`` must be in an order that lists dependencies first and each
    link's transfers in link order (start-time order does both). The result is
    sorted by the new start times (ties by link, then chunk).
    """
    link_end: dict[int, float] = {}
    ends: list[float] = []
    retimed = []
    for t in transfers:
        start = max([link_end.get(t.link, 0.0), *(ends[d] for d in t.deps)])
        end = start + durations[t.link]
        link_end[t.link] = end
        ends.append(end)
        retimed.append(replace(t, start=start, end=end))
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
