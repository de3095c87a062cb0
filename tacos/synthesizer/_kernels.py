"""Numba kernels of the fast greedy engine: bit-matrix state, Python's RNG, the event loop.

Everything here runs compiled (``numba.njit``, nopython). The Python side
(:mod:`tacos.synthesizer.fast`) owns the arrays and calls :func:`run_spread`
repeatedly; each call returns when the spread is done or its output buffers
are nearly full, so huge schedules can be streamed block by block.

Exactness is the design constraint: the kernel makes the same decisions as
:func:`tacos.synthesizer.greedy.greedy_spread` for the same seed, so it draws
from a bit-for-bit copy of CPython's Mersenne Twister (``random.Random``:
``getrandbits`` for ``k <= 32`` bits is one 32-bit output shifted right,
``_randbelow`` rejects draws ``>= n``, ``shuffle`` is Fisher-Yates from the
end) and consumes it in the same order as the reference does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir
from llvmlite.binding import llvm_version_info
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from tacos.synthesizer.greedy import MAX_RIVALS, SOONER

# Status codes returned by run_spread.
DONE, BUFFER_FULL, STUCK = 0, 1, 2
# Chunk policies, as in tacos.synthesizer.greedy.
RAREST, RANDOM = 0, 1
# Slots of the int64 "counters" array shared between calls.
C_REMAINING, C_OUT, C_HEAP, C_SOURCE, C_MT_POS, C_DELIVERED, C_EVENTS, C_LATE = range(8)
C_ROWS, C_REBOUND = 8, 9  # rows written by earlier calls; rebinds written by this one
NUM_COUNTERS = 10

MT_WORDS = 624
CACHE_LINE = 64  # bytes
_MT_N, _MT_M = MT_WORDS, 397
_MASK32 = 0xFFFFFFFF
_ONE = np.uint64(1)


def _llvm_bit_op(name: str):  # type: ignore[no-untyped-def]
    """An intrinsic calling the LLVM bit-count instruction ``name`` on a uint64."""

    @intrinsic
    def bit_op(typingctx, value):  # type: ignore[no-untyped-def]
        if not (isinstance(value, types.Integer) and value.bitwidth == 64):
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            (arg,) = args
            i64 = ir.IntType(64)
            if name == "llvm.ctpop.i64":
                fnty = ir.FunctionType(i64, [i64])
                fn = cgutils.get_or_insert_function(builder.module, fnty, name)
                return builder.call(fn, [arg])
            # cttz takes an "is zero poison" flag; callers never pass zero.
            fnty = ir.FunctionType(i64, [i64, ir.IntType(1)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, name)
            return builder.call(fn, [arg, ir.Constant(ir.IntType(1), 1)])

        return types.int64(types.uint64), codegen

    return bit_op


popcount = _llvm_bit_op("llvm.ctpop.i64")
"""Number of set bits of a uint64 (one POPCNT instruction)."""
lowest_bit = _llvm_bit_op("llvm.cttz.i64")
"""Index of the lowest set bit of a non-zero uint64 (one TZCNT instruction)."""


def _prefetch(typingctx, array, row, column):  # type: ignore[no-untyped-def]
    """Ask the CPU to start loading the cache line of ``array[row, column]`` (a 2-D array).

    The engine is bound by memory latency once its bit matrices outgrow the
    cache; the lines of work it knows it will do next are requested ahead,
    so their misses overlap instead of queueing one after another.
    """
    if not (isinstance(array, types.Array) and array.ndim == 2):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array_type = signature.args[0]
        data = context.make_array(array_type)(context, builder, value=args[0])
        index = [
            context.cast(builder, value, value_type, types.intp)
            for value, value_type in zip(args[1:], signature.args[1:], strict=True)
        ]
        pointer = cgutils.get_item_pointer(context, builder, array_type, data, index)
        i8_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8_pointer, i32, i32, i32])
        # The intrinsic's name carries its pointer type: "p0" since LLVM 15 made
        # pointers opaque, "p0i8" before (numba < 0.61).
        mangled = "p0" if llvm_version_info >= (15,) else "p0i8"
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.prefetch.{mangled}")
        # read, keep in all cache levels, data cache
        builder.call(fn, [builder.bitcast(pointer, i8_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, row, column), codegen


prefetch: Any = intrinsic(_prefetch)


@njit(cache=True, inline="always")
def nth_bit(bits: np.uint64, r: int) -> int:
    """Index of the ``r``-th lowest set bit of ``bits`` (which has more than ``r``).

    A binary search on popcounts of the lower half: six steps whatever ``r``.
    """
    position = 0
    width = 32
    while width:
        lower = bits & ((_ONE << np.uint64(width)) - _ONE)
        in_lower = popcount(lower)
        if r < in_lower:
            bits = lower
        else:
            r -= in_lower
            bits >>= np.uint64(width)
            position += width
        width >>= 1
    return position


# ---------------------------------------------------------------- CPython's MT19937
@njit(cache=True)
def _mt_twist(mt: np.ndarray) -> None:
    for i in range(_MT_N):
        y = (mt[i] & 0x80000000) | (mt[(i + 1) % _MT_N] & 0x7FFFFFFF)
        value = mt[(i + _MT_M) % _MT_N] ^ (y >> 1)
        if y & 1:
            value ^= 0x9908B0DF
        mt[i] = value


@njit(cache=True, inline="always")
def mt_next32(mt: np.ndarray, counters: np.ndarray) -> int:
    """The next 32-bit output of CPython's ``genrand_uint32`` (state in int64 words)."""
    if counters[C_MT_POS] >= _MT_N:
        _mt_twist(mt)
        counters[C_MT_POS] = 0
    y = mt[counters[C_MT_POS]]
    counters[C_MT_POS] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y & _MASK32


@njit(cache=True, inline="always")
def randbelow(n: int, mt: np.ndarray, counters: np.ndarray) -> int:
    """CPython's ``Random._randbelow_with_getrandbits(n)`` for ``0 < n < 2**32``."""
    k = 0
    while (n >> k) != 0:
        k += 1
    r = mt_next32(mt, counters) >> (32 - k)
    while r >= n:
        r = mt_next32(mt, counters) >> (32 - k)
    return r


@njit(cache=True)
def shuffle(items: np.ndarray, count: int, mt: np.ndarray, counters: np.ndarray) -> None:
    """CPython's ``Random.shuffle`` of ``items[:count]``."""
    for i in range(count - 1, 0, -1):
        j = randbelow(i + 1, mt, counters)
        items[i], items[j] = items[j], items[i]


@njit(cache=True, inline="always")
def _sift_down(items: np.ndarray, root: int, count: int) -> None:
    value = items[root]
    while True:
        child = 2 * root + 1
        if child >= count:
            break
        if child + 1 < count and items[child + 1] > items[child]:
            child += 1
        if items[child] <= value:
            break
        items[root] = items[child]
        root = child
    items[root] = value


@njit(cache=True)
def heapsort(items: np.ndarray, count: int) -> None:
    """Sort ``items[:count]`` in place, without allocating (the event loop runs without NRT)."""
    for root in range(count // 2 - 1, -1, -1):
        _sift_down(items, root, count)
    for end in range(count - 1, 0, -1):
        items[0], items[end] = items[end], items[0]
        _sift_down(items, 0, end)


# ---------------------------------------------------------------- event heap
@njit(cache=True, inline="always")
def heap_push(times: np.ndarray, keys: np.ndarray, counters: np.ndarray, t: float, k: int) -> None:
    """Push ``(t, k)`` on the binary min-heap in ``times``/``keys`` (ties by key)."""
    i = counters[C_HEAP]
    counters[C_HEAP] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if times[parent] < t or (times[parent] == t and keys[parent] <= k):
            break
        times[i] = times[parent]
        keys[i] = keys[parent]
        i = parent
    times[i] = t
    keys[i] = k


@njit(cache=True, inline="always")
def heap_pop(times: np.ndarray, keys: np.ndarray, counters: np.ndarray) -> int:
    """Remove the smallest entry and return its key."""
    top = keys[0]
    n = counters[C_HEAP] - 1
    counters[C_HEAP] = n
    t, k = times[n], keys[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and (
            times[child + 1] < times[child]
            or (times[child + 1] == times[child] and keys[child + 1] < keys[child])
        ):
            child += 1
        if t < times[child] or (t == times[child] and k <= keys[child]):
            break
        times[i] = times[child]
        keys[i] = keys[child]
        i = child
    times[i] = t
    keys[i] = k
    return top


@njit(cache=True, inline="always")
def segment_push(heap: np.ndarray, base: int, sizes: np.ndarray, key: int, value: int) -> None:
    """Put ``value`` on the min-heap of ``key``: ``heap[base : base + sizes[key]]``, one of
    many heaps kept in segments of one array (per link, per NPU)."""
    pos = sizes[key]
    sizes[key] += 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if heap[base + parent] <= value:
            break
        heap[base + pos] = heap[base + parent]
        pos = parent
    heap[base + pos] = value


@njit(cache=True, inline="always")
def segment_pop(heap: np.ndarray, base: int, sizes: np.ndarray, key: int) -> int:
    """Take the lowest value off the min-heap of ``key`` (:func:`segment_push`)."""
    top = heap[base]
    sizes[key] -= 1
    last, n, pos = heap[base + sizes[key]], sizes[key], 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and heap[base + child + 1] < heap[base + child]:
            child += 1
        if heap[base + child] >= last:
            break
        heap[base + pos] = heap[base + child]
        pos = child
    if n:
        heap[base + pos] = last
    return top


# ---------------------------------------------------------------- eligibility counts
# A link u -> v may send the chunks of ``holds[u] & ~taken[v]``. Computing that
# set's size for every link at every event costs O(chunks / 64) per link; instead
# each link keeps how many chunks it may send per block of BLOCK words
# (``block_count``, one short row per link), updated when u gains a chunk or v
# claims one. A pick reads that row plus one block of the two nodes' rows. The
# in- and out-link lists carry each link's far end (``in_srcs``, ``out_dsts``)
# so that an update reads nothing per link but its counts.
BLOCK = 8


@njit(cache=True, inline="always")
def _sendable(block_count: np.ndarray, link: int) -> int:
    """How many chunks ``link`` may send: its row of block counts, summed."""
    total = 0
    for block in range(block_count.shape[1]):
        total += block_count[link, block]
    return total


@njit(cache=True, inline="always")
def gain(
    node: int,
    chunk: int,
    holds: np.ndarray,
    taken: np.ndarray,
    out_ptr: np.ndarray,
    out_links: np.ndarray,
    out_dsts: np.ndarray,
    block_count: np.ndarray,
) -> None:
    """``node`` now holds ``chunk``: out-links to nodes lacking it may send it."""
    w, bit = chunk >> 6, _ONE << np.uint64(chunk & 63)
    holds[node, w] |= bit
    for j in range(out_ptr[node], out_ptr[node + 1]):
        link = out_links[j]
        if not taken[out_dsts[j], w] & bit:
            block_count[link, w // BLOCK] += 1


@njit(cache=True, inline="always")
def touch(node: int, is_touched: np.ndarray, touched: np.ndarray, num_touched: int) -> int:
    """Note ``node`` as touched by this event (its links become candidates); the new count."""
    if not is_touched[node]:
        is_touched[node] = True
        touched[num_touched] = node
        num_touched += 1
    return num_touched


@njit(cache=True, inline="always")
def prefetch_arrival(
    link: int,
    flight_chunk: np.ndarray,
    link_dst: np.ndarray,
    holds: np.ndarray,
    taken: np.ndarray,
    out_ptr: np.ndarray,
    out_dsts: np.ndarray,
    out_links: np.ndarray,
    block_count: np.ndarray,
) -> None:
    """Start loading the lines :func:`gain` will touch when ``link``'s transfer lands."""
    if link < 0 or flight_chunk[link] < 0:
        return
    node, w = link_dst[link], flight_chunk[link] >> 6
    prefetch(holds, node, w)
    for j in range(out_ptr[node], out_ptr[node + 1]):
        prefetch(taken, out_dsts[j], w)
        prefetch(block_count, out_links[j], w // BLOCK)


@njit(cache=True, inline="always")
def claim(
    node: int,
    chunk: int,
    holds: np.ndarray,
    taken: np.ndarray,
    in_ptr: np.ndarray,
    in_links: np.ndarray,
    in_srcs: np.ndarray,
    block_count: np.ndarray,
) -> None:
    """``node`` holds or receives ``chunk`` (it did not before): no in-link may send it."""
    w, bit = chunk >> 6, _ONE << np.uint64(chunk & 63)
    taken[node, w] |= bit
    for j in range(in_ptr[node], in_ptr[node + 1]):
        link = in_links[j]
        if holds[in_srcs[j], w] & bit:
            block_count[link, w // BLOCK] -= 1


# ---------------------------------------------------------------- chunk choice
# A receiver claims its chunk as soon as a link is matched (:func:`claim`), so a
# link matched later in the same event already sees it taken.
@njit(cache=True, inline="always")
def _find_member(
    r: int,
    link: int,
    u: int,
    v: int,
    holds: np.ndarray,
    taken: np.ndarray,
    block_count: np.ndarray,
    in_ptr: np.ndarray,
    in_links: np.ndarray,
    in_srcs: np.ndarray,
) -> tuple[int, np.uint64, int]:
    """The word of the ``r``-th eligible chunk (lowest first), its eligible bits, the rank in it.

    Once the block is known, the lines the rest of the decision reads (the
    in-neighbours' words, ``u`` among them, and ``v``'s in-link counts, which
    the claim updates) are requested together, so their misses overlap.
    """
    block = 0
    while True:
        here = block_count[link, block]
        if r < here:
            break
        r -= here
        block += 1
    w = block * BLOCK
    prefetch(taken, v, w)
    for j in range(in_ptr[v], in_ptr[v + 1]):
        prefetch(holds, in_srcs[j], w)
        prefetch(block_count, in_links[j], block)
    while True:
        bits = holds[u, w] & ~taken[v, w]
        here = popcount(bits)
        if r < here:
            return w, bits, r
        r -= here
        w += 1


@njit(cache=True, inline="always")
def _pick_random(
    link: int,
    u: int,
    v: int,
    holds: np.ndarray,
    taken: np.ndarray,
    block_count: np.ndarray,
    in_ptr: np.ndarray,
    in_links: np.ndarray,
    in_srcs: np.ndarray,
    mt: np.ndarray,
    counters: np.ndarray,
) -> int:
    """Plain TACOS: a uniformly random eligible chunk (the r-th set bit, lowest first)."""
    size = _sendable(block_count, link)
    if size == 0:
        return -1
    r = randbelow(size, mt, counters)
    w, bits, r = _find_member(r, link, u, v, holds, taken, block_count, in_ptr, in_links, in_srcs)
    return w * 64 + nth_bit(bits, r)


@njit(cache=True, inline="always")
def _holders(inbr_ptr: np.ndarray, inbrs: np.ndarray, holds: np.ndarray, v: int, chunk: int) -> int:
    """How many in-neighbours of ``v`` hold ``chunk``."""
    w, bit = chunk >> 6, np.uint64(chunk & 63)
    h = 0
    for j in range(inbr_ptr[v], inbr_ptr[v + 1]):
        if (holds[inbrs[j], w] >> bit) & _ONE:
            h += 1
    return h


@njit(cache=True, inline="always")
def _fewest_holders(
    bits: np.uint64,
    w: int,
    v: int,
    inbr_ptr: np.ndarray,
    inbrs: np.ndarray,
    holds: np.ndarray,
    planes: np.ndarray,
) -> np.uint64:
    """The chunks of ``bits`` (in word ``w``) that fewest in-neighbours of ``v`` hold.

    The in-neighbours' words are added up bit-sliced (``planes[p]``: bit p of
    each chunk's count), then the lowest count is found from the top plane
    down: a few word operations per neighbour, none per chunk.
    """
    num_planes = 0
    for j in range(inbr_ptr[v], inbr_ptr[v + 1]):
        carry = holds[inbrs[j], w] & bits
        p = 0
        while carry:
            if p == num_planes:
                planes[p] = np.uint64(0)
                num_planes += 1
            overflow = planes[p] & carry
            planes[p] ^= carry
            carry = overflow
            p += 1
    for p in range(num_planes - 1, -1, -1):
        fewer = bits & ~planes[p]
        if fewer:
            bits = fewer
    return bits


@njit(cache=True, inline="always")
def list_members(bits: np.uint64, w: int, pool: np.ndarray, k: int) -> int:
    """Append the chunks of word ``w``'s ``bits`` to ``pool[k:]``, lowest first; the new k."""
    while bits:
        pool[k] = w * 64 + lowest_bit(bits)
        k += 1
        bits &= bits - _ONE
    return k


@njit(cache=True, inline="always")
def _pick_rarest(
    link: int,
    u: int,
    v: int,
    inbr_ptr: np.ndarray,
    inbrs: np.ndarray,
    copies: np.ndarray,
    holds: np.ndarray,
    taken: np.ndarray,
    block_count: np.ndarray,
    in_ptr: np.ndarray,
    in_links: np.ndarray,
    in_srcs: np.ndarray,
    compare_all_up_to: int,
    pool: np.ndarray,
    planes: np.ndarray,
    mt: np.ndarray,
    counters: np.ndarray,
) -> int:
    """The best eligible chunk by (in-neighbours of ``v`` holding it, copies), as the reference.

    Up to ``compare_all_up_to`` eligible chunks are all compared; from more,
    those in the word of one drawn uniformly (its 64-chunk neighbourhood),
    of which :func:`_fewest_holders` keeps the fewest-holders ones in a few
    word operations. Ties at random, lowest chunk first.
    """
    size = _sendable(block_count, link)
    if size == 0:
        return -1
    k = 0
    if size <= compare_all_up_to:
        for block in range(block_count.shape[1]):
            if block_count[link, block] == 0:
                continue
            for w in range(block * BLOCK, min(holds.shape[1], (block + 1) * BLOCK)):
                k = list_members(holds[u, w] & ~taken[v, w], w, pool, k)
    else:
        r = randbelow(size, mt, counters)
        w, bits, _ = _find_member(
            r, link, u, v, holds, taken, block_count, in_ptr, in_links, in_srcs
        )
        bits = _fewest_holders(bits, w, v, inbr_ptr, inbrs, holds, planes)
        k = list_members(bits, w, pool, 0)
    return _rarest_of(pool, k, v, inbr_ptr, inbrs, holds, copies, mt, counters)


@njit(cache=True, inline="always")
def _rarest_of(
    pool: np.ndarray,
    k: int,
    v: int,
    inbr_ptr: np.ndarray,
    inbrs: np.ndarray,
    holds: np.ndarray,
    copies: np.ndarray,
    mt: np.ndarray,
    counters: np.ndarray,
) -> int:
    """Of the chunks ``pool[:k]``, one held by fewest in-neighbours of ``v``, then with
    fewest copies; ties at random, in pool order."""
    best_key, ties = 1 << 62, 0
    for i in range(k):
        key = _holders(inbr_ptr, inbrs, holds, v, pool[i]) * (1 << 32) + copies[pool[i]]
        if key < best_key:
            best_key, ties = key, 0
        if key == best_key:
            pool[ties] = pool[i]
            ties += 1
    return pool[randbelow(ties, mt, counters)] if ties > 1 else pool[0]


# ---------------------------------------------------------------- faster links
@njit(cache=True)
def leave_to_rivals(
    link: int,
    now: float,
    rivals_ptr: np.ndarray,
    rivals: np.ndarray,
    link_src: np.ndarray,
    link_dst: np.ndarray,
    link_time: np.ndarray,
    free_at: np.ndarray,
    holds: np.ndarray,
    taken: np.ndarray,
    num_chunks: int,
    rival_cap: np.ndarray,
    rival_src: np.ndarray,
    only_within: np.ndarray,
) -> float:
    """The reference's ``_left_to_rivals`` test for a free direct link with something to send.

    When the link's rivals can bring its receiver ``v`` everything it lacks
    strictly before this link's transfer would arrive, the time to look again
    (the first rival arrival counted on); else -1. ``taken[v]`` must hold every
    chunk ``v`` does not want (what it has, receives or is the source of).
    Scratch: ``rival_cap``, ``rival_src`` (``MAX_RIVALS``), ``only_within``
    (``2**MAX_RIVALS``). Links busy for as long as a transfer takes (the paper's
    link model, the fast engine's scope).
    """
    v = link_dst[link]
    words = holds.shape[1]
    horizon = now + link_time[link]
    k, can_send, first_arrival = 0, 0, np.inf
    for j in range(rivals_ptr[link], rivals_ptr[link + 1]):
        rival = rivals[j]
        arrival = max(now, free_at[rival]) + link_time[rival]
        if arrival >= horizon:
            continue
        sender = link_src[rival]
        have = 0
        for w in range(words):
            have += popcount(holds[sender, w] & ~taken[v, w])
        if have == 0:
            continue
        if k == MAX_RIVALS:
            return -1.0
        rival_cap[k] = min(int(math.ceil((horizon - arrival) / link_time[rival])), have)
        rival_src[k] = sender
        can_send += rival_cap[k]
        first_arrival = min(first_arrival, arrival)
        k += 1
    lacking = num_chunks
    for w in range(words):
        lacking -= popcount(taken[v, w])
    if can_send < lacking:
        return -1.0
    # Hall's condition, as rivals_deliver_all: chunks counted by which rivals hold them.
    subsets = 1 << k
    for q in range(subsets):
        only_within[q] = 0
    for w in range(words):
        bits = ~taken[v, w]
        while bits:
            bit = lowest_bit(bits)
            if w * 64 + bit >= num_chunks:
                break
            bits &= bits - _ONE
            q = 0
            for i in range(k):
                if (holds[rival_src[i], w] >> np.uint64(bit)) & _ONE:
                    q |= 1 << i
            only_within[q] += 1
    for i in range(k):
        for q in range(subsets):
            if q >> i & 1:
                only_within[q] += only_within[q ^ (1 << i)]
    for q in range(subsets):
        within = 0
        for i in range(k):
            if q >> i & 1:
                within += rival_cap[i]
        if only_within[q] > within:
            return -1.0
    return first_arrival


# ---------------------------------------------------------------- explicit chunk choice
@njit(cache=True, inline="always")
def sends_some(u: int, v: int, holds: np.ndarray, taken: np.ndarray) -> bool:
    """Whether ``u`` holds a chunk ``v`` has not taken."""
    lacks = np.uint64(0)
    for w in range(holds.shape[1]):
        lacks |= holds[u, w] & ~taken[v, w]
    return lacks != 0


@njit(cache=True, inline="always")
def lacking_word(sources: np.ndarray, s: int, rows: np.ndarray, row: int, w: int) -> np.uint64:
    """Word ``w`` of the chunks ``sources[s]`` has and ``rows[row]`` lacks."""
    return sources[s, w] & ~rows[row, w]


@njit(cache=True)
def pick_chunk(
    sources: np.ndarray,
    s: int,
    v: int,
    rows: np.ndarray,
    row: int,
    holds: np.ndarray,
    inbr_ptr: np.ndarray,
    inbrs: np.ndarray,
    copies: np.ndarray,
    rarest: bool,
    compare_all_up_to: int,
    pool: np.ndarray,
    mt: np.ndarray,
    counters: np.ndarray,
) -> int:
    """The reference's ``_choose`` for receiver ``v`` among the chunks of ``sources[s]``
    that ``rows[row]`` lacks (every chunk ``v`` lacks is wanted): -1 for none.

    ``sources[s]``: what the sender holds (``holds[u]``), or held when a transfer
    started; ``rows[row]``: what ``v`` has taken, or with a path through
    switches, what its cover has. Unlike :func:`_pick_rarest` it reads the bit
    sets themselves, not a link's counts, so it serves any candidate set.
    """
    words = holds.shape[1]
    count = 0
    for w in range(words):
        count += popcount(lacking_word(sources, s, rows, row, w))
    if count == 0:
        return -1
    k = 0
    if not rarest or count > compare_all_up_to:
        r = randbelow(count, mt, counters)
        for w in range(words):
            bits = lacking_word(sources, s, rows, row, w)
            here = popcount(bits)
            if r < here:
                break
            r -= here
        if not rarest:
            return w * 64 + nth_bit(bits, r)
        k = list_members(bits, w, pool, 0)  # the eligible chunks of the drawn one's word
    else:
        for w in range(words):
            k = list_members(lacking_word(sources, s, rows, row, w), w, pool, k)
    return _rarest_of(pool, k, v, inbr_ptr, inbrs, holds, copies, mt, counters)


# ---------------------------------------------------------------- overtaking (late binding)
# The reference's overtaking (greedy.py, module docs): per receiver, its in-links
# that have faster rivals (``slow_in``) are the ones whose transfers can be
# overtaken; ``flight_chunk[l]`` is what such a link is bringing (-1: nothing),
# ``overtaken[l]`` whether a faster copy overtook it, ``flight_start[l]`` when it
# started, and ``start_holds[rival_slot[l]]`` what its sender held then.
@njit(cache=True)
def find_overtakes(
    link: int,
    now: float,
    slow_in_ptr: np.ndarray,
    slow_in: np.ndarray,
    link_src: np.ndarray,
    link_dst: np.ndarray,
    link_time: np.ndarray,
    free_at: np.ndarray,
    flight_chunk: np.ndarray,
    overtaken: np.ndarray,
    rival_slot: np.ndarray,
    start_holds: np.ndarray,
    holds: np.ndarray,
    taken: np.ndarray,
    closed: np.ndarray,
    late: np.ndarray,
) -> bool:
    """The reference's ``_overtakes``: clear them from ``taken`` of the receiver, note them.

    Sets ``late`` (zero on entry) to the chunks ``link`` would bring its
    receiver sooner than the slower transfers now bringing them (when ``link``
    has nothing else for the receiver, or the slower transfer's sender held
    something else the receiver wants and lacks when the transfer started), and removes
    them from the receiver's ``taken`` and ``closed`` rows (``closed``: what it has,
    receives or does not want; the caller puts back those it does not want), so that
    the chunk choice and :func:`leave_to_rivals` count them as lacking;
    :func:`settle_overtakes` puts them back. ``closed`` may be ``taken`` (every node
    wants every chunk). A slow link's transfer ends when the link frees (the fast
    engine's link model).
    """
    u, v = link_src[link], link_dst[link]
    arrival = now + link_time[link]
    idle = not sends_some(u, v, holds, taken)
    found = False
    for j in range(slow_in_ptr[v], slow_in_ptr[v + 1]):
        slow = slow_in[j]
        chunk = flight_chunk[slow]
        if chunk < 0 or overtaken[slow] or not arrival < free_at[slow] * SOONER:
            continue
        w, bit = chunk >> 6, _ONE << np.uint64(chunk & 63)
        if holds[u, w] & bit and (idle or sends_some(rival_slot[slow], v, start_holds, closed)):
            late[w] |= bit
            found = True
    for w in range(late.shape[0]):
        taken[v, w] &= ~late[w]
        closed[v, w] &= ~late[w]
    return found


@njit(cache=True)
def settle_overtakes(
    v: int,
    chosen: int,
    late: np.ndarray,
    slow_in_ptr: np.ndarray,
    slow_in: np.ndarray,
    flight_chunk: np.ndarray,
    overtaken: np.ndarray,
    taken: np.ndarray,
    closed: np.ndarray,
) -> bool:
    """Undo :func:`find_overtakes` (``late`` back to zero); whether ``chosen`` overtakes.

    If it does, the slower transfer bringing it is marked overtaken.
    """
    overtakes = chosen >= 0 and (late[chosen >> 6] >> np.uint64(chosen & 63)) & _ONE
    for w in range(late.shape[0]):
        taken[v, w] |= late[w]
        closed[v, w] |= late[w]
        late[w] = np.uint64(0)
    if overtakes:
        for j in range(slow_in_ptr[v], slow_in_ptr[v + 1]):
            slow = slow_in[j]
            if flight_chunk[slow] == chosen and not overtaken[slow]:
                overtaken[slow] = True
    return bool(overtakes)


@njit(cache=True)
def sort_landed(landed: np.ndarray, count: int, flight_start: np.ndarray) -> None:
    """Overtaken links whose transfers land together, by (start, link), as the reference
    rebinds them (few at a time: an insertion sort)."""
    for i in range(1, count):
        lk = landed[i]
        j = i - 1
        while j >= 0 and (
            flight_start[landed[j]] > flight_start[lk]
            or (flight_start[landed[j]] == flight_start[lk] and landed[j] > lk)
        ):
            landed[j + 1] = landed[j]
            j -= 1
        landed[j + 1] = lk


@njit(cache=True, inline="always")
def fewest_to_front(order: np.ndarray, i: int, count: int, block_count: np.ndarray) -> None:
    """Of the links ``order[i:count]``, move the one that may send the fewest chunks (the
    first of them on ties) to ``i``, the others keeping their order: the reference's
    fewest-first matching (``greedy._SpreadState.match_links``)."""
    fewest, fewest_count = i, _sendable(block_count, order[i])
    for j in range(i + 1, count):
        sendable = _sendable(block_count, order[j])
        if sendable < fewest_count:
            fewest, fewest_count = j, sendable
    link = order[fewest]
    for j in range(fewest, i, -1):
        order[j] = order[j - 1]
    order[i] = link


# ---------------------------------------------------------------- the event loop
# Compiled without numba's reference counting (NRT): the loop only indexes arrays
# its caller owns, and the counting it would do on every array handed to a
# helper is an atomic (locked) update, a full fence that also keeps the CPU from
# overlapping cache misses: without it, 0.74 -> 0.47 us per transfer at 16,384
# NPUs. Hence no slicing or numpy calls in here (they need NRT): see heapsort.
@njit(cache=True, _nrt=False)  # type: ignore[call-overload]  # _nrt: numba's own option
def run_spread(
    # topology (static)
    link_src: np.ndarray,
    link_dst: np.ndarray,
    link_time: np.ndarray,
    out_ptr: np.ndarray,
    out_links: np.ndarray,
    out_dsts: np.ndarray,
    in_ptr: np.ndarray,
    in_links: np.ndarray,
    in_srcs: np.ndarray,
    inbr_ptr: np.ndarray,
    inbrs: np.ndarray,
    rivals_ptr: np.ndarray,
    rivals: np.ndarray,
    slow_in_ptr: np.ndarray,
    slow_in: np.ndarray,
    rival_slot: np.ndarray,
    link_class: np.ndarray,
    class_time: np.ndarray,
    # sources, sorted by time (static)
    source_time: np.ndarray,
    source_node: np.ndarray,
    source_chunk: np.ndarray,
    policy: int,
    compare_all_up_to: int,
    arrival_lookahead: int,
    pick_lookahead: int,
    ports: int,
    fewest_first: bool,
    # state (kept between calls)
    holds: np.ndarray,
    taken: np.ndarray,
    block_count: np.ndarray,
    copies: np.ndarray,
    free_at: np.ndarray,
    flight_chunk: np.ndarray,
    heap_time: np.ndarray,
    heap_link: np.ndarray,
    next_in_group: np.ndarray,
    looking_again: np.ndarray,
    left_chunks: np.ndarray,
    flight_start: np.ndarray,
    flight_row: np.ndarray,
    overtaken: np.ndarray,
    start_holds: np.ndarray,
    outstanding: np.ndarray,
    mt: np.ndarray,
    counters: np.ndarray,
    # scratch
    marked: np.ndarray,
    candidates: np.ndarray,
    order: np.ndarray,
    sent: np.ndarray,
    touched: np.ndarray,
    is_touched: np.ndarray,
    class_head: np.ndarray,
    class_tail: np.ndarray,
    class_order: np.ndarray,
    pool: np.ndarray,
    planes: np.ndarray,
    rival_cap: np.ndarray,
    rival_src: np.ndarray,
    only_within: np.ndarray,
    late: np.ndarray,
    landed: np.ndarray,
    # output block
    out_chunk: np.ndarray,
    out_link: np.ndarray,
    out_start: np.ndarray,
    rebound_row: np.ndarray,
    rebound_chunk: np.ndarray,
) -> int:
    """Advance the greedy spread event by event until done, stuck, or the block is full.

    Mirrors ``greedy_spread``: pop every event at the next time (arrivals set
    ``holds``), then the candidate links (freed ones, and free out-links of
    nodes that gained a chunk, or whose transfer arrived) in id order,
    shuffled, each matched with one chunk. Transfers are written in (start,
    link) order, which is their order in the final schedule. A heap key
    ``num_links + link`` is the reference's ``_LOOK_AGAIN`` event of ``link``
    (see :func:`leave_to_rivals`); a smaller key heads a group of transfers.
    ``counters[C_LATE]`` counts transfers on links that left chunks to rivals
    since their last one: such a transfer may start later than its link and
    chunk allow, so the spread then needs the reference's re-timing. So does
    a rebound transfer (an overtaken one that lands carrying another chunk,
    see :func:`find_overtakes`), which it counts too: ``rebound_row`` and
    ``rebound_chunk`` say which row (counting the rows of earlier calls,
    ``counters[C_ROWS]``) now carries which chunk (-1: dropped).

    ``ports`` > 0 is the reference's ``sends_in_flight``: a node with that many
    transfers on their way (``outstanding``) sends nothing, and no link leaves
    chunks to rivals or is overtaken. ``fewest_first``: the candidates are matched
    fewest sendable chunks first, not in the shuffled order (:func:`fewest_to_front`).
    """
    num_links = link_src.shape[0]
    num_sources = source_time.shape[0]
    # no links with faster rivals (one speed), or a port limit: nothing is ever overtaken
    overtakable = slow_in.shape[0] > 0 and ports == 0
    capacity = out_chunk.shape[0]
    while True:
        if counters[C_REMAINING] == 0:
            return DONE
        heap_size = counters[C_HEAP]
        if heap_size == 0 and counters[C_SOURCE] == num_sources:
            return STUCK
        if max(counters[C_OUT], counters[C_REBOUND]) + num_links > capacity:
            return BUFFER_FULL
        now = np.inf
        if heap_size > 0:
            now = heap_time[0]
        if counters[C_SOURCE] < num_sources and source_time[counters[C_SOURCE]] < now:
            now = source_time[counters[C_SOURCE]]
        counters[C_EVENTS] += 1

        # Apply every event at `now`: freed links become candidates, arrivals land.
        num_candidates = 0
        num_touched = 0
        num_landed = 0
        delivered = 0
        link = -1
        scout = -1  # arrival_lookahead links ahead of `link` in its group
        while link >= 0 or (counters[C_HEAP] > 0 and heap_time[0] == now):
            steps = 1
            if link < 0:  # next group of links whose transfers end now
                link = heap_pop(heap_time, heap_link, counters)
                if link >= num_links:  # a link left its chunks to rivals: it looks again
                    link -= num_links
                    looking_again[link] = False
                    if free_at[link] <= now and not marked[link]:
                        marked[link] = True
                        candidates[num_candidates] = link
                        num_candidates += 1
                    link = -1
                    continue
                scout, steps = link, arrival_lookahead
            for _ in range(steps):
                if scout >= 0:
                    scout = next_in_group[scout]
                    prefetch_arrival(scout, flight_chunk, link_dst, holds, taken,
                                     out_ptr, out_dsts, out_links, block_count)  # fmt: skip
            following = next_in_group[link]
            if not marked[link]:
                marked[link] = True
                candidates[num_candidates] = link
                num_candidates += 1
            chunk = flight_chunk[link]
            if chunk < 0:
                link = following
                continue
            flight_chunk[link] = -1
            sender = link_src[link]  # the reference re-offers a sender's links on arrival
            outstanding[sender] -= 1
            num_touched = touch(sender, is_touched, touched, num_touched)
            if overtakable and overtaken[link]:  # bound below, with the others landing now
                landed[num_landed] = link
                num_landed += 1
                link = following
                continue
            node = link_dst[link]
            if not holds[node, chunk >> 6] & (_ONE << np.uint64(chunk & 63)):
                gain(node, chunk, holds, taken, out_ptr, out_links, out_dsts, block_count)
                delivered += 1
                num_touched = touch(node, is_touched, touched, num_touched)
            link = following
        while counters[C_SOURCE] < num_sources and source_time[counters[C_SOURCE]] == now:
            node = source_node[counters[C_SOURCE]]
            chunk = source_chunk[counters[C_SOURCE]]
            counters[C_SOURCE] += 1
            if not holds[node, chunk >> 6] & (_ONE << np.uint64(chunk & 63)):
                claim(node, chunk, holds, taken, in_ptr, in_links, in_srcs, block_count)
                gain(node, chunk, holds, taken, out_ptr, out_links, out_dsts, block_count)
                num_touched = touch(node, is_touched, touched, num_touched)
        # Overtaken transfers landing now carry what their receivers still lack (rebind).
        sort_landed(landed, num_landed, flight_start)
        for i in range(num_landed):
            link = landed[i]
            overtaken[link] = False
            node = link_dst[link]
            chunk = pick_chunk(start_holds, rival_slot[link], node, taken, node, holds, inbr_ptr,
                               inbrs, copies, policy == RAREST, compare_all_up_to, pool, mt,
                               counters)  # fmt: skip
            k = counters[C_REBOUND]
            counters[C_REBOUND] += 1
            counters[C_LATE] += 1
            rebound_row[k], rebound_chunk[k] = flight_row[link], chunk
            if chunk < 0:
                continue
            claim(node, chunk, holds, taken, in_ptr, in_links, in_srcs, block_count)
            gain(node, chunk, holds, taken, out_ptr, out_links, out_dsts, block_count)
            copies[chunk] += 1
            delivered += 1
            num_touched = touch(node, is_touched, touched, num_touched)
        counters[C_REMAINING] -= delivered
        counters[C_DELIVERED] += delivered
        if counters[C_REMAINING] == 0:
            for i in range(num_candidates):
                marked[candidates[i]] = False
            for i in range(num_touched):
                is_touched[touched[i]] = False
            return DONE

        # Only freed links and free out-links of nodes that gained can match anew.
        for i in range(num_touched):
            node = touched[i]
            is_touched[node] = False
            for j in range(out_ptr[node], out_ptr[node + 1]):
                link = out_links[j]
                if free_at[link] <= now and not marked[link]:
                    marked[link] = True
                    candidates[num_candidates] = link
                    num_candidates += 1
        if num_candidates * 16 < num_links:
            heapsort(candidates, num_candidates)
        else:
            num_candidates = 0
            for link in range(num_links):
                if marked[link]:
                    candidates[num_candidates] = link
                    num_candidates += 1
        for i in range(num_candidates):
            order[i] = candidates[i]
        shuffle(order, num_candidates, mt, counters)

        for i in range(num_candidates):
            if fewest_first:
                fewest_to_front(order, i, num_candidates, block_count)
            if i + pick_lookahead < num_candidates:
                ahead = order[i + pick_lookahead]
                for block in range(0, block_count.shape[1], CACHE_LINE // block_count.itemsize):
                    prefetch(block_count, ahead, block)
            link = order[i]
            u, v = link_src[link], link_dst[link]
            if ports and outstanding[u] >= ports:
                continue
            # With chunks to overtake, v's taken row is changed for this decision, so the
            # link's counts do not apply: the choice reads the bit sets (pick_chunk).
            may_overtake = overtakable and slow_in_ptr[v] < slow_in_ptr[v + 1] and find_overtakes(
                link, now, slow_in_ptr, slow_in, link_src, link_dst, link_time, free_at,
                flight_chunk, overtaken, rival_slot, start_holds, holds, taken, taken, late,
            )  # fmt: skip
            again = -1.0
            if (
                not ports
                and rivals_ptr[link] < rivals_ptr[link + 1]
                and (
                    sends_some(u, v, holds, taken)
                    if may_overtake
                    else _sendable(block_count, link) > 0
                )
            ):
                again = leave_to_rivals(link, now, rivals_ptr, rivals, link_src, link_dst,
                                        link_time, free_at, holds, taken, copies.shape[0],
                                        rival_cap, rival_src, only_within)  # fmt: skip
            chunk = -1
            if again < 0 and may_overtake:
                chunk = pick_chunk(holds, u, v, taken, v, holds, inbr_ptr, inbrs, copies,
                                   policy == RAREST, compare_all_up_to, pool, mt,
                                   counters)  # fmt: skip
            elif again < 0 and policy == RANDOM:
                chunk = _pick_random(link, u, v, holds, taken, block_count, in_ptr, in_links,
                                     in_srcs, mt, counters)  # fmt: skip
            elif again < 0:
                chunk = _pick_rarest(link, u, v, inbr_ptr, inbrs, copies, holds, taken, block_count,
                                     in_ptr, in_links, in_srcs, compare_all_up_to, pool, planes, mt,
                                     counters)  # fmt: skip
            overtaking = may_overtake and settle_overtakes(
                v, chunk, late, slow_in_ptr, slow_in, flight_chunk, overtaken, taken, taken
            )
            if again >= 0:
                left_chunks[link] = True
                if not looking_again[link]:
                    looking_again[link] = True
                    heap_push(heap_time, heap_link, counters, again, num_links + link)
                continue
            if chunk >= 0:
                if left_chunks[link]:
                    left_chunks[link] = False
                    counters[C_LATE] += 1
                sent[link] = chunk
                outstanding[u] += 1
                flight_chunk[link] = chunk  # now: a faster link may overtake it this event
                if overtakable and rival_slot[link] >= 0:
                    for w in range(holds.shape[1]):
                        start_holds[rival_slot[link], w] = holds[u, w]
                if not overtaking:  # else v has taken it, and the overtaken copy is counted
                    copies[chunk] += 1
                    claim(v, chunk, holds, taken, in_ptr, in_links, in_srcs, block_count)
                free_at[link] = now + link_time[link]

        # Emit this event's transfers in link order, their final (start, link) order.
        num_classes = 0
        for i in range(num_candidates):
            link = candidates[i]
            marked[link] = False
            chunk = sent[link]
            if chunk < 0:
                continue
            sent[link] = -1
            v = link_dst[link]
            k = counters[C_OUT]
            counters[C_OUT] += 1
            out_chunk[k] = chunk
            out_link[k] = link
            out_start[k] = now
            if overtakable and rival_slot[link] >= 0:  # faster links may overtake it
                flight_row[link], flight_start[link] = counters[C_ROWS] + k, now
            # Transfers on links of one duration class end together: one heap entry,
            # its links chained in link order.
            k = link_class[link]
            next_in_group[link] = -1
            if class_head[k] < 0:
                class_order[num_classes] = k
                num_classes += 1
                class_head[k] = link
            else:
                next_in_group[class_tail[k]] = link
            class_tail[k] = link
        for i in range(num_classes):
            k = class_order[i]
            heap_push(heap_time, heap_link, counters, now + class_time[k], class_head[k])
            class_head[k] = -1


# ---------------------------------------------------------------- transfers of a spread
@njit(cache=True)
def needed_rows(goal: np.ndarray, deps_ptr: np.ndarray, deps: np.ndarray) -> np.ndarray:
    """The reference's ``prune``: the rows that reach a ``goal`` or feed, through
    dependencies, one that does (dependencies come before their dependants)."""
    needed = goal.copy()
    for row in range(goal.shape[0] - 1, -1, -1):
        if needed[row]:
            for j in range(deps_ptr[row], deps_ptr[row + 1]):
                needed[deps[j]] = True
    return needed


@njit(cache=True)
def spread_columns(
    chunk: np.ndarray,
    link: np.ndarray,
    start: np.ndarray,
    link_src: np.ndarray,
    link_dst: np.ndarray,
    durations: np.ndarray,
    num_nodes: int,
    num_chunks: int,
    source_deps_ptr: np.ndarray,
    source_deps: np.ndarray,
    offset: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sender, receiver, end and dependencies (CSR) of a spread's transfers, in two passes.

    A transfer depends on the one that delivered its chunk to its sender
    (index + ``offset``), or, from the chunk's source, on the source's
    dependencies. Every (node, chunk) is delivered at most once, so a dense
    (node, chunk) index of deliveries answers every lookup. Transfers must be
    in start order (as the event loop makes them).
    """
    count = chunk.shape[0]
    src = np.empty(count, np.int64)
    dst = np.empty(count, np.int64)
    end = np.empty(count)
    dep = np.empty(count, np.int64)
    ptr = np.empty(count + 1, np.int64)
    ptr[0] = 0
    # A delivery always starts before the transfers that forward it, so one pass in
    # order finds every dependency already recorded.
    if count >= 2**31:
        raise ValueError("more than 2**31 transfers in one spread")
    delivered_by = np.full(num_nodes * num_chunks, -1, np.int32)  # half the cache misses
    for i in range(count):
        lk, c = link[i], chunk[i]
        src[i], dst[i] = link_src[lk], link_dst[lk]
        end[i] = start[i] + durations[lk]
        d = delivered_by[src[i] * num_chunks + c]
        delivered_by[dst[i] * num_chunks + c] = i
        dep[i] = d
        if d >= 0:
            ptr[i + 1] = ptr[i] + 1
        else:
            ptr[i + 1] = ptr[i] + source_deps_ptr[c + 1] - source_deps_ptr[c]
    deps = np.empty(ptr[count], np.int64)
    for i in range(count):
        if dep[i] >= 0:
            deps[ptr[i]] = dep[i] + offset
        else:
            first = source_deps_ptr[chunk[i]]
            for j in range(ptr[i + 1] - ptr[i]):
                deps[ptr[i] + j] = source_deps[first + j]
    return src, dst, end, ptr, deps


# ---------------------------------------------------------------- re-timing
@njit(cache=True)
def retime_in_order(
    link: np.ndarray, deps_ptr: np.ndarray, deps: np.ndarray, durations: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each transfer: after its link's previous transfer and its dependencies.

    ``link`` lists transfers in start order with dependencies first, as the
    replay of :mod:`tacos.simulate` takes them; without switches or port
    limits the replay reduces to this one pass.
    """
    count = link.shape[0]
    start = np.empty(count)
    end = np.empty(count)
    link_end = np.zeros(durations.shape[0])
    for i in range(count):
        s = link_end[link[i]]
        for j in range(deps_ptr[i], deps_ptr[i + 1]):
            d = deps[j]
            if d >= i:
                raise ValueError("a transfer depends on a later one")
            if end[d] > s:
                s = end[d]
        start[i] = s
        end[i] = s + durations[link[i]]
        link_end[link[i]] = end[i]
    return start, end
