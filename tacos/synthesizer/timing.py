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

import numpy as np

from tacos.schedule import Op, Transfer
from tacos.simulate import replay_times
from tacos.topology import Topology
from tacos.transfers import OP_CODES, TransferTable


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


def played_backwards(
    spread: Sequence[Transfer],
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
) -> list[Transfer]:
    """A spreading schedule built on ``topology.transposed()``, played backwards on
    ``topology`` as the reduction it mirrors, re-timed as soon as possible.

    Every transfer is reversed in direction and time, and adds into what its (new)
    receiver holds, unless that is a switch (which forwards only). Played
    backwards, transfer X waits for the reversals of the transfers that forwarded
    what X delivered: they bring the contributions X then passes on.
    """
    finish = max((t.end for t in spread), default=0.0)
    forwarded_by: dict[int, list[int]] = {}
    for index, t in enumerate(spread):
        for dep in t.deps:
            forwarded_by.setdefault(dep, []).append(index)
    backwards = [
        Transfer(
            chunk=t.chunk,
            src=t.dst,
            dst=t.src,
            link=t.link,
            start=finish - t.end,
            end=finish - t.start,
            op=Op.COPY if topology.is_switch(t.src) else Op.REDUCE,
            deps=tuple(forwarded_by.get(index, ())),
        )
        for index, t in enumerate(spread)
    ]
    order = sorted(range(len(backwards)), key=lambda i: (backwards[i].start, backwards[i].link))
    return retime_asap(renumber(backwards, order), topology, chunk_bytes, sends_in_flight)


def as_transposed(topology: Topology) -> list[int] | None:
    """Per link ``j``, the link of ``topology.transposed()`` that joins the same two nodes the
    same way with the same bandwidth and latency, each taken once; None unless every
    link has a twin running the other way (then the transposed topology is the topology
    itself, its links renumbered, and a spread built on ``topology`` is one built on the
    transposed topology once each transfer's link ``j`` becomes ``as_transposed[j]``)."""
    unused: dict[tuple[int, int, float, float], list[int]] = {}
    for index, link in enumerate(topology.transposed().links):
        key = (link.src, link.dst, link.bandwidth_GBps, link.latency_us)
        unused.setdefault(key, []).append(index)
    mapping = []
    for link in topology.links:
        same = unused.get((link.src, link.dst, link.bandwidth_GBps, link.latency_us))
        if not same:
            return None
        mapping.append(same.pop(0))
    return mapping


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
_COPY = OP_CODES.index(Op.COPY)


def shorten_tail(
    table: TransferTable,
    topology: Topology,
    retime: Callable[[TransferTable], TransferTable],
) -> TransferTable:
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
    time drops. ``table`` is in start order; it is returned itself when
    nothing is swapped. Both engines run this on their tables, so the search
    is on arrays: most schedules have nothing to swap, and finding that out
    costs a few passes over the columns.
    """
    if not len(table) or len(table) > MAX_TAIL_TRANSFERS:
        return table
    via_switch = np.fromiter(
        (topology.is_switch(lk.src) or topology.is_switch(lk.dst) for lk in topology.links),
        np.bool_,
        len(topology.links),
    )
    for _ in range(MAX_TAIL_ROUNDS):
        finish = table.end.max()
        swapped = _swap_on_last_chains(table, via_switch, finish)
        if swapped is None:
            break
        retimed = retime(swapped)
        if retimed.end.max() >= finish:
            break
        table = retimed
    return table


def _swap_on_last_chains(
    table: TransferTable, via_switch: np.ndarray, finish: float
) -> TransferTable | None:
    """``table`` with one swap (see :func:`shorten_tail`) on the chain of each
    transfer ending at ``finish``; None when no chain has one."""
    ptr, deps = table.deps_ptr, table.deps
    leaf_copy = (table.op == _COPY) & (np.bincount(deps, minlength=len(table)) == 0)
    by_link = np.argsort(table.link, kind="stable")  # each link's transfers in start order
    link_ptr = np.searchsorted(table.link[by_link], np.arange(len(via_switch) + 1))
    swap = np.arange(len(table))
    touched: set[int] = set()
    for last in np.flatnonzero(table.end == finish).tolist():
        best: tuple[float, int, int] | None = None  # (gain, late send, early send)
        hop = last
        while ptr[hop + 1] - ptr[hop] == 1:
            hop = int(deps[ptr[hop]])
            if table.op[hop] != _COPY:
                break
            link = table.link[hop]
            if via_switch[link]:
                continue
            held_from = table.end[deps[ptr[hop] : ptr[hop + 1]]].max(initial=0.0)
            sends = by_link[link_ptr[link] : link_ptr[link + 1]]
            starts = table.start[sends]
            first, end = np.searchsorted(starts, (held_from, table.start[hop]))
            before = sends[first:end]  # sends the chunk could move to
            earliest = before[leaf_copy[before]][:1]  # it gains most on this hop
            if len(earliest):
                gain = table.end[hop] - table.end[earliest[0]]
                if best is None or gain > best[0]:
                    best = (gain, hop, int(earliest[0]))
        if best is None:
            continue
        _, hop, early = best
        involved = {hop, early, *table.dep_rows[deps == hop].tolist()}
        if touched & involved:
            continue
        touched |= involved
        swap[hop], swap[early] = early, hop
    if not touched:
        return None
    # The two rows trade places, and with them their chunks, their dependencies and
    # their dependants; their links and times stay where they were.
    traded = table.take(swap)
    return TransferTable(
        traded.chunk, table.src, table.dst, table.link, table.start, table.end, table.op,
        traded.deps_ptr, traded.deps,
    )  # fmt: skip
