"""The fast engine: the reference greedy, compiled, over bit matrices and columnar transfers.

Same seed, same schedule: :func:`fast_transfers` returns exactly the
transfers :func:`tacos.synthesizer.collectives.synthesize_transfers` returns
(as a :class:`~tacos.transfers.TransferTable`), and leaves the ``random.Random``
it was given in the same state. It makes the same decisions in the same
order, drawing from a copy of CPython's Mersenne Twister
(:mod:`tacos.synthesizer._kernels`); only the data structures differ:

* node state is two ``uint64`` bit matrices (``holds``: chunks a node has;
  ``taken``: has or is receiving), and every link counts the chunks it may
  send (``holds[u] & ~taken[v]``) per block of 512, updated when ``u`` gains
  a chunk or ``v`` claims one. A pick costs O(words / 8 + 8) (the link's row
  of counts, then one block of words), the "rarest" pick one word more per
  in-neighbour of ``v`` (bit-sliced counts, no per-chunk work);
* the "rarest" key is computed when picking, from the in-neighbours' rows of
  the picked chunk's word, which the receiver's claim reads right after
  (so the state is the two bit matrices, the counts and a copy counter);
* transfers come out of the event loop already in their final (start, link)
  order, so blocks can be written out as they are made (:func:`spread_blocks`)
  and dependencies are one lookup in a dense (node, chunk) index
  (:func:`spread_table`);
* past a few thousand NPUs the bit matrices outgrow the CPU cache and a
  decision mostly waits on memory, so rows start on cache lines, the event
  loop asks for the lines of its next arrivals and of a pick's in-neighbours
  before it needs them (``_kernels.prefetch``), and it is compiled without
  numba's reference counting (whose atomic updates would serialise the misses);
* pruning and re-timing, the passes the reference runs after the greedy, are
  no-ops on a spread (:func:`_spread` says why); the Reduce-Scatter's reversed
  spread is re-timed by one array pass (:func:`retime_npu_links`).

Scope: every collective, for one or several tenants, in the paper's link model
with free reductions, with or without a port limit (``sends_in_flight``: a
node with that many messages on their way sends nothing, and the re-timing
replays the ports, :func:`~.fast_fabric.replay_table`). Where every NPU wants
every chunk it lacks (All-Gather or Broadcast over all NPUs, and the
Reduce-Scatter, Reduce and All-Reduce built on them), relays (and the
reference's "brings closer" rule) never arise: topologies with switches take
:mod:`.fast_fabric` (the same greedy with paths through the fabric, re-timed
by a compiled replay), and the rest of this module serves NPU-only topologies
up to tens of thousands of NPUs. Elsewhere (tenants, a subset of ranks,
Gather, Scatter, All-to-All) :func:`_fabric_spread` runs the fabric kernel,
which relays over direct links and through switches, then the reference's
prune and re-timing passes. :func:`fast_unsupported` says why a problem is out
of scope; ``synthesize(engine="auto")`` then uses the reference.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Op
from tacos.synthesizer import _kernels as K
from tacos.synthesizer.arrays import RandomState, csr, link_endpoints, rival_arrays
from tacos.synthesizer.attempts import fastest_attempt, finish_us
from tacos.synthesizer.collectives import MIRRORS, Tenants
from tacos.synthesizer.fast_fabric import Wants, fabric_spread, replay_table
from tacos.synthesizer.greedy import (
    MAX_RIVALS,
    RAREST_COMPARE_ALL,
    ChunkPolicy,
    DeliveryCallback,
)
from tacos.synthesizer.ownership import collective_owners, owner_layouts
from tacos.synthesizer.routes import rarest_neighbours
from tacos.synthesizer.timing import shorten_tail
from tacos.topology import Topology
from tacos.transfers import OP_CODES, TransferTable

_REDUCE = OP_CODES.index(Op.REDUCE)
"""The ``op`` column's code of a reduction."""
BLOCK_TRANSFERS = 1 << 20
"""Transfers per output block of the event loop (a block is ~20 MiB of columns)."""
IN_MEMORY_PAIRS = 1 << 26
"""Largest nodes x chunks synthesized in memory: about one transfer per pair at ~60 bytes
each, so up to ~4 GiB of columns (an 8192-NPU All-Gather); beyond, stream (tacos.stream)."""
RELAY_TABLE_BYTES = 2**31
"""Most memory the relays' tables may take (:func:`relay_table_bytes`): 2048 GPUs with
switches need 1.0 GiB (dgx:256x8), a 16,384-NPU torus 2.1 GiB (too much)."""
ARRIVAL_LOOKAHEAD = PICK_LOOKAHEAD = 4
"""How far ahead the event loop requests the memory of the arrivals and picks it will
process next (see _kernels.prefetch): 4 measured 12% faster than none at 16,384 NPUs,
8 no better."""


def fast_unsupported(topology: Topology, collectives: Sequence[Collective]) -> str | None:
    """Why the fast engine cannot synthesize this problem, or None when it can: another
    cost model, too many chunks or links, or relays whose tables would not fit."""
    if not topology.cost.is_default:
        return f"it models the paper's links and free reductions, not {topology.cost.describe()}"
    num_chunks = sum(spec.num_chunks for spec in collectives)
    if num_chunks >= 2**31 or len(topology.links) >= 2**31:
        return "more than 2**31 chunks or links"
    ranks = sum(len(spec.ranks) for spec in collectives)
    if len(collectives) > 1 or ranks != topology.num_npus:
        needed = relay_table_bytes(topology)
        if needed > RELAY_TABLE_BYTES:
            return (
                f"relays among {topology.num_npus} NPUs need {needed / 2**30:.1f} GiB of "
                f"distance tables, more than {RELAY_TABLE_BYTES / 2**30:.0f} GiB"
            )
    return None


def relay_table_bytes(topology: Topology) -> int:
    """What the fast engine's relays keep (:mod:`._fabric_kernels`): NPU-to-NPU distances,
    and a bit per NPU for each direct link, or with switches for each pair of NPUs."""
    npus = topology.num_npus
    rows = npus * npus if topology.num_switches else len(topology.links)
    return npus * npus * 8 + rows * ((npus + 63) // 64) * 8


# ---------------------------------------------------------------- one greedy spread
@dataclass(frozen=True)
class Sources:
    """Where each chunk starts (one source per chunk), since when, made available by what.

    ``deps`` (CSR by chunk, ``deps_ptr``) are indices of earlier transfers, as
    :class:`tacos.synthesizer.greedy.ChunkSource` has them.
    """

    node: np.ndarray
    chunk: np.ndarray
    time: np.ndarray
    deps_ptr: np.ndarray
    deps: np.ndarray

    @classmethod
    def at_owners(cls, spec: Collective) -> Sources:
        """Every chunk on its owner at time 0 (All-Gather's precondition)."""
        return cls.at(collective_owners(spec))

    @classmethod
    def at(cls, owners: np.ndarray) -> Sources:
        """Chunk ``i`` on NPU ``owners[i]`` at time 0."""
        count = len(owners)
        empty = np.zeros(count + 1, np.int64)
        chunks = np.arange(count, dtype=np.int64)
        return cls(owners, chunks, np.zeros(count), empty, np.zeros(0, np.int64))


@dataclass
class Block:
    """Consecutive transfers of one spread, in (start, link) order (the final order).

    Each transfer's sender and receiver are its link's ends, it ends
    ``start + link time``, and it depends on the transfer that brought its
    chunk to the sender (:func:`spread_table` finds them), or on the source's
    dependencies.

    ``late``: how many of them went over a link that had left chunks to faster
    links (:func:`tacos.synthesizer._kernels.leave_to_rivals`) since its last
    transfer, plus how many overtaken transfers were rebound. Those may start
    later than their link and chunk allow, so a spread with any is re-timed,
    as the reference re-times every spread.

    ``rebound_row``/``rebound_chunk``: overtaken transfers (rows counted from the
    spread's first, so maybe of an earlier block) that landed during this
    block with another chunk (-1: dropped; see
    :func:`tacos.synthesizer._kernels.find_overtakes`).
    """

    chunk: np.ndarray
    link: np.ndarray
    start: np.ndarray
    late: int = 0
    rebound_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rebound_chunk: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def spread_blocks(
    topology: Topology,
    sources: Sources,
    num_chunks: int,
    chunk_bytes: int,
    rng: random.Random,
    policy: ChunkPolicy,
    *,
    link_free_at: np.ndarray | None = None,
    on_delivery: DeliveryCallback | None = None,
    sends_in_flight: int | None = None,
    fewest_first: bool = False,
) -> Iterator[Block]:
    """Run :func:`tacos.synthesizer.greedy.greedy_spread` compiled, yielding transfer blocks.

    Every node wants every chunk it does not start with. Blocks come as soon as
    they are full, so a caller may stream them to disk instead of keeping them.
    ``rng`` advances exactly as the reference advances it.
    """
    state = _SpreadKernel(
        topology, sources, num_chunks, chunk_bytes, rng, policy, link_free_at, sends_in_flight,
        fewest_first,
    )  # fmt: skip
    while True:
        status, block, delivered = state.run()
        if on_delivery and delivered:
            on_delivery(delivered)
        if len(block.chunk):
            yield block
        if status == K.DONE:
            state.random.save()
            return
        if status == K.STUCK:
            raise TacosError(
                f"topology {topology.name!r}: some chunk can never reach some node; "
                "check that the topology is strongly connected"
            )


class _SpreadKernel:
    """The arrays :func:`tacos.synthesizer._kernels.run_spread` works on, kept between calls."""

    def __init__(
        self,
        topology: Topology,
        sources: Sources,
        num_chunks: int,
        chunk_bytes: int,
        rng: random.Random,
        policy: ChunkPolicy,
        link_free_at: np.ndarray | None,
        sends_in_flight: int | None,
        fewest_first: bool,
    ) -> None:
        n, num_links = topology.num_nodes, len(topology.links)
        words = (num_chunks + 63) // 64
        blocks = max(1, (words + K.BLOCK - 1) // K.BLOCK)
        self.link_src, self.link_dst = link_endpoints(topology)
        self.link_time = np.asarray(topology.link_times_us(chunk_bytes), np.float64)
        self.out_ptr, self.out_links = csr(topology.out_links)
        self.in_ptr, self.in_links = csr(topology.in_links)
        self.out_dsts, self.in_srcs = self.link_dst[self.out_links], self.link_src[self.in_links]
        self.inbr_ptr, self.inbrs = csr(rarest_neighbours(topology))
        self.rivals_ptr, self.rivals, self.slow_in_ptr, self.slow_in, self.rival_slot = (
            rival_arrays(topology, self.link_time.tolist())
        )
        # Transfers started together on links of equal duration end together.
        class_time, self.link_class = np.unique(self.link_time, return_inverse=True)
        self.class_time = np.ascontiguousarray(class_time, np.float64)
        self.link_class = self.link_class.astype(np.int64)
        order = np.argsort(sources.time, kind="stable")
        self.source_time = np.ascontiguousarray(sources.time[order], np.float64)
        self.source_node = np.ascontiguousarray(sources.node[order], np.int64)
        self.source_chunk = np.ascontiguousarray(sources.chunk[order], np.int64)
        self.policy = K.RANDOM if policy == "random" else K.RAREST
        self.ports = sends_in_flight or 0  # 0: no port limit
        self.fewest_first = fewest_first
        self.outstanding = np.zeros(n, np.int64)  # per node, its transfers on their way

        # Rows padded to whole cache lines, so a block of a row is one line, not two.
        self.holds = _line_aligned_zeros(n, blocks * K.BLOCK, np.uint64)
        self.taken = _line_aligned_zeros(n, blocks * K.BLOCK, np.uint64)
        # A source's own chunk is taken from the start: nobody else holds it before it
        # does, so only the count of what a node lacks (leave_to_rivals) notices.
        np.bitwise_or.at(
            self.taken,
            (self.source_node, self.source_chunk >> 6),
            np.left_shift(np.uint64(1), (self.source_chunk & 63).astype(np.uint64)),
        )
        self.block_count = _line_aligned_zeros(num_links, blocks, np.uint16)  # <= 512 per block
        self.copies = np.bincount(sources.chunk, minlength=num_chunks).astype(np.int64)
        self.free_at = np.zeros(num_links)
        self.flight_chunk = np.full(num_links, -1, np.int64)
        # per link: a group of transfers it heads, and a _LOOK_AGAIN event
        self.heap_time = np.zeros(2 * num_links + 1)
        self.heap_link = np.zeros(2 * num_links + 1, np.int64)
        self.next_in_group = np.full(num_links, -1, np.int64)
        self.looking_again = np.zeros(num_links, np.bool_)
        self.left_chunks = np.zeros(num_links, np.bool_)
        # overtaking: per link with rivals, its transfer's start, row and sender's holdings then
        self.flight_start = np.zeros(num_links)
        self.flight_row = np.full(num_links, -1, np.int64)
        self.overtaken = np.zeros(num_links, np.bool_)
        self.random = RandomState(rng)
        self.mt, self.counters = self.random.mt, self.random.counters
        # The reference's `remaining`: every node wants every chunk it does not start with.
        held = np.unique(self.source_node * num_chunks + self.source_chunk).size
        self.counters[K.C_REMAINING] = n * num_chunks - held
        self.marked = np.zeros(num_links, np.bool_)
        self.candidates = np.zeros(num_links, np.int64)
        self.order = np.zeros(num_links, np.int64)
        self.sent = np.full(num_links, -1, np.int64)
        self.touched = np.zeros(n, np.int64)
        self.is_touched = np.zeros(n, np.bool_)
        self.class_head = np.full(len(self.class_time), -1, np.int64)
        self.class_tail = np.zeros(len(self.class_time), np.int64)
        self.class_order = np.zeros(len(self.class_time), np.int64)
        self.pool = np.zeros(max(64, RAREST_COMPARE_ALL), np.int64)
        self.planes = np.zeros(64, np.uint64)
        self.rival_cap = np.zeros(MAX_RIVALS, np.int64)
        self.rival_src = np.zeros(MAX_RIVALS, np.int64)
        self.only_within = np.zeros(1 << MAX_RIVALS, np.int64)
        slots = int((self.rival_slot >= 0).sum())
        self.start_holds = np.zeros((slots, self.holds.shape[1]), np.uint64)
        self.late = np.zeros(self.holds.shape[1], np.uint64)
        self.landed = np.zeros(num_links, np.int64)
        self.capacity = max(BLOCK_TRANSFERS, 2 * num_links)
        for link, free_at in enumerate(() if link_free_at is None else link_free_at.tolist()):
            if free_at > 0:
                self.free_at[link] = free_at
                K.heap_push(self.heap_time, self.heap_link, self.counters, free_at, link)

    def run(self) -> tuple[int, Block, int]:
        """One call of the kernel: status, the block it filled, deliveries during it."""
        block = Block(
            np.empty(self.capacity, np.int64),
            np.empty(self.capacity, np.int64),
            np.empty(self.capacity, np.float64),
        )
        rebound_row = np.empty(self.capacity, np.int64)
        rebound_chunk = np.empty(self.capacity, np.int64)
        self.counters[K.C_OUT] = self.counters[K.C_REBOUND] = 0
        delivered = int(self.counters[K.C_DELIVERED])
        late = int(self.counters[K.C_LATE])
        status = K.run_spread(
            self.link_src, self.link_dst, self.link_time, self.out_ptr, self.out_links,
            self.out_dsts, self.in_ptr, self.in_links, self.in_srcs, self.inbr_ptr, self.inbrs,
            self.rivals_ptr, self.rivals, self.slow_in_ptr, self.slow_in, self.rival_slot,
            self.link_class, self.class_time,
            self.source_time, self.source_node, self.source_chunk, self.policy,
            RAREST_COMPARE_ALL, ARRIVAL_LOOKAHEAD, PICK_LOOKAHEAD, self.ports, self.fewest_first,
            self.holds, self.taken, self.block_count,
            self.copies, self.free_at, self.flight_chunk, self.heap_time, self.heap_link,
            self.next_in_group, self.looking_again, self.left_chunks, self.flight_start,
            self.flight_row, self.overtaken, self.start_holds, self.outstanding, self.mt,
            self.counters,
            self.marked, self.candidates, self.order, self.sent, self.touched, self.is_touched,
            self.class_head, self.class_tail, self.class_order, self.pool, self.planes,
            self.rival_cap, self.rival_src, self.only_within, self.late, self.landed,
            block.chunk, block.link, block.start, rebound_row, rebound_chunk,
        )  # fmt: skip
        used = int(self.counters[K.C_OUT])
        self.counters[K.C_ROWS] += used
        rebound = int(self.counters[K.C_REBOUND])
        rebound_row, rebound_chunk = rebound_row[:rebound], rebound_chunk[:rebound]
        if status == K.DONE:  # overtaken and not landed: their receivers are done
            pending = self.flight_row[self.overtaken]
            rebound_row = np.concatenate([rebound_row, pending])
            rebound_chunk = np.concatenate([rebound_chunk, np.full(len(pending), -1, np.int64)])
        # A full block is used as it is; a mostly empty one (the last) is copied so
        # that its big buffers are not kept alive by a few rows.
        chunk, link, start = block.chunk[:used], block.link[:used], block.start[:used]
        if 2 * used < self.capacity:
            chunk, link, start = chunk.copy(), link.copy(), start.copy()
        block = Block(
            chunk, link, start, int(self.counters[K.C_LATE]) - late,
            rebound_row.copy(), rebound_chunk.copy(),
        )  # fmt: skip
        return int(status), block, int(self.counters[K.C_DELIVERED]) - delivered


def _line_aligned_zeros(rows: int, columns: int, dtype: type) -> np.ndarray:
    """A zeroed C-order matrix whose rows start on cache-line boundaries.

    numpy puts big arrays 16 bytes past a page boundary (the allocator's
    header), which splits every 64-byte piece of a row over two cache lines.
    Columns are padded to a whole number of lines; the padding stays zero.
    """
    itemsize = np.dtype(dtype).itemsize
    per_line = K.CACHE_LINE // itemsize
    columns = -(-columns // per_line) * per_line
    size = rows * columns * itemsize
    raw = np.zeros(size + K.CACHE_LINE, np.uint8)
    skip = -raw.ctypes.data % K.CACHE_LINE
    return raw[skip : skip + size].view(dtype).reshape(rows, columns)


# ---------------------------------------------------------------- collectives on arrays
@dataclass(frozen=True)
class FastSettings:
    """The reference's :class:`~tacos.synthesizer.collectives.Settings`."""

    rng: random.Random
    policy: ChunkPolicy = "rarest"
    sends_in_flight: int | None = None
    on_delivery: DeliveryCallback | None = None
    own_first: bool = True
    near_fraction: float = 1.0
    fewest_first: bool = False


def fast_transfers(topology: Topology, tenants: Tenants, settings: FastSettings) -> TransferTable:
    """The transfers ``synthesize_transfers`` returns for ``tenants``, as a table."""
    if tenants.kind is CollectiveKind.ALL_REDUCE:
        return _all_reduce(topology, tenants, settings)
    if tenants.kind in MIRRORS:
        return _reduce_by_mirroring(topology, tenants, settings)
    return _spread(topology, tenants, Sources.at(_sources(tenants)), settings)


def _sources(tenants: Tenants) -> np.ndarray:
    """Where each chunk starts (global ids: the tenants' chunks one after the other), for
    the spreading collectives, which start every chunk on one NPU."""
    if tenants.kind is CollectiveKind.ALL_GATHER:
        return np.concatenate([collective_owners(spec) for spec in tenants.specs])
    node = np.full(tenants.num_chunks, -1, np.int64)
    for source in tenants.sources():
        assert node[source.chunk] < 0, "a spreading collective starts each chunk once"
        node[source.chunk] = source.node
    return node


def _wants(topology: Topology, tenants: Tenants) -> Wants:
    """What each node must end with (:meth:`.Collective.final_data`, global chunk ids)."""
    (spec, *others), num_chunks = tenants.specs, tenants.num_chunks
    spreads_to_all = spec.kind in (CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST)
    if not others and spreads_to_all and len(spec.ranks) == topology.num_npus:
        return Wants.everything(topology.num_nodes, topology.num_npus, num_chunks)
    wanted = np.zeros((topology.num_nodes, num_chunks), np.bool_)
    for spec, offset in zip(tenants.specs, tenants.offsets, strict=True):
        if spec.kind is CollectiveKind.ALL_GATHER:  # each rank: all of its tenant's chunks
            wanted[np.asarray(spec.ranks), offset : offset + spec.num_chunks] = True
            continue
        for node, chunk, _ in spec.final_data():
            wanted[node, offset + chunk] = True
    return Wants.of(topology.num_npus, wanted)


def _spread(
    topology: Topology,
    tenants: Tenants,
    sources: Sources,
    settings: FastSettings,
    *,
    link_free_at: np.ndarray | None = None,
    earlier: TransferTable | None = None,
) -> TransferTable:
    """Greedy spread after ``earlier``, merged with it in (start, link) order.

    The reference also prunes and re-times here. Pruning is a no-op on a
    spread in which every node wants every chunk it lacks: every copy delivers
    a wanted chunk. Re-timing is one too unless a link left chunks to faster
    ones and then sent after all (``Block.late``): otherwise a free link with
    something to send is matched at once, so each transfer already starts when
    its link is free and its chunk has arrived, which is what re-timing computes.
    Under a port limit it re-times as the reference does (:func:`_retimed`).
    With switches, or where nodes want only some chunks (tenants, a subset of
    ranks, Gather, Scatter, All-to-All), it runs :func:`_fabric_spread`.
    ``tests/test_fast.py`` checks the result against the reference's.
    """
    num_chunks, chunk_bytes = tenants.num_chunks, tenants.chunk_bytes
    if topology.num_nodes * num_chunks > IN_MEMORY_PAIRS:
        raise TacosError(
            f"{topology.num_nodes} nodes x {num_chunks} chunks makes too many transfers "
            "to keep in memory; use fewer, larger chunks (--chunks-per-npu, --chunk-size), "
            "or stream an All-Gather to disk: tacos synthesize --stream FILE "
            "(tacos.stream.stream_all_gather)"
        )
    wants = _wants(topology, tenants)
    if wants.partial or topology.num_switches:
        assert not settings.fewest_first, "the fabric kernel matches in the shuffled order only"
        return _fabric_spread(
            topology, wants, chunk_bytes, sources, settings, link_free_at, earlier
        )
    blocks = list(
        spread_blocks(
            topology,
            sources,
            num_chunks,
            chunk_bytes,
            settings.rng,
            settings.policy,
            link_free_at=link_free_at,
            on_delivery=settings.on_delivery,
            sends_in_flight=settings.sends_in_flight,
            fewest_first=settings.fewest_first,
        )
    )
    offset = 0 if earlier is None else len(earlier)
    spread = spread_table(topology, blocks, sources, chunk_bytes, offset)
    table = spread if earlier is None else _in_start_order(_concat(earlier, spread))
    if any(block.late for block in blocks) or settings.sends_in_flight is not None:
        table = _retimed(table, topology, chunk_bytes, settings.sends_in_flight)
    return _shorten_tail(table, topology, chunk_bytes, settings.sends_in_flight)


def _fabric_spread(
    topology: Topology,
    wants: Wants,
    chunk_bytes: int,
    sources: Sources,
    settings: FastSettings,
    link_free_at: np.ndarray | None,
    earlier: TransferTable | None,
) -> TransferTable:
    """:func:`_spread` on a topology with switches, or where nodes want only some chunks,
    as the reference: the greedy (:func:`.fabric_spread`, whose kernel follows paths
    through switches and relays), then the reference's passes.

    Where every NPU wants every chunk it lacks, pruning is a no-op (every path ends at
    an NPU that wants its chunk), re-timing is not: a switch's link serves transfers in
    the order they become ready, which can differ from the order the greedy booked
    them. Elsewhere, the transfers in start order lose the relays that fed no node
    wanting their chunk, then are re-timed.
    """
    offset = 0 if earlier is None else len(earlier)
    spread = fabric_spread(
        topology, sources.node, sources.time, sources.deps_ptr, sources.deps, chunk_bytes,
        settings.rng, settings.policy, link_free_at=link_free_at, index_offset=offset,
        own_first=settings.own_first, near_fraction=settings.near_fraction,
        sends_in_flight=settings.sends_in_flight, wants=wants,
    )  # fmt: skip
    if settings.on_delivery:
        settings.on_delivery(wants.count(sources.node))
    combined = spread if earlier is None else _concat(earlier, spread)
    if wants.partial:
        combined = _in_start_order(combined)
        goal = wants.wanted(combined.dst, combined.chunk) | (combined.op == _REDUCE)
        needed = K.needed_rows(goal, combined.deps_ptr, combined.deps)
        combined = combined.take(np.flatnonzero(needed))
    retimed = _retimed(combined, topology, chunk_bytes, settings.sends_in_flight)
    return _shorten_tail(retimed, topology, chunk_bytes, settings.sends_in_flight)


def _retimed(
    table: TransferTable, topology: Topology, chunk_bytes: int, sends_in_flight: int | None
) -> TransferTable:
    """The reference's ``retime_asap`` of ``table``, compiled: the replay, or where no
    switch or port limit reorders anything, each link in its order."""
    if sends_in_flight is not None:  # the ports break ties by position: in start order
        return replay_table(_in_start_order(table), topology, chunk_bytes, sends_in_flight)
    if topology.num_switches:  # the replay orders each NPU's link by start itself
        return replay_table(table, topology, chunk_bytes)
    return retime_npu_links(_in_start_order(table), topology, chunk_bytes)


def _shorten_tail(
    table: TransferTable, topology: Topology, chunk_bytes: int, sends_in_flight: int | None
) -> TransferTable:
    """The reference's :func:`.shorten_tail` (which it runs after every spread)."""
    return shorten_tail(
        table, topology, lambda swapped: _retimed(swapped, topology, chunk_bytes, sends_in_flight)
    )


def spread_table(
    topology: Topology,
    blocks: list[Block],
    sources: Sources,
    chunk_bytes: int,
    offset: int = 0,
) -> TransferTable:
    """Blocks as transfers: endpoints from the links, dependencies on arrivals or sources.

    Dependencies on other transfers of the spread are shifted by ``offset``
    (where the spread will sit in the final table). Rebound transfers carry
    their new chunks; dropped ones are left out.
    """
    chunk = np.concatenate([b.chunk for b in blocks]) if blocks else np.zeros(0, np.int64)
    link = np.concatenate([b.link for b in blocks]) if blocks else np.zeros(0, np.int64)
    start = np.concatenate([b.start for b in blocks]) if blocks else np.zeros(0)
    for b in blocks:
        chunk[b.rebound_row] = b.rebound_chunk
    if any((b.rebound_chunk < 0).any() for b in blocks):
        kept = chunk >= 0
        chunk, link, start = chunk[kept], link[kept], start[kept]
    link_src, link_dst = link_endpoints(topology)
    durations = np.asarray(topology.link_times_us(chunk_bytes), np.float64)
    num_chunks = len(sources.deps_ptr) - 1
    src, dst, end, ptr, deps = K.spread_columns(
        chunk, link, start, link_src, link_dst, durations, topology.num_nodes, num_chunks,
        sources.deps_ptr, sources.deps, offset,
    )  # fmt: skip
    op = np.zeros(len(chunk), np.uint8)
    return TransferTable(chunk, src, dst, link, start, end, op, ptr, deps)


def _reduce_by_mirroring(
    topology: Topology, tenants: Tenants, settings: FastSettings, owners: Sources | None = None
) -> TransferTable:
    """The mirrored spreading collective (Reduce-Scatter: All-Gather; Reduce: Broadcast) on
    the transposed topology, played backwards as reductions into ``owners`` (by default
    the collective's own)."""
    mirror = tenants.as_kind(MIRRORS[tenants.kind])
    if owners is None:
        owners = Sources.at(_sources(mirror))
    spread = _spread(topology.transposed(), mirror, owners, settings)
    finish = spread.end.max()
    # Played backwards, transfer X waits for the reversals of the transfers that
    # forwarded what X delivered: the dependency graph turned around.
    ptr, forwarded_by = spread.dependants()
    into_switch = spread.src >= topology.num_npus  # played backwards: into a switch, a copy
    backwards = TransferTable(
        spread.chunk,
        spread.dst,
        spread.src,
        spread.link,
        finish - spread.end,
        finish - spread.start,
        np.where(into_switch, 0, 1).astype(np.uint8),
        ptr,
        forwarded_by,
    )
    return _retimed(backwards, topology, tenants.chunk_bytes, settings.sends_in_flight)


def _all_reduce(topology: Topology, tenants: Tenants, settings: FastSettings) -> TransferTable:
    """The faster All-Reduce of the owner layouts worth trying, as the reference does."""
    quiet = replace(settings, on_delivery=None)
    return fastest_attempt(
        owner_layouts(topology, tenants.specs),
        settings.rng,
        lambda owners, reports: _all_reduce_owned(
            topology, tenants, settings if reports else quiet, np.concatenate(owners)
        ),
        finish_us,
    )


def _all_reduce_owned(
    topology: Topology, tenants: Tenants, settings: FastSettings, owners: np.ndarray
) -> TransferTable:
    """Reduce-Scatter into ``owners`` (per chunk, global ids), then All-Gather of each
    reduced chunk from its owner, overlapped."""
    at_owners = Sources.at(owners)
    scatter = tenants.as_kind(CollectiveKind.REDUCE_SCATTER)
    reduction = _reduce_by_mirroring(topology, scatter, settings, at_owners)
    final = np.nonzero(reduction.dst == at_owners.node[reduction.chunk])[0]  # into the owner
    final = final[np.argsort(reduction.chunk[final], kind="stable")]
    final_chunks = reduction.chunk[final]
    num_chunks = tenants.num_chunks
    ptr = np.zeros(num_chunks + 1, np.int64)
    np.cumsum(np.bincount(final_chunks, minlength=num_chunks), out=ptr[1:])
    ready = np.zeros(num_chunks)
    np.maximum.at(ready, final_chunks, reduction.end[final])
    link_free_at = np.zeros(len(topology.links))
    np.maximum.at(link_free_at, reduction.link, reduction.end)
    sources = Sources(at_owners.node, at_owners.chunk, ready, ptr, final)
    gather = tenants.as_kind(CollectiveKind.ALL_GATHER)
    return _spread(
        topology, gather, sources, settings, link_free_at=link_free_at, earlier=reduction
    )


def retime_npu_links(
    transfers: TransferTable, topology: Topology, chunk_bytes: int
) -> TransferTable:
    """The reference's ``retime_asap`` for NPU-only links and no port limit, on arrays.

    Each transfer starts when the previous transfer on its link (in list order)
    and its dependencies have ended, which is what the replay computes when no
    switch reorders anything; the result is sorted by (start, link, position).
    """
    durations = np.asarray(topology.link_times_us(chunk_bytes), np.float64)
    start, end = K.retime_in_order(transfers.link, transfers.deps_ptr, transfers.deps, durations)
    retimed = TransferTable(
        transfers.chunk,
        transfers.src,
        transfers.dst,
        transfers.link,
        start,
        end,
        transfers.op,
        transfers.deps_ptr,
        transfers.deps,
    )
    return _in_start_order(retimed)


def _in_start_order(transfers: TransferTable) -> TransferTable:
    """Sorted by (start, link, position); a spread is already, so that is checked first."""
    start, link = transfers.start, transfers.link
    later = start[1:] > start[:-1]
    if (later | ((start[1:] == start[:-1]) & (link[1:] > link[:-1]))).all():
        return transfers
    return transfers.take(np.lexsort((link, start)))


def _concat(first: TransferTable, second: TransferTable) -> TransferTable:
    """``first`` then ``second`` (whose dependencies already index the combined list)."""

    def both(name: str) -> np.ndarray:
        return np.concatenate((getattr(first, name), getattr(second, name)))

    return TransferTable(
        both("chunk"),
        both("src"),
        both("dst"),
        both("link"),
        both("start"),
        both("end"),
        both("op"),
        np.concatenate((first.deps_ptr, second.deps_ptr[1:] + first.deps_ptr[-1])),
        both("deps"),
    )
