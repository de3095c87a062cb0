"""Numba kernels of the fast engine on switched topologies: the greedy over fabric paths.

:func:`run_fabric_spread` is :func:`tacos.synthesizer.greedy.greedy_spread`
compiled for the fast engine's scope (one source per chunk; every NPU wants
every chunk it does not start with, or only some, which other nodes relay:
:func:`_relays`, :func:`_offers`) on topologies with switches, and on
NPU-only ones where NPUs want only some chunks:
the same events, candidate links, random draws and decisions, so the same
transfers in the same order. It is written for clarity more than for the
last cache miss (unlike :func:`tacos.synthesizer._kernels.run_spread`, which
serves the NPU-only topologies of tens of thousands of NPUs): its state is
the reference's, as arrays. Its event loop (:func:`_run_instants`) runs
without numba's reference counting, as ``run_spread``'s does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos._pages import huge, huge_filled
from tacos.synthesizer._kernels import (
    C_HEAP,
    NUM_COUNTERS,
    find_overtakes,
    heap_pop,
    heap_push,
    heapsort,
    leave_to_rivals,
    lowest_bit,
    pick_chunk,
    popcount,
    randbelow,
    sends_some,
    settle_overtakes,
    shuffle,
    sort_landed,
    touch,
)
from tacos.synthesizer.greedy import MAX_RIVALS

AVAILABLE, ARRIVED, LINK_FREE, LOOK_AGAIN = 0, 1, 2, 3
"""Event kinds, as in the reference."""
WAIT = -2
"""The work list's position of an uplink left unmatched (see match_destinations)."""
NEARER = 1 - 1e-9
"""As :data:`tacos.synthesizer.greedy.NEARER`."""
_ONE = np.uint64(1)


# ---------------------------------------------------------------- the event heap
@njit(cache=True, inline="always")
def _event_push(
    times: np.ndarray, rows: np.ndarray, size: int, seq: int, t: float, kind: int, a: int, b: int
) -> None:
    """Push event ``(t, seq)`` with payload ``(kind, a, b)`` (the caller made room).

    Unlike :func:`tacos.synthesizer._kernels.heap_push`, an entry carries its
    payload, so memory follows the events pending, not every event ever pushed
    (tens of millions on a 4096-GPU cluster).
    """
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if times[parent] < t or (times[parent] == t and rows[parent, 0] < seq):
            break
        _move_event(times, rows, parent, i)
        i = parent
    times[i] = t
    rows[i, 0], rows[i, 1], rows[i, 2], rows[i, 3] = seq, kind, a, b


@njit(cache=True, inline="always")
def _move_event(times: np.ndarray, rows: np.ndarray, source: int, target: int) -> None:
    """Entry ``source`` of the heap copied to ``target`` (column by column: no slices made)."""
    times[target] = times[source]
    for column in range(4):
        rows[target, column] = rows[source, column]


@njit(cache=True)
def _event_pop(times: np.ndarray, rows: np.ndarray, size: int) -> tuple[int, int, int]:
    """Remove the earliest event (``size`` entries before); return its payload."""
    kind, a, b = rows[0, 1], rows[0, 2], rows[0, 3]
    n = size - 1
    t, last_seq = times[n], rows[n, 0]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and (
            times[child + 1] < times[child]
            or (times[child + 1] == times[child] and rows[child + 1, 0] < rows[child, 0])
        ):
            child += 1
        if t < times[child] or (t == times[child] and last_seq < rows[child, 0]):
            break
        _move_event(times, rows, child, i)
        i = child
    _move_event(times, rows, n, i)
    return kind, a, b


@njit(cache=True, inline="always")
def _look_again(
    link: int,
    at: float,
    looking_again: np.ndarray,
    ev_times: np.ndarray,
    ev_rows: np.ndarray,
    ev_size: int,
    seq: int,
) -> tuple[int, int]:
    """``link`` looks again at ``at`` (unless it already will); the heap's new size and seq."""
    if not looking_again[link]:
        looking_again[link] = True
        _event_push(ev_times, ev_rows, ev_size, seq, at, LOOK_AGAIN, -1, link)
        ev_size += 1
        seq += 1
    return ev_size, seq


# ---------------------------------------------------------------- chunk choice
@njit(cache=True, inline="always")
def _arrive(
    target: int,
    base: int,
    decision: int,
    stamp: np.ndarray,
    arrival: np.ndarray,
    came_link: np.ndarray,
    came_pred: np.ndarray,
    stack: np.ndarray,
    edge_ptr: np.ndarray,
    edge_link: np.ndarray,
    edge_pred: np.ndarray,
    free_at: np.ndarray,
    link_time: np.ndarray,
) -> None:
    """Earliest arrival at DAG position ``target`` (``Fabric.earliest``), computed on demand.

    Positions stamped with ``decision`` are known; the others are found from
    their predecessors first (each earlier in the DAG), so a decision pays only
    for the part of the fabric leading to the destinations that take a chunk.
    """
    top = 0
    stack[0] = target
    while top >= 0:
        p = stack[top]
        if stamp[p] == decision:
            top -= 1
            continue
        pending = False
        for e in range(edge_ptr[base + p], edge_ptr[base + p + 1]):
            if stamp[edge_pred[e]] != decision:
                top += 1
                stack[top] = edge_pred[e]
                pending = True
        if pending:
            continue
        best = np.inf
        for e in range(edge_ptr[base + p], edge_ptr[base + p + 1]):
            lk, pred = edge_link[e], edge_pred[e]
            candidate = max(arrival[pred], free_at[lk]) + link_time[lk]
            if candidate < best:
                best, came_link[p], came_pred[p] = candidate, lk, pred
        arrival[p] = best
        stamp[p] = decision
        top -= 1


@njit(cache=True, inline="always")
def _last_hop_done_by(
    at: int, edge_ptr: np.ndarray, edge_link: np.ndarray, free_at: np.ndarray, link_time: np.ndarray
) -> float:
    """A lower bound on the arrival at DAG row ``at``: the soonest its last hop can end.

    Each way in ends ``max(arrival before, link free) + link time`` later, no
    sooner than ``link free + link time`` (in floats too: rounding is monotone),
    so a destination whose bound is past the soonest arrival found is skipped
    without walking the hops before it.
    """
    bound = np.inf
    for e in range(edge_ptr[at], edge_ptr[at + 1]):
        bound = min(bound, free_at[edge_link[e]] + link_time[edge_link[e]])
    return bound


@njit(cache=True, inline="always")
def _hold(node: int, chunk: int, holds: np.ndarray, gained: np.ndarray, held: np.ndarray) -> bool:
    """``node`` now holds ``chunk``: whether it did not before (then it is noted as gained)."""
    w, bit = chunk >> 6, _ONE << np.uint64(chunk & 63)
    if holds[node, w] & bit:
        return False
    holds[node, w] |= bit
    gained[node, held[node]] = chunk
    held[node] += 1
    return True


# ---------------------------------------------------------------- covers
@njit(cache=True, inline="always")
def _mix(node: int) -> np.uint64:
    """A 64-bit fingerprint of ``node`` (splitmix64); a set's is the xor of its members'."""
    z = np.uint64(node) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _cover_of(
    v: int,
    path_us: float,
    near_ptr: np.ndarray,
    near_nodes: np.ndarray,
    near_dist: np.ndarray,
    key_cut: np.ndarray,
    key_cover: np.ndarray,
    num_keys: np.ndarray,
    covers: np.ndarray,
    cover_print: np.ndarray,
    cover_ptr: np.ndarray,
    cover_members: np.ndarray,
    counts: np.ndarray,
    taken: np.ndarray,
    watch: np.ndarray,
    watch_head: np.ndarray,
    marked: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray]:
    """The cover of ``v`` for a path of ``path_us``: ``v`` and the nodes nearer to it.

    A path through switches may bring ``v`` a chunk only when no node of its
    cover has or receives it (the reference's ``_NearHoldings``), so
    destinations with one cover (the GPUs of a server, the hosts of a pod)
    take the same chunks and are judged once. Covers are the same node set
    once: a row of ``covers`` made on first use from the members' ``taken``
    rows, kept up to date by the members (:func:`_near_gain`) through the
    ``watch`` list (rows: next entry, cover). ``counts``: covers, watch
    entries, member entries. Returns the cover and the (maybe grown) watch
    and member lists.
    """
    first, last = near_ptr[v], near_ptr[v + 1]
    cut = np.searchsorted(near_dist[first:last], path_us * NEARER)
    for j in range(num_keys[v]):
        if key_cut[v, j] == cut:
            return key_cover[v, j], watch, cover_members
    fingerprint = _mix(v)
    marked[v] = True
    for i in range(first, first + cut):
        fingerprint ^= _mix(near_nodes[i])
        marked[near_nodes[i]] = True
    cover = -1
    for c in range(counts[0]):
        if cover_print[c] == fingerprint and cover_ptr[c + 1] - cover_ptr[c] == cut + 1:
            same = True
            for i in range(cover_ptr[c], cover_ptr[c + 1]):
                same &= marked[cover_members[i]]
            if same:
                cover = c
                break
    marked[v] = False
    for i in range(first, first + cut):
        marked[near_nodes[i]] = False
    if cover < 0:
        cover = counts[0]
        counts[0] += 1
        cover_print[cover] = fingerprint
        if counts[2] + cut + 1 > cover_members.shape[0]:
            cover_members = _grown(cover_members, 2 * (counts[2] + cut + 1))
        for k in range(cut + 1):
            node = v if k == 0 else near_nodes[first + k - 1]
            cover_members[counts[2] + k] = node
            for w in range(taken.shape[1]):
                covers[cover, w] |= taken[node, w]
            entry = counts[1]
            if entry == watch.shape[0]:
                grown = np.empty((2 * entry + 16, 2), np.int64)
                grown[:entry] = watch[:entry]
                watch = grown
            counts[1] += 1
            watch[entry, 0], watch[entry, 1] = watch_head[node], cover
            watch_head[node] = entry
        counts[2] += cut + 1
        cover_ptr[cover + 1] = counts[2]
    key_cut[v, num_keys[v]] = cut
    key_cover[v, num_keys[v]] = cover
    num_keys[v] += 1
    return cover, watch, cover_members


@njit(cache=True)
def _group_by_cover(
    link: int,
    dag: int,
    dag_node_ptr: np.ndarray,
    dag_nodes: np.ndarray,
    dag_first_npu: np.ndarray,
    dag_path_us: np.ndarray,
    link_time: np.ndarray,
    near_ptr: np.ndarray,
    near_nodes: np.ndarray,
    near_dist: np.ndarray,
    key_cut: np.ndarray,
    key_cover: np.ndarray,
    num_keys: np.ndarray,
    covers: np.ndarray,
    cover_print: np.ndarray,
    cover_ptr: np.ndarray,
    cover_members: np.ndarray,
    cover_counts: np.ndarray,
    taken: np.ndarray,
    watch: np.ndarray,
    watch_head: np.ndarray,
    marked_node: np.ndarray,
    dest_base: np.ndarray,
    group_ptr: np.ndarray,
    group_cover: np.ndarray,
    group_first: np.ndarray,
    group_size: np.ndarray,
    group_pos: np.ndarray,
    group_of_cover: np.ndarray,
    scratch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The destinations of ``link`` (into the switch of ``dag``) grouped by cover, once.

    Its groups are rows ``group_ptr[link]`` to ``group_ptr[link + 1]`` (set
    here: links are grouped in order), each its cover (in order of its first
    destination) and its DAG positions in order
    (``group_pos[group_first[g]:][:group_size[g]]``, from ``dest_base[link]``
    on). The group rows are packed, not a row per destination, as a few
    dozen groups serve thousands of destinations: at 4096 GPUs a row per
    destination was 34M rows per table, each touched (so backed) page by
    page. ``group_of_cover`` is all -1 before and after; ``scratch`` has a
    row per DAG position. Returns the (maybe grown) watch and member lists of
    :func:`_cover_of`.
    """
    base = dag_node_ptr[dag]
    first, size = dag_first_npu[dag], dag_node_ptr[dag + 1] - base
    packed = group_ptr[link]
    groups = 0
    for p in range(first, size):
        path_us = link_time[link] + dag_path_us[base + p]
        cover, watch, cover_members = _cover_of(
            dag_nodes[base + p], path_us, near_ptr, near_nodes, near_dist, key_cut, key_cover,
            num_keys, covers, cover_print, cover_ptr, cover_members, cover_counts, taken, watch,
            watch_head, marked_node,
        )  # fmt: skip
        scratch[p] = cover
        if group_of_cover[cover] < 0:
            group_of_cover[cover] = packed + groups
            group_cover[packed + groups] = cover
            group_size[packed + groups] = 0
            groups += 1
        group_size[group_of_cover[cover]] += 1
    group_ptr[link + 1] = packed + groups
    filled = dest_base[link]
    for g in range(packed, packed + groups):
        group_first[g] = filled
        filled += group_size[g]
        group_size[g] = 0
    for p in range(first, size):
        g = group_of_cover[scratch[p]]
        group_pos[group_first[g] + group_size[g]] = p
        group_size[g] += 1
    for g in range(packed, packed + groups):
        group_of_cover[group_cover[g]] = -1
    return watch, cover_members


@njit(cache=True, inline="always")
def _cover_gain(
    node: int, chunk: int, covers: np.ndarray, watch: np.ndarray, watch_head: np.ndarray
) -> None:
    """``node`` now has or receives ``chunk``: so do the covers it belongs to."""
    w, bit = chunk >> 6, _ONE << np.uint64(chunk & 63)
    entry = watch_head[node]
    while entry >= 0:
        covers[watch[entry, 1], w] |= bit
        entry = watch[entry, 0]


@njit(cache=True, inline="always")
def _new_decision(
    link: int,
    now: float,
    decision: int,
    stamp: np.ndarray,
    arrival: np.ndarray,
    came_pred: np.ndarray,
    free_at: np.ndarray,
    link_time: np.ndarray,
) -> int:
    """Start a new decision for the uplink ``link``: its own hop (DAG position 0) is known."""
    decision += 1
    arrival[0] = max(now, free_at[link]) + link_time[link]
    came_pred[0] = -1
    stamp[0] = decision
    return decision


@njit(cache=True, inline="always")
def _ties_by_id(
    ties: int, dest_pos: np.ndarray, dest_cover: np.ndarray, cover_at: np.ndarray
) -> None:
    """Sort the tied destinations ``dest_pos[:ties]`` and their covers by DAG position,
    which is by id (the reference's order), without allocating; ``cover_at`` is scratch
    with a row per DAG position."""
    for r in range(ties):
        cover_at[dest_pos[r]] = dest_cover[r]
    heapsort(dest_pos, ties)
    for r in range(ties):
        dest_cover[r] = cover_at[dest_pos[r]]


@njit(cache=True, inline="always")
def _soonest_takers(
    link: int,
    u: int,
    now: float,
    decision: int,
    fabric: tuple,  # type: ignore[type-arg]
    covers: np.ndarray,
    groups: tuple,  # type: ignore[type-arg]
    holds: np.ndarray,
    held: np.ndarray,
    gained: np.ndarray,
    none_since: np.ndarray,
    owned: tuple,  # type: ignore[type-arg]
    free_at: np.ndarray,
    scratch: tuple,  # type: ignore[type-arg]
    wants: tuple,  # type: ignore[type-arg]
) -> tuple[int, int, bool]:
    """The destinations the switch uplink ``link`` of NPU ``u`` brings a chunk to soonest.

    They are left in ``dest_pos[:ties]`` (DAG positions, in the order the
    groups list them) with their covers in ``dest_cover``; their arrivals and
    paths are known for ``decision`` (in ``arrival``, ``came_link``,
    ``came_pred``). Only destinations lacking one of ``u``'s own chunks count
    when there are any (the reference's ``_takers``). Where nodes want only some
    chunks, a cover that lacks something ``u`` holds is only where to look: each of
    its destinations takes what :func:`_offers` finds. Returns ``ties`` (0: none
    takes a chunk), the new ``decision`` and whether ``u`` sends an own chunk.
    """
    (dag_node_ptr, dag_edge_ptr, dag_edge_link, dag_edge_pred, dag_of_link, link_time,
     dag_nodes) = fabric  # fmt: skip
    group_ptr, group_cover, group_first, group_size, group_pos, witness = groups
    stamp, arrival, came_link, came_pred, stack, dest_pos, dest_cover = scratch
    if none_since[link] == held[u]:
        return 0, decision, False
    own, own_held, own_none_since, own_first_word, own_last_word = owned
    ask_own = _may_send_own(link, u, own_held, own_none_since)
    own_mode = False
    dag = dag_of_link[link]
    words = holds.shape[1]
    num_dests = 0
    base = dag_node_ptr[dag]
    # Every destination of a cover that lacks something u holds takes a chunk
    # (the cover of u lacks nothing u holds: u is no destination of its own).
    # The answer per (link, group) is remembered in witness[g]: a chunk that
    # made it yes (still yes while the cover lacks it: u keeps what it holds),
    # or -2 - held[u] when it was no (still no but for the chunks u gained
    # since, gained[u, held:]: what a cover has only grows); -1 when not asked
    # yet. Without it a link would scan every cover's bit set each time its
    # NPU gains a chunk.
    for g in range(group_ptr[link], group_ptr[link + 1]):
        cover = group_cover[g]
        known = witness[g]
        bit = _ONE << np.uint64(known & 63)
        takes = known >= 0 and not covers[cover, known >> 6] & bit
        if not takes and known < -1:
            for k in range(-2 - known, held[u]):
                gain = gained[u, k]
                if not covers[cover, gain >> 6] & (_ONE << np.uint64(gain & 63)):
                    witness[g], takes = gain, True
                    break
        elif not takes:
            for w in range(words):
                lacking = holds[u, w] & ~covers[cover, w]
                if lacking:
                    witness[g], takes = w * 64 + lowest_bit(lacking), True
                    break
        if not takes:
            witness[g] = -2 - held[u]
        if takes and _relaying(wants):  # each destination: what it wants or relays
            for k in range(group_first[g], group_first[g] + group_size[g]):
                if not _offers(u, dag_nodes[base + group_pos[k]], cover, holds, covers, wants):
                    continue
                if ask_own:
                    lacks_own = _offered(own, u, wants[7]) > 0
                    if lacks_own and not own_mode:
                        own_mode, num_dests = True, 0
                    if not lacks_own and own_mode:
                        continue
                dest_pos[num_dests] = group_pos[k]
                dest_cover[num_dests] = cover
                num_dests += 1
            continue
        if takes and ask_own:
            lacks_own = _lacks_own(own, u, own_first_word, own_last_word, covers, cover)
            if lacks_own and not own_mode:  # from now on only such groups count
                own_mode, num_dests = True, 0
            takes = lacks_own or not own_mode
        if takes:
            for k in range(group_first[g], group_first[g] + group_size[g]):
                dest_pos[num_dests] = group_pos[k]
                dest_cover[num_dests] = cover
                num_dests += 1
    if ask_own and not own_mode:
        own_none_since[link] = own_held[u]
    if not num_dests:
        none_since[link] = held[u]
        return 0, decision, False
    # Earliest arrival over the statically shortest paths (Fabric.earliest).
    decision = _new_decision(link, now, decision, stamp, arrival, came_pred, free_at, link_time)
    soonest, ties = np.inf, 0
    for j in range(num_dests):
        p = dest_pos[j]
        if _last_hop_done_by(base + p, dag_edge_ptr, dag_edge_link, free_at, link_time) > soonest:
            continue  # it lands after the soonest so far, however soon the hops before it
        _arrive(p, base, decision, stamp, arrival, came_link, came_pred, stack,
                dag_edge_ptr, dag_edge_link, dag_edge_pred, free_at,
                link_time)  # fmt: skip
        if arrival[p] < soonest:
            soonest, ties = arrival[p], 0
        if arrival[p] == soonest:
            dest_pos[ties], dest_cover[ties] = p, dest_cover[j]
            ties += 1
    return ties, decision, own_mode


@njit(cache=True, inline="always")
def _may_send_own(link: int, u: int, own_held: np.ndarray, own_none_since: np.ndarray) -> bool:
    """Whether some cover of the uplink ``link``'s destinations may lack one of ``u``'s own
    chunks: ``u`` has some, and has gained one since no cover lacked any."""
    return own_held[u] > 0 and own_none_since[link] != own_held[u]


@njit(cache=True, inline="always")
def _lacks_own(
    own: np.ndarray,
    u: int,
    own_first_word: np.ndarray,
    own_last_word: np.ndarray,
    covers: np.ndarray,
    cover: int,
) -> bool:
    """Whether ``cover`` lacks one of the chunks ``u`` is the source of and holds (``own``;
    they lie in its words ``own_first_word[u]..own_last_word[u]``)."""
    for w in range(own_first_word[u], own_last_word[u] + 1):
        if own[u, w] & ~covers[cover, w]:
            return True
    return False


@njit(cache=True, inline="always")
def _sends_own(
    link: int,
    u: int,
    owned: tuple,  # type: ignore[type-arg]
    holds: np.ndarray,
    covers: np.ndarray,
    fabric: tuple,  # type: ignore[type-arg]
    groups: tuple,  # type: ignore[type-arg]
    wants: tuple,  # type: ignore[type-arg]
) -> bool:
    """Whether the switch uplink ``link`` of ``u`` sends an own chunk now: some cover of its
    destinations lacks one (as :func:`_soonest_takers` finds while it scans; where nodes
    want only some chunks, some destination takes one)."""
    own, own_held, own_none_since, own_first_word, own_last_word = owned
    if not _may_send_own(link, u, own_held, own_none_since):
        return False
    dag_node_ptr, dag_of_link, dag_nodes = fabric[0], fabric[4], fabric[6]
    group_ptr, group_cover, group_first, group_size, group_pos, _ = groups
    base = dag_node_ptr[dag_of_link[link]]
    for g in range(group_ptr[link], group_ptr[link + 1]):
        cover = group_cover[g]
        if not _relaying(wants):
            if _lacks_own(own, u, own_first_word, own_last_word, covers, cover):
                return True
            continue
        for k in range(group_first[g], group_first[g] + group_size[g]):
            if _takes(own, u, dag_nodes[base + group_pos[k]], cover, holds, covers, wants):
                return True
    own_none_since[link] = own_held[u]
    return False


# ---------------------------------------------------------------- matching the uplinks of one group
@njit(cache=True, inline="always")
def _lacking(holds: np.ndarray, u: int, covers: np.ndarray, cover: int) -> int:
    """How many chunks NPU ``u`` holds that ``cover`` lacks (its destinations take one)."""
    lacking = 0
    for w in range(holds.shape[1]):
        lacking += popcount(holds[u, w] & ~covers[cover, w])
    return lacking


@njit(cache=True, inline="always")
def _takes(
    sent: np.ndarray,
    u: int,
    v: int,
    cover: int,
    holds: np.ndarray,
    covers: np.ndarray,
    wants: tuple,  # type: ignore[type-arg]
) -> int:
    """How many chunks of ``sent[u]`` (``u``'s, or its own) a path from ``u`` would bring
    ``v`` (whose ``cover`` is ``cover``); where nodes want only some chunks, they are
    left in ``relay[0]`` (see :func:`_offers`)."""
    if not _relaying(wants):
        return _lacking(sent, u, covers, cover)
    if not _offers(u, v, cover, holds, covers, wants):
        return 0
    return _offered(sent, u, wants[7])


@njit(cache=True)
def match_destinations(
    num_members: int,
    member_link: np.ndarray,
    member_by: np.ndarray,
    member_own: np.ndarray,
    tight_ptr: np.ndarray,
    tight_node: np.ndarray,
    tight_pos: np.ndarray,
    tight_cover: np.ndarray,
    link_src: np.ndarray,
    holds: np.ndarray,
    own: np.ndarray,
    covers: np.ndarray,
    owner: np.ndarray,
    visited: np.ndarray,
    visit: int,
    search: np.ndarray,
    work_link: np.ndarray,
    work_pos: np.ndarray,
    work_cover: np.ndarray,
    work_by: np.ndarray,
    matched: np.ndarray,
    choices: np.ndarray,
    wants: tuple,  # type: ignore[type-arg]
    mt: np.ndarray,
    counters: np.ndarray,
) -> tuple[int, int]:
    """The reference's ``match_uplinks``: which uplink sends where, and in which order.

    Uplink ``j`` (``member_link[j]``) may go to the destinations
    ``tight_node[tight_ptr[j]:tight_ptr[j + 1]]`` (ascending ids). Each takes
    one nobody has taken at random, or else one along an augmenting path
    (:func:`tacos.synthesizer.greedy._augment`). The work list is the matched
    uplinks, fewest chunks for their destination first (of their own chunks
    where ``member_own``; then in member order), with their destination's
    DAG position, its cover and when it would get the chunk (``member_by``:
    later is too late), then the unmatched uplinks that had destinations, with
    position ``WAIT``. ``owner`` is all -1 before and after; ``matched`` and
    ``choices`` are scratch. Returns the work list's length and ``visit``.
    """
    for j in range(num_members):
        lo, hi = tight_ptr[j], tight_ptr[j + 1]
        free = 0
        for k in range(lo, hi):
            free += owner[tight_node[k]] < 0
        if free:
            r = randbelow(free, mt, counters) if free > 1 else 0
            for k in range(lo, hi):
                if owner[tight_node[k]] < 0:
                    if r == 0:
                        owner[tight_node[k]] = j
                        break
                    r -= 1
        elif hi > lo:
            visit += 1
            top = 0
            search[0, 0], search[0, 1] = j, lo  # an uplink, its next destination to try
            while top >= 0:
                at, k = search[top, 0], search[top, 1]
                if k == tight_ptr[at + 1]:
                    top -= 1
                    continue
                search[top, 1] = k + 1
                dst = tight_node[k]
                if visited[dst] == visit:
                    continue
                visited[dst] = visit
                if owner[dst] >= 0:
                    top += 1
                    search[top, 0], search[top, 1] = owner[dst], tight_ptr[owner[dst]]
                    continue
                for t in range(top + 1):  # each uplink takes the destination it tried
                    owner[tight_node[search[t, 1] - 1]] = search[t, 0]
                break
    for j in range(num_members):  # the position in tight_* of its destination
        matched[j] = -1
        for k in range(tight_ptr[j], tight_ptr[j + 1]):
            if owner[tight_node[k]] == j:
                matched[j] = k
    num_matched = 0
    for j in range(num_members):
        k = matched[j]
        if k >= 0:
            sent = own if member_own[j] else holds
            u = link_src[member_link[j]]
            options = _takes(sent, u, tight_node[k], tight_cover[k], holds, covers, wants)
            choices[num_matched] = options * num_members + j
            num_matched += 1
    num_work = 0
    heapsort(choices, num_matched)
    for m in range(num_matched):
        j = choices[m] % num_members
        k = matched[j]
        work_link[num_work], work_pos[num_work] = member_link[j], tight_pos[k]
        work_cover[num_work], work_by[num_work] = tight_cover[k], member_by[j]
        num_work += 1
    for j in range(num_members):
        if matched[j] < 0 and tight_ptr[j + 1] > tight_ptr[j]:
            work_link[num_work], work_pos[num_work] = member_link[j], WAIT
            num_work += 1
        for k in range(tight_ptr[j], tight_ptr[j + 1]):
            owner[tight_node[k]] = -1
    return num_work, visit


@njit(cache=True, inline="always")
def wanted_word(lo: int, hi: int, w: int) -> np.uint64:
    """Word ``w`` of the chunks ``lo <= chunk < hi`` (a node's wants, as a range)."""
    first = w * 64
    if hi <= first or lo >= first + 64:
        return np.uint64(0)
    bits = ~np.uint64(0)
    if lo > first:
        bits &= ~((_ONE << np.uint64(lo - first)) - _ONE)
    if hi < first + 64:
        bits &= (_ONE << np.uint64(hi - first)) - _ONE
    return bits


# ---------------------------------------------------------------- relays
# Where nodes want only some chunks (tenants, a subset of ranks, Gather, Scatter,
# All-to-All), a node may relay a chunk it does not want towards one that does
# (the reference's ``_candidates``): per chunk, the NPUs still waiting for it
# (``waiting``, bits only cleared), and per direct link ``u -> v`` (``nearer``)
# or per pair of NPUs for paths through switches (``pair_nearer``), the NPUs that
# want something and that ``v`` is nearer to than ``u`` (made on first use).
# run_fabric_spread hands the helpers one tuple, ``wants``: 0 want_lo, 1 want_hi,
# 2 closed, 3 waiting, 4 nearer, 5 nearer_count, 6 dist, 7 relay (a scratch row),
# 8 nothing (a zero row), 9 pair_nearer, 10 pair_count, 11 want_bits.
@njit(cache=True, inline="always")
def _relaying(wants: tuple) -> bool:  # type: ignore[type-arg]
    """Whether some NPU wants only some chunks (else ``dist`` and the relay tables have
    no rows, and every node but the sources wants every chunk)."""
    return wants[6].shape[0] > 0


@njit(cache=True, inline="always")
def _claim(v: int, chunk: int, taken: np.ndarray, closed: np.ndarray, waiting: np.ndarray) -> None:
    """``v`` has or receives ``chunk``: it no longer takes it, nor waits for it."""
    w, bit = chunk >> 6, _ONE << np.uint64(chunk & 63)
    taken[v, w] |= bit
    closed[v, w] |= bit
    if waiting.shape[0]:
        waiting[chunk, v >> 6] &= ~(_ONE << np.uint64(v & 63))


@njit(cache=True, inline="always")
def _nearer_row(
    rows: np.ndarray,
    counts: np.ndarray,
    r: int,
    u: int,
    v: int,
    wants: tuple,  # type: ignore[type-arg]
) -> int:
    """``rows[r]``, made once: the NPUs that want something and that ``v`` is nearer to
    than ``u`` (the reference's ``_nearer_targets``); how many (``counts[r, 0]``, -1
    before), and the span of the chunks they want (``counts[r, 1:3]``)."""
    want_lo, want_hi, dist = wants[0], wants[1], wants[6]
    if counts[r, 0] < 0:
        counts[r, 0], counts[r, 1], counts[r, 2] = 0, want_hi.max(), 0
        for t in range(dist.shape[0]):
            if want_lo[t] < want_hi[t] and dist[v, t] < dist[u, t]:
                rows[r, t >> 6] |= _ONE << np.uint64(t & 63)
                counts[r, 0] += 1
                counts[r, 1] = min(counts[r, 1], want_lo[t])
                counts[r, 2] = max(counts[r, 2], want_hi[t])
    return counts[r, 0]


@njit(cache=True, inline="always")
def _keep_relays(
    relay: np.ndarray,
    rows: np.ndarray,
    counts: np.ndarray,
    r: int,
    u: int,
    v: int,
    wants: tuple,  # type: ignore[type-arg]
) -> bool:
    """Keep of the chunks ``relay[0]`` those an NPU of ``rows[r]`` (:func:`_nearer_row`)
    still waits for; whether any.

    Only chunks in the span the row's NPUs want can be kept (two tenants: a node of
    one relays nothing towards the other's). Of those, per chunk, its waiting NPUs
    against the row; or where that is more work, what the row's NPUs still lack
    (``closed``: what an NPU has, receives or does not want) gathered per word: the
    same set, as an NPU waits for a chunk exactly when its ``closed`` row lacks it.
    """
    closed, waiting = wants[2], wants[3]
    targets = _nearer_row(rows, counts, r, u, v, wants)
    eligible = 0
    for w in range(relay.shape[1]):
        relay[0, w] &= wanted_word(counts[r, 1], counts[r, 2], w)
        eligible += popcount(relay[0, w])
    if eligible == 0:
        return False
    found = False
    if targets * relay.shape[1] <= eligible * rows.shape[1]:
        for w in range(relay.shape[1]):
            if not relay[0, w]:
                continue
            lacked = np.uint64(0)
            for tw in range(rows.shape[1]):
                nearer = rows[r, tw]
                while nearer:
                    lacked |= ~closed[tw * 64 + lowest_bit(nearer), w]
                    nearer &= nearer - _ONE
            relay[0, w] &= lacked
            found |= relay[0, w] != 0
        return found
    for w in range(relay.shape[1]):
        left = relay[0, w]
        bits = np.uint64(0)
        while left:
            bit = lowest_bit(left)
            left &= left - _ONE
            chunk = w * 64 + bit
            for tw in range(rows.shape[1]):
                if waiting[chunk, tw] & rows[r, tw]:
                    bits |= _ONE << np.uint64(bit)
                    break
        relay[0, w] = bits
        found |= bits != 0
    return found


@njit(cache=True, inline="always")
def _relays(
    link: int,
    u: int,
    v: int,
    holds: np.ndarray,
    taken: np.ndarray,
    wants: tuple,  # type: ignore[type-arg]
) -> bool:
    """The chunks the direct link ``link`` (``u -> v``) would relay, into ``relay[0]``:
    those ``u`` holds and ``v`` neither holds nor receives, for which ``v`` is nearer
    than ``u`` to an NPU still waiting for them (per link). Whether there are any."""
    nearer, nearer_count, relay = wants[4], wants[5], wants[7]
    for w in range(holds.shape[1]):
        relay[0, w] = holds[u, w] & ~taken[v, w]
    return _keep_relays(relay, nearer, nearer_count, link, u, v, wants)


@njit(cache=True, inline="always")
def _offers(
    u: int,
    v: int,
    cover: int,
    holds: np.ndarray,
    covers: np.ndarray,
    wants: tuple,  # type: ignore[type-arg]
) -> bool:
    """What a path through switches from ``u`` would bring ``v`` (whose ``cover`` is
    what ``v`` and the nodes nearer than the path have or receive), into ``relay[0]``:
    the chunks ``u`` holds that the cover lacks and ``v`` wants, or if it wants none
    of them, those it would relay (per pair of NPUs). Whether there are any."""
    relay, want_bits = wants[7], wants[11]
    pair_nearer, pair_count = wants[9], wants[10]
    wanted, eligible = False, False
    for w in range(holds.shape[1]):
        lacking = holds[u, w] & ~covers[cover, w]
        relay[0, w] = lacking & want_bits[v, w]
        wanted |= relay[0, w] != 0
        eligible |= lacking != 0
    if wanted or not eligible:
        return wanted
    for w in range(holds.shape[1]):
        relay[0, w] = holds[u, w] & ~covers[cover, w]
    return _keep_relays(relay, pair_nearer, pair_count, u * wants[6].shape[0] + v, u, v, wants)


@njit(cache=True, inline="always")
def _offered(sent: np.ndarray, u: int, relay: np.ndarray) -> int:
    """Keep of ``relay[0]`` (what :func:`_offers` found) the chunks of ``sent[u]``; how many."""
    count = 0
    for w in range(relay.shape[1]):
        relay[0, w] &= sent[u, w]
        count += popcount(relay[0, w])
    return count


# ---------------------------------------------------------------- the event loop
@njit(cache=True)
def run_fabric_spread(
    # topology (static)
    link_src: np.ndarray,
    link_dst: np.ndarray,
    link_time: np.ndarray,
    has_routes: np.ndarray,
    first_ptr: np.ndarray,
    first_links: np.ndarray,
    inbr_ptr: np.ndarray,
    inbrs: np.ndarray,
    rivals_ptr: np.ndarray,
    rivals: np.ndarray,
    slow_in_ptr: np.ndarray,
    slow_in: np.ndarray,
    rival_slot: np.ndarray,
    near_ptr: np.ndarray,
    near_nodes: np.ndarray,
    near_dist: np.ndarray,
    max_keys: int,
    dag_of_link: np.ndarray,
    dag_node_ptr: np.ndarray,
    dag_nodes: np.ndarray,
    dag_first_npu: np.ndarray,
    dag_edge_ptr: np.ndarray,
    dag_edge_link: np.ndarray,
    dag_edge_pred: np.ndarray,
    dag_path_us: np.ndarray,
    dest_base: np.ndarray,
    matching_of_link: np.ndarray,
    sends_own_first: np.ndarray,
    # the spread
    num_chunks: int,
    source_node: np.ndarray,
    source_time: np.ndarray,
    link_free_at: np.ndarray,
    want_lo: np.ndarray,
    want_hi: np.ndarray,
    want_bits: np.ndarray,
    dist: np.ndarray,
    wanted: int,
    rarest: bool,
    compare_all_up_to: int,
    index_offset: int,
    ports: int,
    mt: np.ndarray,
    counters: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The reference's spread: transfers in decision order, and how many chunks are missing.

    Chunk ``c`` starts on ``source_node[c]`` at ``source_time[c]``; node ``v`` wants
    every chunk it does not start with, ``wanted`` of them in all, or where some NPU
    wants only some, those of its row of ``want_bits`` (all between ``want_lo[v]``
    and ``want_hi[v] - 1``); then ``dist[x, t]`` (per-chunk
    time from NPU ``x`` to NPU ``t``) decides relays (:func:`_relays` on direct links,
    :func:`_offers` on paths through switches), else it has no rows; ``ports`` > 0 is
    the reference's ``sends_in_flight`` (:mod:`._kernels`' ``run_spread`` says what it
    changes). Returns
    chunk, link, start, end and dependency of every transfer (a transfer
    index plus ``index_offset``, or ``-2 - c``: the source dependencies of
    chunk ``c``), and the wanted chunks never delivered (0 unless stuck).
    """
    num_nodes = first_ptr.shape[0] - 1
    num_links = link_src.shape[0]
    words = (num_chunks + 63) // 64
    holds = huge_filled(np.empty((num_nodes, words), np.uint64), 0)
    # holds, is receiving or is the source of (a source's own chunk is taken from the start:
    # nobody else holds it before it does, so only leave_to_rivals's count notices)
    taken = huge_filled(np.empty((num_nodes, words), np.uint64), 0)
    for chunk in range(num_chunks):
        taken[source_node[chunk], chunk >> 6] |= _ONE << np.uint64(chunk & 63)
    # relays: closed = taken and the chunks a node does not want (taken itself when every
    # node wants every chunk), and what _relays reads
    closed, waiting = taken, np.zeros((0, 0), np.uint64)
    num_npus = dist.shape[0]
    nearer = np.zeros((num_links if num_npus else 0, (num_npus + 63) // 64), np.uint64)
    nearer_count = np.full((nearer.shape[0], 3), -1, np.int64)
    relay = np.zeros((1, words), np.uint64)
    nothing = np.zeros((1, words), np.uint64)
    if num_npus:
        closed = taken.copy()
        for node in range(num_nodes):
            for w in range(words):
                closed[node, w] |= ~want_bits[node, w] & wanted_word(0, num_chunks, w)
        waiting = np.zeros((num_chunks, nearer.shape[1]), np.uint64)
        for node in range(num_npus):
            for w in range(words):
                bits = want_bits[node, w]
                while bits:
                    chunk = w * 64 + lowest_bit(bits)
                    bits &= bits - _ONE
                    if source_node[chunk] != node:
                        waiting[chunk, node >> 6] |= _ONE << np.uint64(node & 63)
    # per pair of NPUs (paths through switches): as nearer
    pairs = num_npus * num_npus if dag_node_ptr.shape[0] > 1 else 0
    pair_nearer = np.zeros((pairs, nearer.shape[1]), np.uint64)
    pair_count = np.full((pairs, 3), -1, np.int64)
    wants = (want_lo, want_hi, closed, waiting, nearer, nearer_count, dist, relay, nothing,
             pair_nearer, pair_count, want_bits)  # fmt: skip
    copies = np.zeros(num_chunks, np.int64)
    free_at = link_free_at.copy()
    arrived_by = huge_filled(np.empty((num_nodes, num_chunks), np.int64), -1)
    outstanding = np.zeros(num_nodes, np.int64)  # per node, its messages on their way
    # covers (_cover_of), and per link into a switch its destinations grouped by cover
    key_cut = np.zeros((num_nodes, max_keys), np.int64)
    key_cover = np.zeros((num_nodes, max_keys), np.int64)
    num_keys = np.zeros(num_nodes, np.int64)
    covers = huge_filled(np.empty((num_nodes * max_keys, words), np.uint64), 0)
    cover_print = np.zeros(num_nodes * max_keys, np.uint64)
    cover_ptr = np.zeros(num_nodes * max_keys + 1, np.int64)
    cover_members = np.empty(0, np.int64)
    cover_counts = np.zeros(3, np.int64)  # covers, watch entries, member entries
    watch = np.empty((0, 2), np.int64)
    watch_head = np.full(num_nodes, -1, np.int64)
    marked_node = np.zeros(num_nodes, np.bool_)
    group_ptr = np.zeros(num_links + 1, np.int64)  # per link, its groups (_group_by_cover)
    # per group: its cover, where its positions start in group_pos, and how many; room
    # for a group per destination, only address space beyond the groups made
    group_cover = huge(np.empty(dest_base[-1], np.int64))
    group_first = huge(np.empty(dest_base[-1], np.int64))
    group_size = huge(np.empty(dest_base[-1], np.int64))
    group_pos = huge(np.empty(dest_base[-1], np.int64))  # per destination, from dest_base
    group_of_cover = np.full(num_nodes * max_keys, -1, np.int64)
    # events: room for the sources, busy links and one instant (_short_of_room)
    ev_times = np.empty(num_chunks + 3 * num_links + 16)
    ev_rows = np.empty((ev_times.shape[0], 4), np.int64)
    ev_size = 0
    seq = 0
    for chunk in range(num_chunks):
        copies[chunk] += 1
        _event_push(ev_times, ev_rows, ev_size, seq, source_time[chunk], AVAILABLE, chunk,
                    source_node[chunk])  # fmt: skip
        ev_size += 1
        seq += 1
    for link in range(num_links):
        if free_at[link] > 0:
            _event_push(ev_times, ev_rows, ev_size, seq, free_at[link], LINK_FREE, -1, link)
            ev_size += 1
            seq += 1
    remaining = wanted
    biggest_dag, most_edges = 1, 1
    for d in range(dag_node_ptr.shape[0] - 1):
        biggest_dag = max(biggest_dag, dag_node_ptr[d + 1] - dag_node_ptr[d])
        edges = dag_edge_ptr[dag_node_ptr[d + 1]] - dag_edge_ptr[dag_node_ptr[d]]
        most_edges = max(most_edges, edges)
    # Output, in decision order: room for every wanted chunk over the longest path, which
    # is only address space until written (more, where relays or drops need it, by doubling).
    max_hops = _most_hops(dag_node_ptr, dag_edge_ptr, dag_edge_pred, biggest_dag)
    rows = (wanted + num_links) * max_hops
    out_chunk = huge(np.empty(rows, np.int64))
    out_link = huge(np.empty(rows, np.int64))
    out_start = huge(np.empty(rows))
    out_end = huge(np.empty(rows))
    out_dep = huge(np.empty(rows, np.int64))
    sender_of = huge(np.empty(rows, np.int64))  # per transfer written
    count = 0
    # scratch
    marked = np.zeros(num_links, np.bool_)
    candidates = np.empty(num_links, np.int64)
    touched = np.empty(num_nodes, np.int64)
    is_touched = np.zeros(num_nodes, np.bool_)
    pool = np.empty(max(64, compare_all_up_to + 1, words * 64), np.int64)
    looking_again = np.zeros(num_links, np.bool_)  # a LOOK_AGAIN event is pending
    rival_cap = np.zeros(MAX_RIVALS, np.int64)
    rival_src = np.zeros(MAX_RIVALS, np.int64)
    only_within = np.zeros(1 << MAX_RIVALS, np.int64)
    stamp = np.zeros(biggest_dag, np.int64)  # arrival[p] is known when stamp[p] == decision
    decision = 0
    stack = np.empty(most_edges + 1, np.int64)
    arrival = np.empty(biggest_dag)
    came_link = np.empty(biggest_dag, np.int64)
    came_pred = np.empty(biggest_dag, np.int64)
    dest_pos = np.empty(biggest_dag, np.int64)
    dest_cover = np.empty(biggest_dag, np.int64)
    witness = huge(np.empty(dest_base[-1], np.int64))  # per group: see the group loop
    held = np.zeros(num_nodes, np.int64)  # chunks each node holds
    # Per link into a switch: held[u] when no destination took anything (none can until
    # u gains a chunk; an arrival makes its sender's links candidates again all the same).
    none_since = np.full(num_links, -1, np.int64)
    gained = huge(np.empty((num_nodes, num_chunks), np.int32))  # ... in the order it gained them
    path = np.empty(biggest_dag + 1, np.int64)
    # own chunks first (the reference's _takers), for sends_own_first NPUs: per node the
    # chunks it is the source of and holds, how many, and the words they lie in (none: -1);
    # per link into a switch, own_held[u] when no cover lacked one of them (none will until
    # u gains another)
    own = np.zeros((num_nodes, words), np.uint64)
    own_held = np.zeros(num_nodes, np.int64)
    own_first_word = np.full(num_nodes, words, np.int64)
    own_last_word = np.full(num_nodes, -1, np.int64)
    for chunk in range(num_chunks):
        node = source_node[chunk]
        if sends_own_first[node]:
            own_first_word[node] = min(own_first_word[node], chunk >> 6)
            own_last_word[node] = max(own_last_word[node], chunk >> 6)
    own_none_since = np.full(num_links, -1, np.int64)
    owned = (own, own_held, own_none_since, own_first_word, own_last_word)
    # overtaking (see _kernels.find_overtakes); a dropped transfer's chunk becomes -1
    start_holds = np.zeros((int(np.count_nonzero(rival_slot >= 0)), words), np.uint64)
    flight_chunk = np.full(num_links, -1, np.int64)
    flight_row = np.full(num_links, -1, np.int64)
    flight_start = np.zeros(num_links)
    overtaken = np.zeros(num_links, np.bool_)
    late = np.zeros(words, np.uint64)
    landed = np.empty(num_links, np.int64)
    dropped = 0
    # matching the free uplinks of one matching group (match_destinations)
    matching_free = np.zeros(num_nodes, np.int64)  # its free uplinks now; -1: matched
    first_uplink = np.empty(num_nodes, np.int64)  # ... the first of them
    last_uplink = np.empty(num_nodes, np.int64)
    next_uplink = np.empty(num_links, np.int64)  # per free uplink, the next of its matching group
    member_link = np.empty(num_links, np.int64)
    member_by = np.empty(num_links)  # when its soonest destinations get a chunk
    member_own = np.zeros(num_links, np.bool_)  # whether it sends an own chunk
    tight_ptr = np.zeros(num_links + 1, np.int64)
    uplinks_of = np.zeros(num_nodes, np.int64)  # per matching group: each member's ties fit
    for link in range(num_links):
        if matching_of_link[link] >= 0:
            uplinks_of[matching_of_link[link]] += 1
    tight_pos = np.empty(max(1, uplinks_of.max()) * biggest_dag, np.int64)
    tight_cover = np.empty(tight_pos.shape[0], np.int64)
    tight_node = np.empty(tight_pos.shape[0], np.int64)
    owner = np.full(num_nodes, -1, np.int64)
    visited = np.zeros(num_nodes, np.int64)
    visit = 0
    search = np.empty((num_links + 1, 2), np.int64)
    work_link = np.empty(num_links, np.int64)
    work_pos = np.empty(num_links, np.int64)
    work_cover = np.empty(num_links, np.int64)
    work_by = np.empty(num_links)
    cover_at = np.empty(biggest_dag, np.int64)  # _ties_by_id's scratch
    matched = np.empty(num_links, np.int64)
    choices = np.empty(num_links, np.int64)
    # Every link into a switch has its destinations grouped by cover before the loop, which
    # runs without NRT and so allocates nothing (a cover made now is kept up to date as one
    # made at first use would be: its members' gains reach it through the watch list).
    for link in range(num_links):
        group_ptr[link + 1] = group_ptr[link]
        if dag_of_link[link] >= 0:
            watch, cover_members = _group_by_cover(
                link, dag_of_link[link], dag_node_ptr, dag_nodes, dag_first_npu, dag_path_us,
                link_time, near_ptr, near_nodes, near_dist, key_cut, key_cover, num_keys, covers,
                cover_print, cover_ptr, cover_members, cover_counts, taken, watch, watch_head,
                marked_node, dest_base, group_ptr, group_cover, group_first, group_size,
                group_pos, group_of_cover, dest_cover,
            )  # fmt: skip
    topo = (link_src, link_dst, link_time, has_routes, first_ptr, first_links, inbr_ptr, inbrs,
            rivals_ptr, rivals, slow_in_ptr, slow_in, rival_slot, dag_of_link, dag_node_ptr,
            dag_nodes, matching_of_link, source_node)  # fmt: skip
    fabric_tables = (dag_node_ptr, dag_edge_ptr, dag_edge_link, dag_edge_pred, dag_of_link,
                     link_time, dag_nodes)  # fmt: skip
    witness[: group_ptr[-1]] = -1
    group_tables = (group_ptr, group_cover, group_first, group_size, group_pos, witness)
    scan_scratch = (stamp, arrival, came_link, came_pred, stack, dest_pos, dest_cover)
    spread = (holds, taken, copies, free_at, arrived_by, held, gained, none_since, looking_again,
              covers, watch, watch_head, outstanding)  # fmt: skip
    flights = (start_holds, flight_chunk, flight_row, flight_start, overtaken, late, landed)
    matchings = (matching_free, first_uplink, last_uplink, next_uplink, member_link, member_by,
                member_own, tight_ptr, tight_pos, tight_cover, tight_node, owner, visited,
                search, work_link, work_pos, work_cover, work_by, cover_at, matched,
                choices)  # fmt: skip
    scratch = (marked, candidates, touched, is_touched, pool, rival_cap, rival_src, only_within,
               path)  # fmt: skip
    state = np.array([ev_size, seq, remaining, count, decision, visit, dropped], np.int64)
    while _run_instants(
        topo, fabric_tables, group_tables, scan_scratch, spread, owned, flights, matchings,
        scratch, wants, (ev_times, ev_rows),
        (out_chunk, out_link, out_start, out_end, out_dep, sender_of), state, num_chunks,
        rarest, compare_all_up_to, index_offset, max_hops, ports, mt, counters,
    ):  # fmt: skip
        # It stopped for room: enough for the next instant at least.
        events_short, rows_short = _short_of_room(
            state[_EV_SIZE], ev_times.shape[0], state[_COUNT], out_chunk.shape[0], num_links,
            max_hops,
        )  # fmt: skip
        if events_short:
            ev_times = _grown(ev_times, 2 * ev_times.shape[0])
            ev_rows = _grown(ev_rows, ev_times.shape[0])
        if rows_short:
            grow = 2 * out_chunk.shape[0] + num_links * max_hops
            out_chunk = _grown(out_chunk, grow)
            out_link = _grown(out_link, grow)
            out_start = _grown(out_start, grow)
            out_end = _grown(out_end, grow)
            out_dep = _grown(out_dep, grow)
            sender_of = _grown(sender_of, grow)
    remaining, count, dropped = state[_REMAINING], state[_COUNT], state[_DROPPED]
    for link in range(num_links):  # overtaken and not landed: their receivers are done
        if overtaken[link]:
            out_chunk[flight_row[link]] = -1
            dropped += 1
    if dropped:
        count = _without_dropped(out_chunk, out_link, out_start, out_end, out_dep, count,
                                 index_offset)  # fmt: skip
    return (out_chunk[:count], out_link[:count], out_start[:count], out_end[:count],
            out_dep[:count], remaining)  # fmt: skip


_EV_SIZE, _SEQ, _REMAINING, _COUNT, _DECISION, _VISIT, _DROPPED = range(7)
"""The event loop's counters, kept in ``state`` between its calls."""


@njit(cache=True, inline="always")
def _short_of_room(
    ev_size: int, ev_room: int, count: int, rows_room: int, num_links: int, max_hops: int
) -> tuple[bool, bool]:
    """Whether the event heap, and the transfer rows, might overflow in the next instant:
    in one, each link pushes at most two events (a send: its link frees, it arrives; or
    it looks again) and writes at most ``max_hops`` rows."""
    return ev_size + 2 * num_links > ev_room, count + num_links * max_hops > rows_room


# Compiled without numba's reference counting (NRT), as _kernels.run_spread is: every
# array is its caller's, and the counting on each array handed to a helper is a locked
# update that was a quarter of the run time at 2048 GPUs. Hence nothing allocated,
# sliced or made by numpy in here: the caller makes room before an instant starts.
@njit(cache=True, _nrt=False)  # type: ignore[call-overload]  # _nrt: numba's own option
def _run_instants(
    topo: tuple,  # type: ignore[type-arg]
    fabric_tables: tuple,  # type: ignore[type-arg]
    group_tables: tuple,  # type: ignore[type-arg]
    scan_scratch: tuple,  # type: ignore[type-arg]
    spread: tuple,  # type: ignore[type-arg]
    owned: tuple,  # type: ignore[type-arg]
    flights: tuple,  # type: ignore[type-arg]
    matchings: tuple,  # type: ignore[type-arg]
    scratch: tuple,  # type: ignore[type-arg]
    wants: tuple,  # type: ignore[type-arg]
    events: tuple,  # type: ignore[type-arg]
    out: tuple,  # type: ignore[type-arg]
    state: np.ndarray,
    num_chunks: int,
    rarest: bool,
    compare_all_up_to: int,
    index_offset: int,
    max_hops: int,
    ports: int,
    mt: np.ndarray,
    counters: np.ndarray,
) -> bool:
    """:func:`run_fabric_spread`'s event loop, instant by instant, with ``state`` its
    counters; True when it stopped because the next instant might not fit (events
    pending, or transfers written, as many as every link sending over the longest path)."""
    (link_src, link_dst, link_time, has_routes, first_ptr, first_links, inbr_ptr, inbrs,
     rivals_ptr, rivals, slow_in_ptr, slow_in, rival_slot, dag_of_link, dag_node_ptr,
     dag_nodes, matching_of_link, source_node) = topo  # fmt: skip
    (holds, taken, copies, free_at, arrived_by, held, gained, none_since, looking_again,
     covers, watch, watch_head, outstanding) = spread  # fmt: skip
    start_holds, flight_chunk, flight_row, flight_start, overtaken, late, landed = flights
    (matching_free, first_uplink, last_uplink, next_uplink, member_link, member_by,
     member_own, tight_ptr, tight_pos, tight_cover, tight_node, owner, visited, search,
     work_link, work_pos, work_cover, work_by, cover_at, matched, choices) = matchings  # fmt: skip
    own, own_held, _, _, own_last_word = owned
    (marked, candidates, touched, is_touched, pool, rival_cap, rival_src, only_within,
     path) = scratch  # fmt: skip
    stamp, arrival, came_link, came_pred, stack, dest_pos, dest_cover = scan_scratch
    _, dag_edge_ptr, dag_edge_link, dag_edge_pred, _, _, _ = fabric_tables
    _, _, closed, waiting, _, _, _, relay, nothing, _, _, want_bits = wants
    partial = _relaying(wants)
    ev_times, ev_rows = events
    out_chunk, out_link, out_start, out_end, out_dep, sender_of = out
    num_links = link_src.shape[0]
    ev_size, seq, remaining = state[_EV_SIZE], state[_SEQ], state[_REMAINING]
    count, decision, visit = state[_COUNT], state[_DECISION], state[_VISIT]
    dropped = state[_DROPPED]
    while ev_size > 0 and remaining > 0:
        events_short, rows_short = _short_of_room(
            ev_size, ev_times.shape[0], count, out_chunk.shape[0], num_links, max_hops
        )
        if events_short or rows_short:
            break
        now = ev_times[0]
        num_candidates = 0
        num_touched = 0
        num_landed = 0
        while ev_size > 0 and ev_times[0] == now:
            kind, a, b = _event_pop(ev_times, ev_rows, ev_size)
            ev_size -= 1
            if kind == LOOK_AGAIN:
                looking_again[b] = False
                kind = LINK_FREE
            if kind == LINK_FREE:
                if not marked[b]:
                    marked[b] = True
                    candidates[num_candidates] = b
                    num_candidates += 1
                continue
            if kind == AVAILABLE:
                node, chunk = b, a
                _claim(node, chunk, taken, closed, waiting)
                if own_last_word[node] >= 0:  # it sends own chunks first
                    own[node, chunk >> 6] |= _ONE << np.uint64(chunk & 63)
                    own_held[node] += 1
                _cover_gain(node, chunk, covers, watch, watch_head)
            else:
                outstanding[sender_of[a]] -= 1
                num_touched = touch(sender_of[a], is_touched, touched, num_touched)
                last = out_link[a]
                if flight_row[last] == a:
                    flight_chunk[last] = -1
                    if overtaken[last]:  # bound below, with the others landing now
                        landed[num_landed] = last
                        num_landed += 1
                        continue
                    flight_row[last] = -1
                node, chunk = link_dst[last], out_chunk[a]
                arrived_by[node, chunk] = a + index_offset
            if _hold(node, chunk, holds, gained, held):
                num_touched = touch(node, is_touched, touched, num_touched)
                wanted = not partial or want_bits[node, chunk >> 6] >> np.uint64(chunk & 63) & _ONE
                if source_node[chunk] != node and wanted:
                    remaining -= 1
        # Overtaken transfers landing now carry what their receivers still lack (rebind).
        sort_landed(landed, num_landed, flight_start)
        for i in range(num_landed):
            lk = landed[i]
            u, node, row = link_src[lk], link_dst[lk], flight_row[lk]
            overtaken[lk], flight_row[lk] = False, -1
            chunk = pick_chunk(start_holds, rival_slot[lk], node, closed, node, holds, inbr_ptr,
                               inbrs, copies, rarest, compare_all_up_to, pool, mt,
                               counters)  # fmt: skip
            out_chunk[row] = chunk
            if chunk < 0:
                dropped += 1
                continue
            out_dep[row] = -2 - chunk if source_node[chunk] == u else arrived_by[u, chunk]
            arrived_by[node, chunk] = row + index_offset
            _claim(node, chunk, taken, closed, waiting)
            _cover_gain(node, chunk, covers, watch, watch_head)
            copies[chunk] += 1
            _hold(node, chunk, holds, gained, held)
            num_touched = touch(node, is_touched, touched, num_touched)
            remaining -= 1
        if remaining == 0:
            break
        for i in range(num_touched):
            node = touched[i]
            is_touched[node] = False
            for j in range(first_ptr[node], first_ptr[node + 1]):
                link = first_links[j]
                if not marked[link]:
                    marked[link] = True
                    candidates[num_candidates] = link
                    num_candidates += 1
        heapsort(candidates, num_candidates)
        order = candidates
        kept = 0
        for i in range(num_candidates):
            marked[order[i]] = False
            if free_at[order[i]] <= now:
                order[kept] = order[i]
                kept += 1
        shuffle(order, kept, mt, counters)
        for i in range(kept):  # each matching group's free uplinks, in order
            link = order[i]
            matching = matching_of_link[link]
            if matching >= 0:
                if matching_free[matching] == 0:
                    first_uplink[matching] = link
                else:
                    next_uplink[last_uplink[matching]] = link
                last_uplink[matching] = link
                next_uplink[link] = -1
                matching_free[matching] += 1

        for i in range(kept):
            # The link alone, or where the first of several free uplinks of one
            # matching group comes, all of those, matched with distinct destinations first
            # (the reference's match_uplinks): work_pos is the DAG position of an uplink's
            # matched destination (-1: none; WAIT: left unmatched), work_cover its cover.
            link = order[i]
            matching = matching_of_link[link]
            if not has_routes[link] or (matching >= 0 and matching_free[matching] < 0):
                continue
            work_link[0], work_pos[0], num_work = link, -1, 1
            if matching >= 0 and matching_free[matching] > 1:
                num_members = 0
                lk = first_uplink[matching]
                while lk >= 0:
                    ties, sends_own = 0, False
                    if not ports or outstanding[link_src[lk]] < ports:
                        ties, decision, sends_own = _soonest_takers(
                            lk, link_src[lk], now, decision, fabric_tables, covers, group_tables,
                            holds, held, gained, none_since, owned,
                            free_at, scan_scratch, wants,
                        )  # fmt: skip
                    first = tight_ptr[num_members]
                    base = dag_node_ptr[dag_of_link[lk]]
                    _ties_by_id(ties, dest_pos, dest_cover, cover_at)
                    for r in range(ties):
                        tight_pos[first + r] = dest_pos[r]
                        tight_cover[first + r] = dest_cover[r]
                        tight_node[first + r] = dag_nodes[base + dest_pos[r]]
                    member_link[num_members] = lk
                    member_by[num_members] = arrival[dest_pos[0]] if ties else 0.0
                    member_own[num_members] = sends_own
                    num_members += 1
                    tight_ptr[num_members] = first + ties
                    lk = next_uplink[lk]
                num_work, visit = match_destinations(
                    num_members, member_link, member_by, member_own, tight_ptr, tight_node,
                    tight_pos, tight_cover, link_src, holds, own, covers, owner, visited, visit,
                    search, work_link, work_pos, work_cover, work_by, matched, choices, wants,
                    mt, counters,
                )  # fmt: skip
                matching_free[matching] = -1
            wake = -1.0  # when an unmatched uplink looks again: the first matched one frees
            for w in range(num_work):
                link = work_link[w]
                if work_pos[w] == WAIT:
                    if wake < 0:
                        wake = np.inf
                        for x in range(w):  # the matched uplinks come first
                            wake = min(wake, free_at[work_link[x]])
                        wake = now if w == 0 else wake
                    if wake > now:
                        ev_size, seq = _look_again(
                            link, wake, looking_again, ev_times, ev_rows, ev_size, seq
                        )
                        continue
                u = link_src[link]
                if ports and outstanding[u] >= ports:
                    continue
                dag = dag_of_link[link]
                chosen_chunk, hops, v, overtaking = -1, 0, -1, False
                if dag < 0:
                    v = link_dst[link]
                    overtakable = not ports and slow_in_ptr[v] < slow_in_ptr[v + 1]
                    may_overtake = overtakable and find_overtakes(
                        link, now, slow_in_ptr, slow_in, link_src, link_dst, link_time, free_at,
                        flight_chunk, overtaken, rival_slot, start_holds, holds, taken, closed,
                        late,
                    )  # fmt: skip
                    if may_overtake and partial:  # v still does not want what it does not want
                        for wd in range(late.shape[0]):
                            closed[v, wd] |= late[wd] & ~want_bits[v, wd]
                    again = -1.0
                    if (
                        not ports
                        and rivals_ptr[link] < rivals_ptr[link + 1]
                        and sends_some(u, v, holds, closed)
                    ):
                        again = leave_to_rivals(link, now, rivals_ptr, rivals, link_src, link_dst,
                                                link_time, free_at, holds, closed, num_chunks,
                                                rival_cap, rival_src, only_within)  # fmt: skip
                    if again < 0:
                        chosen_chunk = pick_chunk(holds, u, v, closed, v, holds, inbr_ptr, inbrs,
                                                  copies, rarest, compare_all_up_to, pool, mt,
                                                  counters)  # fmt: skip
                        if (
                            chosen_chunk < 0
                            and partial
                            and _relays(link, u, v, holds, taken, wants)
                        ):
                            chosen_chunk = pick_chunk(relay, 0, v, nothing, 0, holds, inbr_ptr,
                                                      inbrs, copies, rarest, compare_all_up_to,
                                                      pool, mt, counters)  # fmt: skip
                    if may_overtake:
                        overtaking = settle_overtakes(v, chosen_chunk, late, slow_in_ptr, slow_in,
                                                      flight_chunk, overtaken, taken,
                                                      closed)  # fmt: skip
                    if again >= 0:
                        ev_size, seq = _look_again(
                            link, again, looking_again, ev_times, ev_rows, ev_size, seq
                        )
                        continue
                    path[0] = link
                    hops = 1
                else:
                    # Of the destinations that take a chunk, one that the chunk reaches soonest
                    # (ties: the reference's draw among them, in id order); a destination the
                    # matching of its group's uplinks gave (work_pos) if it still takes one
                    # by then (work_by).
                    base = dag_node_ptr[dag]
                    best_p, best_cover = -1, -1
                    forced = work_pos[w]
                    sends_own = forced >= 0 and _sends_own(
                        link, u, owned, holds, covers, fabric_tables, group_tables, wants
                    )
                    sent = own if sends_own else holds
                    if forced >= 0 and _takes(sent, u, dag_nodes[base + forced], work_cover[w],
                                              holds, covers, wants):  # fmt: skip
                        decision = _new_decision(link, now, decision, stamp, arrival, came_pred,
                                                 free_at, link_time)  # fmt: skip
                        _arrive(forced, base, decision, stamp, arrival, came_link, came_pred, stack,
                                dag_edge_ptr, dag_edge_link, dag_edge_pred, free_at,
                                link_time)  # fmt: skip
                        if arrival[forced] <= work_by[w]:
                            best_p, best_cover = forced, work_cover[w]
                    if best_p < 0:
                        ties, decision, sends_own = _soonest_takers(
                            link, u, now, decision, fabric_tables, covers, group_tables,
                            holds, held, gained, none_since, owned,
                            free_at, scan_scratch, wants,
                        )  # fmt: skip
                        if ties:  # the reference draws among them in id order
                            pick = 0
                            if ties > 1:
                                _ties_by_id(ties, dest_pos, dest_cover, cover_at)
                                pick = randbelow(ties, mt, counters)
                            best_p, best_cover = dest_pos[pick], dest_cover[pick]
                    if best_p >= 0:
                        v = dag_nodes[base + best_p]
                        sent = own if sends_own else holds
                        if partial:  # what v takes, left in relay
                            _takes(sent, u, v, best_cover, holds, covers, wants)
                            chosen_chunk = pick_chunk(relay, 0, v, nothing, 0, holds, inbr_ptr,
                                                      inbrs, copies, rarest, compare_all_up_to,
                                                      pool, mt, counters)  # fmt: skip
                        else:
                            chosen_chunk = pick_chunk(sent, u, v, covers, best_cover, holds,
                                                      inbr_ptr, inbrs, copies, rarest,
                                                      compare_all_up_to, pool, mt,
                                                      counters)  # fmt: skip
                        hops = 0
                        at = best_p
                        while at > 0:
                            path[hops] = came_link[at]
                            hops += 1
                            at = came_pred[at]
                        path[hops] = link
                        hops += 1
                        for h in range(hops // 2):  # first hop first
                            path[h], path[hops - 1 - h] = path[hops - 1 - h], path[h]
                if chosen_chunk < 0:
                    continue
                # Send it (the reference's _send): book every hop, the first frees the link.
                chunk = chosen_chunk
                dep = -2 - chunk if source_node[chunk] == u else arrived_by[u, chunk]
                ready = now
                for h in range(hops):
                    lk = path[h]
                    start = max(ready, free_at[lk])
                    ready = start + link_time[lk]
                    free_at[lk] = ready
                    if h == 0:
                        _event_push(ev_times, ev_rows, ev_size, seq, ready, LINK_FREE, -1, lk)
                        ev_size += 1
                        seq += 1
                    out_chunk[count], out_link[count] = chunk, lk
                    out_start[count], out_end[count], out_dep[count] = start, ready, dep
                    dep = count + index_offset
                    count += 1
                _event_push(ev_times, ev_rows, ev_size, seq, ready, ARRIVED, count - 1, v)
                ev_size += 1
                seq += 1
                sender_of[count - 1] = u
                outstanding[u] += 1
                _claim(v, chunk, taken, closed, waiting)
                _cover_gain(v, chunk, covers, watch, watch_head)
                if not overtaking:  # else the overtaken copy's count stands for this one
                    copies[chunk] += 1
                if hops == 1 and rival_slot[link] >= 0:  # faster links may overtake it
                    flight_chunk[link], flight_row[link], flight_start[link] = chunk, count - 1, now
                    for wd in range(holds.shape[1]):  # (a row copy: no slices here)
                        start_holds[rival_slot[link], wd] = holds[u, wd]
        for i in range(kept):
            if matching_of_link[order[i]] >= 0:
                matching_free[matching_of_link[order[i]]] = 0
    state[_EV_SIZE], state[_SEQ], state[_REMAINING] = ev_size, seq, remaining
    state[_COUNT], state[_DECISION], state[_VISIT] = count, decision, visit
    state[_DROPPED] = dropped
    return ev_size > 0 and remaining > 0


@njit(cache=True)
def _most_hops(
    dag_node_ptr: np.ndarray, dag_edge_ptr: np.ndarray, dag_edge_pred: np.ndarray, biggest_dag: int
) -> int:
    """The most links a path through a fabric DAG takes, the uplink into it included
    (``biggest_dag``: the most positions of one DAG)."""
    depth = np.zeros(biggest_dag, np.int64)
    most = 1
    for d in range(dag_node_ptr.shape[0] - 1):  # one DAG at a time: a row per position
        base = dag_node_ptr[d]
        for p in range(1, dag_node_ptr[d + 1] - base):
            depth[p] = 0
            for e in range(dag_edge_ptr[base + p], dag_edge_ptr[base + p + 1]):
                depth[p] = max(depth[p], depth[dag_edge_pred[e]] + 1)
            most = max(most, depth[p] + 1)
    return most


@njit(cache=True)
def dependency_lists(
    dep: np.ndarray, source_deps_ptr: np.ndarray, source_deps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The spread's dependencies as CSR (``deps_ptr``, ``deps``): ``dep[i]`` itself, or
    for a first hop from its source (``dep[i] = -2 - chunk``) the chunk's own
    ``source_deps`` (none where the chunk starts there). In two passes over the
    transfers, where NumPy made five temporary columns (38M rows at 4096 GPUs)."""
    count = dep.shape[0]
    ptr = huge(np.empty(count + 1, np.int64))
    ptr[0] = 0
    for i in range(count):
        c = -2 - dep[i]
        ptr[i + 1] = ptr[i] + (source_deps_ptr[c + 1] - source_deps_ptr[c] if c >= 0 else 1)
    deps = huge(np.empty(ptr[count], np.int64))
    for i in range(count):
        c = -2 - dep[i]
        if c < 0:
            deps[ptr[i]] = dep[i]
        else:
            deps[ptr[i] : ptr[i + 1]] = source_deps[source_deps_ptr[c] : source_deps_ptr[c + 1]]
    return ptr, deps


@njit(cache=True)
def _without_dropped(
    out_chunk: np.ndarray,
    out_link: np.ndarray,
    out_start: np.ndarray,
    out_end: np.ndarray,
    out_dep: np.ndarray,
    count: int,
    index_offset: int,
) -> int:
    """Close the gaps of dropped transfers (chunk -1) in place; the new count.

    Nothing depends on a dropped transfer; the dependencies on the others are renumbered.
    """
    new_index = np.empty(count, np.int64)
    kept = 0
    for i in range(count):
        new_index[i] = kept
        if out_chunk[i] < 0:
            continue
        dep = out_dep[i]
        if dep >= index_offset:
            dep = new_index[dep - index_offset] + index_offset
        out_chunk[kept], out_link[kept], out_dep[kept] = out_chunk[i], out_link[i], dep
        out_start[kept], out_end[kept] = out_start[i], out_end[i]
        kept += 1
    return kept


@njit(cache=True)
def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` copied into a new array of ``size`` rows (on huge pages, when large)."""
    grown = huge(np.empty((size,) + array.shape[1:], array.dtype))
    grown[: array.shape[0]] = array
    return grown


# ---------------------------------------------------------------- distances between NPUs
@njit(cache=True, nogil=True)
def nearest_first(
    into_ptr: np.ndarray, into_src: np.ndarray, into_us: np.ndarray, num_npus: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per NPU, the other NPUs by distance to it (CSR, nearest first, ties by id).

    Distances as the reference's ``_distances_to`` computes them (Dijkstra
    over the links into each node, ``into_*`` per node: source and time):
    Dijkstra's result is the fixpoint of ``d(x) = min over links x -> y of
    d(y) + cost``, so any order of relaxing gives the same floats.
    """
    num_nodes = into_ptr.shape[0] - 1
    ptr = np.zeros(num_nodes + 1, np.int64)
    nodes = np.empty(0, np.int64)
    dists = np.empty(0)
    used = 0
    dist = np.full(num_nodes, np.inf)
    settled = np.zeros(num_nodes, np.bool_)
    heap_d = np.empty(into_src.shape[0] + 1)
    heap_n = np.empty(into_src.shape[0] + 1, np.int64)
    size = np.zeros(NUM_COUNTERS, np.int64)  # size[C_HEAP]: the heap's size
    for target in range(num_npus):
        dist[:] = np.inf
        settled[:] = False
        dist[target] = 0.0
        heap_push(heap_d, heap_n, size, 0.0, target)
        while size[C_HEAP] > 0:
            d = heap_d[0]
            node = heap_pop(heap_d, heap_n, size)
            if settled[node]:
                continue
            settled[node] = True
            for k in range(into_ptr[node], into_ptr[node + 1]):
                prev = into_src[k]
                if d + into_us[k] < dist[prev]:
                    dist[prev] = d + into_us[k]
                    heap_push(heap_d, heap_n, size, dist[prev], prev)
        reached = np.nonzero(settled[:num_npus])[0]
        reached = reached[reached != target]
        order = reached[np.argsort(dist[reached], kind="mergesort")]
        if used + order.shape[0] > nodes.shape[0]:
            nodes = _grown(nodes, 2 * (used + order.shape[0]))
            dists = _grown(dists, 2 * (used + order.shape[0]))
        nodes[used : used + order.shape[0]] = order
        dists[used : used + order.shape[0]] = dist[order]
        used += order.shape[0]
        ptr[target + 1] = order.shape[0]
    return np.cumsum(ptr), nodes[:used], dists[:used]


# ---------------------------------------------------------------- shortest paths into the fabric
@njit(cache=True, nogil=True)
def fabric_dags(
    out_ptr: np.ndarray,
    out_links: np.ndarray,
    link_dst: np.ndarray,
    cost_ps: np.ndarray,
    link_time: np.ndarray,
    num_npus: int,
    entries: np.ndarray,
):  # -> node_ptr, nodes, first_npu, edge_ptr, edge_link, edge_pred, path_us, length_ps
    """:meth:`tacos.synthesizer.routes.Fabric.paths_from` of every switch in ``entries``, flattened.

    Per entry (CSR ``node_ptr``): its DAG's nodes (switches in the order
    Dijkstra settles them, then NPUs by id), the position of its first NPU,
    per node the ``(link, predecessor position)`` edges ending a shortest path
    there (CSR ``edge_ptr`` over all nodes, by link id) and ``path_us`` along
    the lowest-id edges, and ``length_ps``: shortest lengths in whole
    picoseconds (``cost_ps``), the unit paths are compared in.
    """
    num_nodes = out_ptr.shape[0] - 1
    length = np.full(num_nodes, -1, np.int64)
    position = np.full(num_nodes, -1, np.int64)
    settled = np.zeros(num_nodes, np.bool_)
    heap_t = np.empty(out_links.shape[0] + 1)
    heap_k = np.empty(out_links.shape[0] + 1, np.int64)
    counters = np.zeros(NUM_COUNTERS, np.int64)
    order = np.empty(num_nodes, np.int64)
    into = np.zeros(num_nodes, np.int64)  # per position: how many edges end there
    node_ptr = np.zeros(entries.shape[0] + 1, np.int64)
    first_npu = np.empty(entries.shape[0], np.int64)
    # Node, link and position ids fit 32 bits (a DAG spans the cluster); at 4096 GPUs these
    # are 34M rows each, walked at random by the kernel: half the bytes, fewer misses.
    nodes = np.empty(0, np.int32)
    path_us = np.empty(0)
    length_ps = np.empty(0, np.int64)
    edge_ptr = np.zeros(1, np.int64)
    edge_link = np.empty(0, np.int32)
    edge_pred = np.empty(0, np.int32)
    num_edges = 0
    for d in range(entries.shape[0]):
        entry = entries[d]
        length[entry] = 0
        heap_push(heap_t, heap_k, counters, 0.0, entry)
        size = 0
        while counters[C_HEAP] > 0:
            node = heap_pop(heap_t, heap_k, counters)
            if settled[node]:
                continue
            settled[node] = True
            order[size] = node
            size += 1
            for k in range(out_ptr[node], out_ptr[node + 1]):
                lk = out_links[k]
                nxt = link_dst[lk]
                here = length[node] + cost_ps[lk]
                if nxt >= num_npus and (length[nxt] < 0 or here < length[nxt]):
                    length[nxt] = here
                    heap_push(heap_t, heap_k, counters, float(here), nxt)
        switches = size
        for i in range(switches):
            node = order[i]
            for k in range(out_ptr[node], out_ptr[node + 1]):
                lk = out_links[k]
                nxt = link_dst[lk]
                if nxt < num_npus:
                    if length[nxt] < 0:
                        order[size] = nxt
                        size += 1
                    if length[nxt] < 0 or length[node] + cost_ps[lk] < length[nxt]:
                        length[nxt] = length[node] + cost_ps[lk]
        order[switches:size] = np.sort(order[switches:size])
        for i in range(size):
            position[order[i]] = i
        # Edges ending a shortest path at each node but the entry, grouped by node, by link:
        # counted per node, placed, then each node's few sorted by link.
        found = 0
        for i in range(switches):
            node = order[i]
            for k in range(out_ptr[node], out_ptr[node + 1]):
                lk = out_links[k]
                at = position[link_dst[lk]]
                if at > 0 and length[node] + cost_ps[lk] == length[link_dst[lk]]:
                    into[at] += 1
                    found += 1
        base = node_ptr[d]
        node_ptr[d + 1] = base + size
        first_npu[d] = switches
        if base + size > nodes.shape[0]:
            nodes = _grown(nodes, 2 * (base + size))
            path_us = _grown(path_us, 2 * (base + size))
            length_ps = _grown(length_ps, 2 * (base + size))
            edge_ptr = _grown(edge_ptr, 2 * (base + size) + 1)
        if num_edges + found > edge_link.shape[0]:
            edge_link = _grown(edge_link, 2 * (num_edges + found))
            edge_pred = _grown(edge_pred, 2 * (num_edges + found))
        nodes[base : base + size] = order[:size]
        length_ps[base : base + size] = length[order[:size]]
        filled = num_edges
        for i in range(size):  # the entry (position 0) has no edges
            edge_ptr[base + i] = filled
            filled += into[i]
            into[i] = edge_ptr[base + i]  # from now on: where its next edge goes
        for i in range(switches):
            node = order[i]
            for k in range(out_ptr[node], out_ptr[node + 1]):
                lk = out_links[k]
                at = position[link_dst[lk]]
                if at > 0 and length[node] + cost_ps[lk] == length[link_dst[lk]]:
                    e = into[at]
                    while e > edge_ptr[base + at] and edge_link[e - 1] > lk:
                        edge_link[e], edge_pred[e] = edge_link[e - 1], edge_pred[e - 1]
                        e -= 1
                    edge_link[e], edge_pred[e] = lk, i
                    into[at] += 1
        path_us[base] = 0.0
        for i in range(1, size):
            e = edge_ptr[base + i]
            path_us[base + i] = path_us[base + edge_pred[e]] + link_time[edge_link[e]]
        num_edges = filled
        edge_ptr[base + size] = num_edges
        for i in range(size):
            node = order[i]
            length[node] = -1
            position[node] = -1
            settled[node] = False
            into[i] = 0
    total = node_ptr[-1]
    return (node_ptr, nodes[:total], first_npu, edge_ptr[: total + 1], edge_link[:num_edges],
            edge_pred[:num_edges], path_us[:total], length_ps[:total])  # fmt: skip


@njit(cache=True)
def links_with_routes(
    out_ptr: np.ndarray,
    out_links: np.ndarray,
    link_dst: np.ndarray,
    cost_ps: np.ndarray,
    num_npus: int,
    dag_of_link: np.ndarray,
    node_ptr: np.ndarray,
    nodes: np.ndarray,
    first_npu: np.ndarray,
    length_ps: np.ndarray,
) -> np.ndarray:
    """Per link, whether it is the first link of a route (``routes_from``'s routes).

    A link between NPUs always is; a link into a switch is when it starts the
    fastest path (ties to the first such link of its NPU) to some other NPU.
    """
    has_routes = np.zeros(link_dst.shape[0], np.bool_)
    best_ps = np.full(num_npus, -1, np.int64)
    best_link = np.full(num_npus, -1, np.int64)
    for u in range(num_npus):
        for k in range(out_ptr[u], out_ptr[u + 1]):
            lk = out_links[k]
            dag = dag_of_link[lk]
            if dag < 0:
                has_routes[lk] = link_dst[lk] < num_npus
                continue
            for i in range(node_ptr[dag] + first_npu[dag], node_ptr[dag + 1]):
                v = nodes[i]
                here = cost_ps[lk] + length_ps[i]
                if v != u and (best_ps[v] < 0 or here < best_ps[v]):
                    best_ps[v], best_link[v] = here, lk
        for k in range(out_ptr[u], out_ptr[u + 1]):
            dag = dag_of_link[out_links[k]]
            if dag < 0:
                continue
            for i in range(node_ptr[dag] + first_npu[dag], node_ptr[dag + 1]):
                v = nodes[i]
                if best_link[v] >= 0:
                    has_routes[best_link[v]] = True
                    best_ps[v], best_link[v] = -1, -1
    return has_routes
