"""Plans to schedules: route messages, mirror reductions, order links, time on the link model.

* Spreading: each logical message ``a -> b`` of a chunk's plan follows its
  network path. A path leg ends at every NPU on it; a leg into an NPU that
  already has (or is getting) the chunk is skipped and the next leg leaves
  from there, so every node receives each chunk once and the chunk's transfers
  form a tree (switch legs are unicast chains, one copy per message).
* Reducing: the spreading plan of the chunk from its reduction target, built on
  the transposed topology and played backwards (as TACOS does): copies into
  NPUs become reductions, each node sends its partial once, after everything
  its subtree sends it. All-Reduce reduces every chunk to a hub (its owner, or
  a tree root), then spreads it from there.
* Ordering: a list scheduler plays the transfers on the link model (a link
  carries one chunk at a time, ``latency + bytes / bandwidth``); an idle NPU
  link sends the ready transfer with the longest chain still behind it, a
  switch link serves first come, first served exactly as the replay's FIFO
  queues do. :func:`tacos.synthesizer.timing.retime_asap` then times that
  order with the replay engine of :mod:`tacos.simulate`, so a classic
  schedule's recorded time is what ``tacos.simulate`` gives, to the last bit
  (and the list scheduler's own times are the same, so candidates can be
  compared before the winner is re-timed).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tacos.classic.algorithms import Recipe
from tacos.classic.network import Network
from tacos.collective import Collective, CollectiveKind
from tacos.linkmodel import CostModel
from tacos.schedule import Schedule
from tacos.synthesizer.list_scheduling import (
    Timeline,
    Times,
    longest_chains_us,
    replayed,
    with_times,
)
from tacos.topology import Topology
from tacos.transfers import TransferTable

K = CollectiveKind
CLASSIC_SYNTHESIZER = "tacos-classic"


@dataclass
class Block:
    """Transfers under construction, as columns (dependencies are earlier indices)."""

    chunk: list[int] = field(default_factory=list)
    link: list[int] = field(default_factory=list)
    reduce: list[bool] = field(default_factory=list)
    deps: list[tuple[int, ...]] = field(default_factory=list)

    def add(self, chunk: int, link: int, reduce: bool, deps: tuple[int, ...]) -> int:
        self.chunk.append(chunk)
        self.link.append(link)
        self.reduce.append(reduce)
        self.deps.append(deps)
        return len(self.link) - 1

    def __len__(self) -> int:
        return len(self.link)

    def table(self, topology: Topology) -> TransferTable:
        """The transfers as a table, untimed (start and end 0)."""
        link = np.asarray(self.link, np.int64)
        ends = np.array([(lk.src, lk.dst) for lk in topology.links], np.int64).reshape(-1, 2)
        lengths = np.fromiter(map(len, self.deps), np.int64, len(self.deps))
        ptr = np.zeros(len(link) + 1, np.int64)
        np.cumsum(lengths, out=ptr[1:])
        deps = np.fromiter(itertools.chain.from_iterable(self.deps), np.int64, int(ptr[-1]))
        untimed = np.zeros(len(link))
        return TransferTable(
            np.asarray(self.chunk, np.int64), ends[link, 0], ends[link, 1], link,
            untimed, untimed, np.asarray(self.reduce, np.uint8), ptr, deps,
        )  # fmt: skip


@dataclass
class Nets:
    """The phase networks of one problem: the topology and (for reductions) its transpose."""

    topology: Topology
    chunk_bytes: int
    forward: Network = field(init=False)
    _backward: Network | None = None

    def __post_init__(self) -> None:
        self.forward = Network(self.topology, self.chunk_bytes)

    @property
    def backward(self) -> Network:
        if self._backward is None:
            self._backward = Network(self.topology.transposed(), self.chunk_bytes)
        return self._backward


# ------------------------------------------------------------------ expansion
@dataclass
class Template:
    """One chunk's transfers (local indices), shared by every chunk of one origin and class.

    Transfers leaving the origin have no dependencies; ``finals`` (reductions) are
    the transfers into the reduction target; ``longest`` is the longest chain.
    """

    block: Block
    finals: tuple[int, ...] = ()
    longest: float = 0.0


class Expansion:
    """A recipe's transfers for a collective, as templates and the chunks that use them.

    Chunks with the same origin (or reduction target) and the same
    ``recipe.chunk_class`` travel alike, so each such template is routed once;
    :meth:`lower_estimate` works on the templates and :meth:`block` spells
    every chunk out only for the candidates that get timed.
    """

    def __init__(self, collective: Collective, recipe: Recipe, nets: Nets) -> None:
        self.collective, self.recipe, self.nets = collective, recipe, nets
        kind = collective.kind
        self.reduces = kind in (K.REDUCE_SCATTER, K.REDUCE, K.ALL_REDUCE)
        self.spreads = kind not in (K.REDUCE_SCATTER, K.REDUCE)
        self.keys = [(self._origin(c), recipe.chunk_class(c)) for c in range(collective.num_chunks)]
        first_chunk: dict[tuple[int, object], int] = {}
        for c, key in enumerate(self.keys):
            first_chunk.setdefault(key, c)
        times = nets.forward.times
        self.reduction: dict[tuple[int, object], Template] = {}
        self.spread: dict[tuple[int, object], Template] = {}
        if self.reduces:
            plan = recipe.plan(nets.backward)
            for key, c in first_chunk.items():
                self.reduction[key] = _reduction(nets.backward, key[0], plan(key[0], c), times)
        if self.spreads:
            plan = recipe.plan(nets.forward)
            for key, c in first_chunk.items():
                self.spread[key] = _spreading(nets.forward, key[0], plan(key[0], c), times)

    def _origin(self, chunk: int) -> int:
        """Where the chunk starts (spreading) or is reduced to (reducing kinds)."""
        spec, kind = self.collective, self.collective.kind
        if kind in (K.REDUCE, K.BROADCAST, K.SCATTER):
            assert spec.root is not None
            return spec.root
        if kind is K.ALL_REDUCE and self.recipe.hub is not None:
            return self.recipe.hub(self.recipe.chunk_class(chunk))
        return spec.owner(chunk)

    def _templates(self, key: tuple[int, object]) -> list[Template]:
        found = (self.reduction.get(key), self.spread.get(key))
        return [t for t in found if t is not None]

    def lower_estimate(self) -> float:
        """:func:`lower_estimate` of :meth:`block`, computed from the templates."""
        times = self.nets.forward.times
        uses: dict[tuple[int, object], int] = {}
        for key in self.keys:
            uses[key] = uses.get(key, 0) + 1
        busy = [0.0] * len(times)
        longest = 0.0
        for key, count in uses.items():
            templates = self._templates(key)
            longest = max(longest, sum(t.longest for t in templates))  # reduce, then spread
            for template in templates:
                for link_id in template.block.link:
                    busy[link_id] += count * times[link_id]
        return max(longest, max(busy, default=0.0))

    def __len__(self) -> int:
        """How many transfers :meth:`block` has."""
        return sum(len(t.block) for key in self.keys for t in self._templates(key))

    def block(self) -> Block:
        """Every transfer, chunk by chunk (for All-Reduce every reduction first)."""
        out = Block()
        finals: list[tuple[int, ...]] = []
        if self.reduces:
            for c, key in enumerate(self.keys):
                template = self.reduction[key]
                base = _append(out, c, template.block, ())
                finals.append(tuple(base + f for f in template.finals))
        if self.spreads:
            for c, key in enumerate(self.keys):
                _append(out, c, self.spread[key].block, finals[c] if finals else ())
        return out


def _append(out: Block, chunk: int, local: Block, origin_deps: tuple[int, ...]) -> int:
    """Add ``local`` (a template) as chunk ``chunk``; returns the index of its first transfer."""
    base = len(out)
    out.chunk.extend([chunk] * len(local))
    out.link.extend(local.link)
    out.reduce.extend(local.reduce)
    out.deps.extend(tuple(base + d for d in deps) if deps else origin_deps for deps in local.deps)
    return base


def _spreading(
    net: Network, origin: int, messages: Sequence[tuple[int, int]], times: Sequence[float]
) -> Template:
    block = _routed(net, origin, messages)
    return Template(block, (), _longest(block, times))


def _routed(net: Network, origin: int, messages: Sequence[tuple[int, int]]) -> Block:
    """One chunk's ``messages`` over their paths, every node receiving it at most once;
    transfers that reach no message's destination (relays whose leg was cut short) are
    dropped. Transfers leaving ``origin`` have no dependencies."""
    links, npus = net.topology.links, net.num_npus
    local = Block()
    has: dict[int, tuple[int, ...]] = {origin: ()}
    for a, b in messages:
        if b in has:
            continue
        deps = has[a]
        leg: list[int] = []
        for link_id in net.path(a, b):
            leg.append(link_id)
            v = links[link_id].dst
            if v >= npus:
                continue
            if v not in has:
                for hop in leg:
                    deps = (local.add(0, hop, False, deps),)
                has[v] = deps
            deps = has[v]
            leg = []
    targets = {b for _, b in messages}
    needed = [False] * len(local)
    for i in range(len(local) - 1, -1, -1):
        if needed[i] or links[local.link[i]].dst in targets:
            needed[i] = True
            for d in local.deps[i]:
                needed[d] = True
    if all(needed):
        return local
    kept = Block()
    new_index: dict[int, int] = {}
    for i in range(len(local)):
        if needed[i]:
            deps = tuple(new_index[d] for d in local.deps[i])
            new_index[i] = kept.add(0, local.link[i], False, deps)
    return kept


def _reduction(
    backward: Network, hub: int, messages: Sequence[tuple[int, int]], times: Sequence[float]
) -> Template:
    """Reduce a chunk into ``hub``: its spread from ``hub`` on the transposed topology,
    played backwards (each transfer waits for the reversals of those it fed)."""
    spread = _routed(backward, hub, messages)
    count = len(spread)
    children: list[list[int]] = [[] for _ in range(count)]
    for i, deps in enumerate(spread.deps):
        for d in deps:
            children[d].append(i)
    npus = backward.num_npus
    links = backward.topology.links  # transposed: link i runs dst -> src of the original
    block = Block()
    finals = []
    for i in range(count - 1, -1, -1):  # reversed: local index count - 1 - i
        into_npu = links[spread.link[i]].src < npus
        deps = tuple(sorted(count - 1 - j for j in children[i]))
        index = block.add(0, spread.link[i], into_npu, deps)
        if not spread.deps[i]:
            finals.append(index)
    return Template(block, tuple(finals), _longest(block, times))


# ------------------------------------------------------------------ estimates
def _longest(block: Block, times: Sequence[float]) -> float:
    """The longest chain of link times through ``block``'s dependencies."""
    finish = [0.0] * len(block)
    for i, (link_id, deps) in enumerate(zip(block.link, block.deps, strict=True)):
        finish[i] = max((finish[d] for d in deps), default=0.0) + times[link_id]
    return max(finish, default=0.0)


def lower_estimate(block: Block, times: Sequence[float]) -> float:
    """A time no ordering of ``block`` can beat: its busiest link, and its longest chain."""
    busy = [0.0] * len(times)
    for link_id in block.link:
        busy[link_id] += times[link_id]
    return max(_longest(block, times), max(busy, default=0.0))


# ------------------------------------------------------------------ timing
def list_schedules(table: TransferTable, topology: Topology, chunk_bytes: int) -> list[Times]:
    """List schedules: an idle NPU link sends, of the transfers ready for it, the one
    with the longest chain of link times still behind it (critical path first); a
    switch link serves its ready transfers first come, first served.

    Simultaneous events are applied as :mod:`tacos.simulate` applies them, and
    switch links break ties as its FIFO queues do, so in the paper's link model
    the replay of the resulting order on every NPU link reproduces these times
    exactly (compiled: :class:`~tacos.synthesizer.list_scheduling.Timeline`).
    In another model there is a second schedule, made as if each link stayed
    busy for a chunk's whole arrival time (the paper's model): list scheduling
    is a heuristic, and that order is sometimes the faster one (classic
    algorithms on ring:8 and two-server clusters in the pipelined model, by up
    to 9%); both must then be replayed to be compared.
    """
    behind = -longest_chains_us(table, topology.link_times_us(chunk_bytes))
    views = [topology] if topology.cost.is_default else [topology, _store_and_forward(topology)]
    return [Timeline(view, table, chunk_bytes).forward(behind) for view in views]


def _store_and_forward(topology: Topology) -> Topology:
    """``topology`` in the paper's link model, its reduction cost kept."""
    return topology.with_cost(replace(topology.cost, link_model=CostModel().link_model))


def to_schedule(
    topology: Topology,
    collective: Collective,
    table: TransferTable,
    start: np.ndarray,
    meta: dict[str, object],
    sends_in_flight: int | None = None,
) -> Schedule:
    """Transfers in the order of ``start`` (from :func:`list_schedule`), timed by the replay.

    ``sends_in_flight`` times them for NPUs with that many send ports (the order
    stays the list scheduler's; the schedule records the limit).
    """
    ordered = with_times(table, start, start)
    times = replayed(ordered, topology, collective.chunk_bytes, sends_in_flight)
    timed = with_times(ordered, *times)
    meta = {"synthesizer": CLASSIC_SYNTHESIZER, **meta}
    if sends_in_flight is not None:
        meta["sends_in_flight"] = sends_in_flight
    return Schedule(topology, collective, timed, meta)
