"""The compiled replay: :mod:`tacos.simulate`'s default cost model, over millions of transfers.

:func:`replay` times transfers as :mod:`tacos.simulate` replays them: each
starts once its dependencies have ended and its link is idle; an NPU's link
runs its transfers in schedule order (by recorded start, then position), a
switch's link serves them in the order they became ready (ties by chunk,
then what the transfer is, then the link it came in on, then position). The
synthesizer re-times every schedule on a switched topology with it, as the
reference re-times with the Python replay.

Its data is laid out for the cache. At 4096 GPUs it walks 38M transfers in
time order, which is no order of their positions, so every transfer it
touches is a cache miss; what the event loop knows of one transfer sits in
one record (:data:`TRANSFER`), one miss where parallel columns cost one
each. It writes no column by position: it returns the transfers in the
order they start, with their starts, so the caller builds the re-timed
table in that order at once. On that All-Gather's 38M transfers the replay
went from 55.6 to 39.0 s (each in a fresh process).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos._pages import huge, huge_filled
from tacos.synthesizer._kernels import (
    C_HEAP,
    NUM_COUNTERS,
    heap_pop,
    heap_push,
    heapsort,
    segment_pop,
    segment_push,
)

TRANSFER = np.dtype(
    [
        ("ready", np.float64),  # when it joined its switch link's queue
        ("dependants", np.int64),  # where its dependants start in the list of them
        ("chunk", np.int64),
        ("link", np.int32),
        ("waiting", np.int32),  # its dependencies that have not ended
        ("came_in_on", np.int32),  # its first dependency's link (-1: none)
        ("num_dependants", np.int32),
        ("op", np.uint8),
        ("from_switch", np.bool_),
    ],
    align=True,
)
"""What the replay's event loop knows of one transfer, in 48 bytes."""


@njit(cache=True, inline="always")
def _first_listed(deps: np.ndarray, first: int, k: int) -> bool:
    """Whether ``deps[k]`` is listed first at ``k`` in a list from ``first`` (a
    dependency listed twice counts once)."""
    at = first
    while deps[at] != deps[k]:
        at += 1
    return at == k


@njit(cache=True)
def _records(
    link: np.ndarray,
    chunk: np.ndarray,
    op: np.ndarray,
    deps_ptr: np.ndarray,
    deps: np.ndarray,
    from_switch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each transfer's record, and the list of dependants the records point into.

    Almost half the transfers depend on one far away (the chunk's arrival at the
    sender), so each pass that follows dependencies misses the cache once per
    transfer: there are two, counting and filling.
    """
    count = link.shape[0]
    rec = huge(np.empty(count, TRANSFER))
    dependant_count = huge_filled(np.empty(count, np.int32), 0)
    for i in range(count):
        r = rec[i]
        r.ready, r.chunk, r.link, r.op = 0.0, chunk[i], link[i], op[i]
        r.from_switch, r.waiting, r.num_dependants, r.came_in_on = from_switch[i], 0, 0, -1
        for k in range(deps_ptr[i], deps_ptr[i + 1]):
            if _first_listed(deps, deps_ptr[i], k):
                r.waiting += 1
                dependant_count[deps[k]] += 1
        if from_switch[i] and deps_ptr[i + 1] > deps_ptr[i]:  # only a switch asks
            r.came_in_on = link[deps[deps_ptr[i]]]
    listed = 0
    for i in range(count):
        rec[i].dependants = listed
        listed += dependant_count[i]
    dependants = huge(np.empty(listed, np.int64))
    for i in range(count):
        for k in range(deps_ptr[i], deps_ptr[i + 1]):
            if _first_listed(deps, deps_ptr[i], k):
                r = rec[deps[k]]
                dependants[r.dependants + r.num_dependants] = i
                r.num_dependants += 1
    return rec, dependants


@njit(cache=True)
def replay(
    link: np.ndarray,
    chunk: np.ndarray,
    op: np.ndarray,
    deps_ptr: np.ndarray,
    deps: np.ndarray,
    recorded_start: np.ndarray,
    from_switch: np.ndarray,
    link_time: np.ndarray,
    ports: int,
    src: np.ndarray,
    into_switch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The transfers in the order they start when replayed, and their starts.

    The order is by (start, link, position); a transfer ends ``link_time``
    after its start. Fewer transfers than all come out when the schedule
    deadlocks.

    ``from_switch[i]``: transfer ``i`` leaves a switch (its link serves in
    order of readiness; an NPU's link in order of ``recorded_start``, then
    position). A transfer out of a switch has at most one dependency, whose
    link is what the switch knows it came in on.

    ``ports`` > 0 is the replay's ``sends_in_flight``: a transfer out of an NPU
    (``src``) that its link could start waits for a free port of that NPU
    (waiting ones start lowest position first); the port is held until the
    message's last hop (the first transfer not ``into_switch``) ends, and then
    goes at once to a waiting transfer whose link is free. The ends at one
    instant are taken in order of position, as the replay takes them (which
    end frees a port first decides who gets it; without ports the order of
    ends changes nothing).
    """
    count = link.shape[0]
    num_links = link_time.shape[0]
    rec, dependants = _records(link, chunk, op, deps_ptr, deps, from_switch)
    # Per link, one segment of `queue`: an NPU's link's transfers in their fixed
    # order, or a switch link's heap of ready transfers.
    per_link = np.zeros(num_links + 1, np.int64)
    for i in range(count):
        per_link[link[i] + 1] += 1
    segment = np.cumsum(per_link)
    queue = huge(np.empty(count, np.int64))
    placed = segment[:num_links].copy()
    for i in range(count):
        if not from_switch[i]:
            queue[placed[link[i]]] = i
            placed[link[i]] += 1
    fixed_end = placed
    for lk in range(num_links):  # by recorded start (a spread lists its first hops so)
        for k in range(segment[lk] + 1, fixed_end[lk]):
            if recorded_start[queue[k]] < recorded_start[queue[k - 1]]:
                fixed = queue[segment[lk] : fixed_end[lk]]
                fixed[:] = fixed[np.argsort(recorded_start[fixed], kind="mergesort")]
                break
    head = segment[:num_links].copy()  # next of the fixed order, or the heap's end
    idle = np.ones(num_links, np.bool_)
    # Running transfers of one duration end in the order they started: a queue per
    # duration (a ring with a slot per link of that duration, each with its end), and
    # a heap of the queues by their first end (a heap of every running transfer cost
    # a sixth).
    durations = np.unique(link_time)
    duration_of = np.searchsorted(durations, link_time)
    ring_ptr = np.zeros(durations.shape[0] + 1, np.int64)
    for lk in range(num_links):
        ring_ptr[duration_of[lk] + 1] += 1
    ring_ptr = np.cumsum(ring_ptr)
    ring = np.empty(num_links, np.int64)
    ring_end = np.empty(num_links)
    ring_first = np.zeros(durations.shape[0], np.int64)
    ring_len = np.zeros(durations.shape[0], np.int64)
    done_time = np.empty(durations.shape[0])
    done_ring = np.empty(durations.shape[0], np.int64)
    done = np.zeros(NUM_COUNTERS, np.int64)  # done[C_HEAP]: the heap's size
    rings = (ring, ring_end, ring_ptr, ring_first, ring_len, done_time, done_ring, done)
    started = huge(np.empty(count, np.int64))
    start = huge(np.empty(count))  # start[k]: when started[k] started
    by_link = (np.empty(num_links, np.int64), np.empty(num_links, np.int64))  # sort scratch
    to_try = np.zeros(num_links, np.bool_)
    tried = np.empty(num_links, np.int64)
    num_tried = 0
    port_npu, message_npu, port_ptr = _port_npus(
        count, ports, from_switch, src, into_switch, deps_ptr, deps
    )
    port_size = np.zeros(port_ptr.shape[0] - 1, np.int64)  # per NPU, its waiting heap's size
    port_heap = np.empty(port_ptr[-1], np.int64)
    in_port = np.zeros(count if ports else 0, np.bool_)  # waiting for a port
    outstanding = np.zeros(port_size.shape[0], np.int64)
    to_drain = np.zeros(port_size.shape[0], np.bool_)
    draining = np.empty(port_size.shape[0], np.int64)
    ending = np.empty(count if ports else 0, np.int64)  # the ends of one instant, by position
    ports_state = (port_ptr, port_heap, port_size, in_port, outstanding)
    for i in range(count):
        if rec[i].waiting == 0 and rec[i].from_switch:
            _enqueue(i, 0.0, rec, segment, head, queue)
    for lk in range(num_links):
        to_try[lk] = True
        tried[num_tried] = lk
        num_tried += 1
    now = 0.0
    num_started, first_at_now = 0, 0  # started[first_at_now:num_started] began at now
    while True:
        num_draining = 0
        for t in range(num_tried):
            lk = tried[t]
            to_try[lk] = False
            if not idle[lk]:
                continue
            i = -1
            if fixed_end[lk] > segment[lk]:  # an NPU's link
                if head[lk] < fixed_end[lk] and rec[queue[head[lk]]].waiting == 0:
                    i = queue[head[lk]]
                    if ports:  # it waits for a port of its NPU
                        npu = port_npu[i]
                        if not in_port[i]:
                            in_port[i] = True
                            segment_push(port_heap, port_ptr[npu], port_size, npu, i)
                        if not to_drain[npu]:
                            to_drain[npu] = True
                            draining[num_draining] = npu
                            num_draining += 1
                        continue
                    head[lk] += 1
            elif head[lk] > segment[lk]:
                i = _dequeue(lk, rec, segment, head, queue)
            if i < 0:
                continue
            num_started = _begin(i, now, rec, link_time, duration_of, idle, rings, started, start,
                                 num_started)  # fmt: skip
        for d in range(num_draining):
            to_drain[draining[d]] = False
            num_started = _drain(draining[d], ports, now, ports_state, head, idle, rec,
                                 link_time, duration_of, rings, started, start,
                                 num_started)  # fmt: skip
        num_tried = 0
        if done[C_HEAP] == 0 or done_time[0] != now:  # no more starts at now: by link
            by_link = _sort_by_link(started, first_at_now, num_started, rec, by_link)
            first_at_now = num_started
        if done[C_HEAP] == 0:
            break
        now = done_time[0]
        num_ending = 0
        while done[C_HEAP] > 0 and done_time[0] == now:
            d = heap_pop(done_time, done_ring, done)
            i = ring[ring_ptr[d] + ring_first[d]]
            ring_first[d] = (ring_first[d] + 1) % (ring_ptr[d + 1] - ring_ptr[d])
            ring_len[d] -= 1
            if ring_len[d] > 0:
                heap_push(done_time, done_ring, done, ring_end[ring_ptr[d] + ring_first[d]], d)
            if ports:
                ending[num_ending] = i
                num_ending += 1
                continue
            num_tried = _ended(i, now, rec, dependants, idle, to_try, tried, num_tried, segment,
                               head, queue)  # fmt: skip
        if num_ending:
            heapsort(ending, num_ending)
        for e in range(num_ending):
            i = ending[e]
            idle[rec[i].link] = True
            if message_npu[i] >= 0:  # its port is free: a waiting message takes it now
                outstanding[message_npu[i]] -= 1
                num_started = _drain(message_npu[i], ports, now, ports_state, head, idle, rec,
                                     link_time, duration_of, rings, started, start,
                                     num_started)  # fmt: skip
            num_tried = _ended(i, now, rec, dependants, idle, to_try, tried, num_tried, segment,
                               head, queue)  # fmt: skip
    return started[:num_started], start[:num_started]


@njit(cache=True, inline="always")
def _begin(i: int, now: float, rec: np.ndarray, link_time: np.ndarray, duration_of: np.ndarray,
           idle: np.ndarray, rings: tuple, started: np.ndarray, start: np.ndarray,
           num_started: int) -> int:  # type: ignore[type-arg]  # fmt: skip
    """Start transfer ``i`` now on its idle link; the new count of ``started``."""
    ring, ring_end, ring_ptr, ring_first, ring_len, done_time, done_ring, done = rings
    lk = rec[i].link
    idle[lk] = False
    end = now + link_time[lk]
    d = duration_of[lk]
    if ring_len[d] == 0:
        heap_push(done_time, done_ring, done, end, d)
    slot = ring_ptr[d] + (ring_first[d] + ring_len[d]) % (ring_ptr[d + 1] - ring_ptr[d])
    ring[slot], ring_end[slot] = i, end
    ring_len[d] += 1
    started[num_started], start[num_started] = i, now
    return num_started + 1


@njit(cache=True)
def _sort_by_link(started: np.ndarray, first: int, last: int, rec: np.ndarray,
                  scratch: tuple) -> tuple:  # type: ignore[type-arg]  # fmt: skip
    """Sort ``started[first:last]`` (transfers that started at one instant) by link,
    keeping their order on one link, without allocating but to grow ``scratch``;
    returns the (maybe grown) scratch."""
    span = last - first
    if span < 2:
        return scratch
    keys, items = scratch
    if span > keys.shape[0]:
        keys, items = np.empty(2 * span, np.int64), np.empty(2 * span, np.int64)
    for k in range(span):
        items[k] = started[first + k]
        keys[k] = rec[items[k]].link * span + k
    heapsort(keys, span)
    for k in range(span):
        started[first + k] = items[keys[k] % span]
    return keys, items


@njit(cache=True, inline="always")
def _ended(i: int, now: float, rec: np.ndarray, dependants: np.ndarray, idle: np.ndarray,
           to_try: np.ndarray, tried: np.ndarray, num_tried: int, segment: np.ndarray,
           head: np.ndarray, queue: np.ndarray) -> int:  # fmt: skip
    """Transfer ``i`` ended now: its link is idle and its dependants may be ready; the
    links to try are noted. Returns their new count."""
    lk = rec[i].link
    idle[lk] = True
    if not to_try[lk]:
        to_try[lk] = True
        tried[num_tried] = lk
        num_tried += 1
    first = rec[i].dependants
    for k in range(first, first + rec[i].num_dependants):
        j = dependants[k]
        rec[j].waiting -= 1
        if rec[j].waiting == 0:
            if rec[j].from_switch:
                _enqueue(j, now, rec, segment, head, queue)
            if not to_try[rec[j].link]:
                to_try[rec[j].link] = True
                tried[num_tried] = rec[j].link
                num_tried += 1
    return num_tried


@njit(cache=True)
def _port_npus(count: int, ports: int, from_switch: np.ndarray, src: np.ndarray,
               into_switch: np.ndarray, deps_ptr: np.ndarray,
               deps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per transfer, the NPU whose port it takes (out of an NPU; else -1) and, for a
    message's last hop, the NPU whose port it frees (else -1); the segments of the
    NPUs' waiting heaps (by NPU, as many places as the NPU sends). Empty without ports."""
    if not ports:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64)
    port_npu = np.where(from_switch, -1, src)
    message_npu = np.full(count, -1, np.int64)
    for i in range(count):
        if not into_switch[i]:
            first = i
            while from_switch[first]:  # back along the message to its first hop
                first = deps[deps_ptr[first]]
            message_npu[i] = src[first]
    sends = np.zeros(max(1, port_npu.max() + 1) if count else 1, np.int64)
    for i in range(count):
        if port_npu[i] >= 0:
            sends[port_npu[i]] += 1
    port_ptr = np.zeros(sends.shape[0] + 1, np.int64)
    port_ptr[1:] = np.cumsum(sends)
    return port_npu, message_npu, port_ptr


@njit(cache=True)
def _drain(npu: int, ports: int, now: float, ports_state: tuple, head: np.ndarray,
           idle: np.ndarray, rec: np.ndarray, link_time: np.ndarray, duration_of: np.ndarray,
           rings: tuple, started: np.ndarray, start: np.ndarray,
           num_started: int) -> int:  # type: ignore[type-arg]  # fmt: skip
    """The replay's ``drain_port``: while ``npu`` has a free port, its waiting transfers
    start, lowest position first, those whose link is idle (a waiting transfer is its
    link's next); the others wait on. Returns the new count of ``started``."""
    port_ptr, port_heap, port_size, in_port, outstanding = ports_state
    base, top = port_ptr[npu], port_ptr[npu + 1] - 1
    blocked = 0  # popped and put aside at the segment's end (heap + aside <= its room)
    while port_size[npu] > 0 and outstanding[npu] < ports:
        i = segment_pop(port_heap, base, port_size, npu)
        lk = rec[i].link
        if idle[lk]:
            in_port[i] = False
            outstanding[npu] += 1
            head[lk] += 1
            num_started = _begin(i, now, rec, link_time, duration_of, idle, rings, started,
                                 start, num_started)  # fmt: skip
        else:
            port_heap[top - blocked] = i
            blocked += 1
    for b in range(blocked):
        segment_push(port_heap, base, port_size, npu, port_heap[top - b])
    return num_started


@njit(cache=True, inline="always")
def _served_before(i: int, j: int, rec: np.ndarray) -> bool:
    """Whether a switch serves transfer ``i`` before ``j``: by readiness, then what it is."""
    a, b = rec[i], rec[j]
    if a.ready != b.ready:
        return a.ready < b.ready
    if a.chunk != b.chunk:
        return a.chunk < b.chunk
    if a.op != b.op:
        return a.op < b.op
    if a.came_in_on != b.came_in_on:
        return a.came_in_on < b.came_in_on
    return i < j


@njit(cache=True, inline="always")
def _enqueue(i: int, now: float, rec: np.ndarray, segment: np.ndarray, head: np.ndarray,
             queue: np.ndarray) -> None:  # fmt: skip
    """Put ready transfer ``i`` in its switch link's heap."""
    rec[i].ready = now
    lk = rec[i].link
    base = segment[lk]
    k = head[lk] - base
    head[lk] += 1
    while k > 0:
        parent = (k - 1) >> 1
        if _served_before(queue[base + parent], i, rec):
            break
        queue[base + k] = queue[base + parent]
        k = parent
    queue[base + k] = i


@njit(cache=True, inline="always")
def _dequeue(lk: int, rec: np.ndarray, segment: np.ndarray, head: np.ndarray,
             queue: np.ndarray) -> int:  # fmt: skip
    """Take the first-served transfer off switch link ``lk``'s heap."""
    base = segment[lk]
    top = queue[base]
    n = head[lk] - base - 1
    head[lk] -= 1
    last = queue[base + n]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= n:
            break
        if child + 1 < n and _served_before(queue[base + child + 1], queue[base + child], rec):
            child += 1
        if _served_before(last, queue[base + child], rec):
            break
        queue[base + k] = queue[base + child]
        k = child
    queue[base + k] = last
    return top
