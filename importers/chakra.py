"""Read a set of per-rank Chakra ETs (``PREFIX.<rank>.et``) as a Schedule.

ASTRA-sim pairs a COMM_SEND_NODE on rank ``s`` with a COMM_RECV_NODE on rank
``d`` when their (tag, src, dst, size) agree, in issue order; an unpaired node
makes the simulation hang silently. :func:`match_messages` performs the same
pairing offline and names the first node that would hang.

:func:`import_schedule` turns the paired messages into a Schedule the verifier
can check. Traces carry no data, so what each message moves is recovered:

* from the ``tacos_chunk`` attribute of every send and receive, when present
  (our own exports write it);
* otherwise by data lineage. A send with no receive or reduction among its
  ``data_deps`` sends its rank's own contribution to a fresh chunk. A COMP node
  that depends on a receive reduces that message into the receiver's copy of the
  same chunk. A send that depends on receives or reductions forwards their data,
  so it moves the same chunk. A COMP node whose ``data_deps`` equal a send's on
  the same rank only orders that send (our exporter writes such markers for
  sends through switches) and carries no data.

Messages of several sizes move several chunks each, of the sizes' greatest
common divisor (ASTRA-sim's converter writes such messages for recursive
doubling and hierarchical algorithms); a send carries, unit by unit, the data
of its own size it depends on, or what it received followed by its rank's own.
A message's chunks cross each link back to back (see :func:`_transfers`), but a
reduction of one still overlaps chunk by chunk, where ASTRA-sim's single COMP
node waits for the whole message.

Limits of lineage: traces say where data goes, not which data. A rank that
sends its own data in several messages sends one chunk to several peers or
several chunks; a message of part of what it received carries an unknown part;
a reducing collective whose traces hold no reduction combines received data
in an unknown way. Those guesses are listed (``meta["lineage_guesses"]``), the
readings are tried in turn and the first that verifies is kept, so a schedule
that still fails to verify is one the traces cannot decide (``tacos verify``
says "cannot tell"). Contributions to one chunk sent fresh by several ranks
join only where they meet in one reduction or one send. Inferred chunks are
numbered by where they start (All-Gather, All-Reduce, Gather), where they end
(Reduce-Scatter, Scatter) or both (All-to-All), in the order their first sends
appear, which is the collective's own numbering up to a permutation within each
rank's chunks.

Timing comes from the topology's cost model (:mod:`tacos.linkmodel`), not
from ASTRA-sim: the traces are replayed with every ``data_deps`` edge honoured
(c459ab6 ignores ``ctrl_deps``), each message crossing the topology's direct
link between its ranks (or its route through switches) when the link is free,
in the order messages become ready, to order the transfers; the transfers are
then timed as ``tacos simulate`` times them. A reduction's COMP node sets the
cost model's reduction bandwidth (its bytes over its ``duration_micros``, the
most common value), unless the caller gives one.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.formats.chakra import (
    CHUNK_ATTRIBUTE,
    TENANTS_ATTRIBUTE,
    GlobalMetadata,
    Node,
    NodeType,
    get_attr,
    read_et,
)
from tacos.limits import check_count
from tacos.linkmodel import KEEP_COST, CostChoice, CostModel
from tacos.schedule import Op, Schedule, Transfer
from tacos.simulate import replay_times
from tacos.synthesizer.routes import Route, routes_from
from tacos.synthesizer.timing import renumber
from tacos.topology import GIB, Topology
from tacos.verify import verify

FORMAT_NAME = "chakra"
MAX_UNITS = 20_000_000
"""Most chunks the messages may split into (messages of several sizes)."""
_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et$")

NodeKey = tuple[int, int]
"""(rank, node id)."""


@dataclass(frozen=True)
class EtSet:
    """The traces of ranks ``0..n-1``: ``traces[rank] = (metadata, nodes)``."""

    prefix: Path
    traces: dict[int, tuple[GlobalMetadata, list[Node]]]
    paths: dict[int, Path]

    @property
    def num_ranks(self) -> int:
        return len(self.traces)

    def path(self, rank: int) -> str:
        """The file of ``rank``, for error messages."""
        return str(self.paths[rank])


@dataclass(frozen=True)
class Message:
    """A matched send/receive pair; ``send_node``/``recv_node`` are ids in the src/dst traces."""

    src: int
    dst: int
    tag: int
    size: int
    send_node: int
    recv_node: int


def prefix_of(path: str | Path) -> Path:
    """``dir/name.3.et`` -> ``dir/name``; a path that is not a rank file is a prefix already."""
    path = Path(path)
    match = _RANK_FILE.match(path.name)
    return path.with_name(match["stem"]) if match else path


def load_et_set(prefix: str | Path) -> EtSet:
    """Read ``PREFIX.0.et``, ``PREFIX.1.et``, ...; the ranks must be contiguous from 0."""
    prefix = Path(prefix)
    folder = prefix.parent if str(prefix.parent) else Path(".")
    files: defaultdict[int, list[Path]] = defaultdict(list)
    for path in sorted(folder.iterdir()) if folder.is_dir() else ():
        if (m := _RANK_FILE.match(path.name)) and m["stem"] == prefix.name:
            files[int(m["rank"])].append(path)
    if not files:
        raise TacosError(f"{prefix}: no files {prefix.name}.<rank>.et in {folder}")
    for rank, paths in files.items():
        if len(paths) > 1:
            raise TacosError(
                f"{prefix}: {paths[0].name} and {paths[1].name} both name rank {rank}; "
                "keep one file per rank"
            )
    ranks = sorted(files)
    if ranks != list(range(len(ranks))):  # the smallest gap is at most len(ranks)
        missing = min(set(range(len(ranks) + 1)) - set(ranks))
        raise TacosError(f"{prefix}: rank files must be contiguous from 0; {missing} is missing")
    rank_files = {rank: files[rank][0] for rank in ranks}
    traces = {}
    for rank, path in rank_files.items():
        try:
            traces[rank] = read_et(path)
        except OSError as err:
            raise TacosError(f"{path}: cannot read: {err}") from None
    return EtSet(prefix, traces, rank_files)


def match_messages(et_set: EtSet) -> list[Message]:
    """Pair every send with a receive as ASTRA-sim does; raise naming the first orphan."""
    sends: dict[tuple[int, int, int, int], deque[int]] = defaultdict(deque)
    recvs: dict[tuple[int, int, int, int], deque[int]] = defaultdict(deque)
    for rank, (_, nodes) in et_set.traces.items():
        for node in nodes:
            if node.type == NodeType.COMM_SEND_NODE:
                key = _message_key(node, rank, et_set, sender=True)
                sends[key].append(node.id)
            elif node.type == NodeType.COMM_RECV_NODE:
                key = _message_key(node, rank, et_set, sender=False)
                recvs[key].append(node.id)
    messages = []
    for key in sorted(set(sends) | set(recvs)):
        tag, src, dst, size = key
        pending_sends, pending_recvs = sends.get(key, deque()), recvs.get(key, deque())
        if len(pending_sends) != len(pending_recvs):
            side, rank, extra = (
                ("send", src, pending_sends[len(pending_recvs)])
                if len(pending_sends) > len(pending_recvs)
                else ("receive", dst, pending_recvs[len(pending_sends)])
            )
            raise TacosError(
                f"{et_set.path(rank)}: node {extra} ({side} {src}->{dst}, tag {tag}, "
                f"{size} bytes) has no matching {'receive' if side == 'send' else 'send'}; "
                "ASTRA-sim would wait for it forever"
            )
        for send_node, recv_node in zip(pending_sends, pending_recvs, strict=True):
            messages.append(Message(src, dst, tag, size, send_node, recv_node))
    return messages


def import_schedule(
    prefix: str | Path,
    *,
    collective: CollectiveKind | None = None,
    topology: Topology | None = None,
    chunk_bytes: int | None = None,
    cost: CostChoice = KEEP_COST,
) -> Schedule:
    """The Schedule a Chakra ET set runs, on ``topology`` (default: fully connected ranks).

    ``collective`` overrides the kind named by the traces' GlobalMetadata
    ``collective`` attribute; ``cost`` the cost model (by default the paper's
    links, and reductions as long as the traces' COMP nodes take). Raises
    TacosError, naming the file and node, when the traces cannot run (an
    unmatched message, a dependency on a missing node, a dependency cycle) or
    cannot be a Schedule (a message with no path in the topology).

    When chunks come from data lineage and a guess was needed (see
    :class:`_Lineage`), each way of guessing is tried and the first whose
    schedule verifies is kept; ``meta["lineage_guesses"]`` lists the guesses,
    so a schedule that still does not verify is one the traces cannot decide.
    """
    if chunk_bytes is not None:
        raise TacosError(
            f"{prefix}: --chunk-size does not apply to Chakra traces; their messages carry "
            "their own sizes"
        )
    et_set = load_et_set(prefix_of(prefix))
    _refuse_tenants(et_set)
    if et_set.num_ranks < 2:
        raise TacosError(f"{et_set.path(0)}: one rank only; a collective needs at least 2")
    messages = match_messages(et_set)
    if not messages:
        raise _no_messages(et_set)
    kind = collective or _collective_kind(et_set)
    graph = _Graph(et_set, messages)
    if topology is None:
        topology = Topology.fully_connected(et_set.num_ranks)
    if topology.num_npus < et_set.num_ranks:
        raise TacosError(
            f"{et_set.prefix}: {et_set.num_ranks} ranks, but topology {topology.name!r} has "
            f"{topology.num_npus} NPUs"
        )
    default_cost = CostModel(topology.cost.link_model, graph.reduce_bandwidth_GBps())
    topology = topology.with_cost(cost.apply(default_cost))
    hops = _replay(graph, topology)
    first = None
    for same_chunk_to_peers in (False, True):
        lineage = _Lineage(graph, kind, same_chunk_to_peers=same_chunk_to_peers)
        schedule = _schedule(kind, graph, lineage, topology, hops)
        if lineage.explicit or not lineage.fresh_guess or verify(schedule).ok:
            return schedule
        first = first or schedule
    assert first is not None
    return first  # neither guess verifies: the one that assumes least


def _schedule(
    kind: CollectiveKind,
    graph: _Graph,
    lineage: _Lineage,
    topology: Topology,
    hops: list[list[Hop]],
) -> Schedule:
    """The messages as transfers of ``lineage``'s chunks, timed by the replay of tacos.simulate."""
    numbering = _number_chunks(kind, lineage, graph.et_set.num_ranks)
    ranks = tuple(range(graph.et_set.num_ranks))
    spec = Collective(kind, ranks, numbering.per_rank, graph.unit_bytes, numbering.root)
    meta: dict[str, object] = {
        "imported_from": FORMAT_NAME,
        "prefix": str(graph.et_set.prefix),
        "chunks_from": CHUNK_ATTRIBUTE if lineage.explicit else "data lineage",
    }
    if lineage.guesses:
        meta["lineage_guesses"] = lineage.guesses
    transfers = _transfers(topology, graph, lineage, numbering, hops)
    starts, ends = replay_times(transfers, topology, graph.unit_bytes)
    timed = [replace(t, start=starts[i], end=ends[i]) for i, t in enumerate(transfers)]
    order = sorted(range(len(timed)), key=lambda i: (timed[i].start, i))
    return Schedule(topology, spec, renumber(timed, order), meta)


# ---------------------------------------------------------------- the trace graph
class _Graph:
    """Every node of every rank, its data dependencies and its message."""

    def __init__(self, et_set: EtSet, messages: list[Message]) -> None:
        self.et_set = et_set
        self.messages = messages
        self.nodes: dict[NodeKey, Node] = {}
        for rank, (_, nodes) in sorted(et_set.traces.items()):
            for node in nodes:
                if (rank, node.id) in self.nodes:
                    raise TacosError(f"{et_set.path(rank)}: node id {node.id} is used twice")
                self.nodes[(rank, node.id)] = node
        self.deps: dict[NodeKey, tuple[NodeKey, ...]] = {}
        for (rank, node_id), node in self.nodes.items():
            for dep in node.data_deps:
                if (rank, dep) not in self.nodes:
                    raise TacosError(
                        f"{self.where((rank, node_id))} depends on node {dep}, which is not in "
                        "the file"
                    )
            self.deps[(rank, node_id)] = tuple((rank, d) for d in dict.fromkeys(node.data_deps))
        self.send_of = {(m.src, m.send_node): i for i, m in enumerate(messages)}
        self.recv_of = {(m.dst, m.recv_node): i for i, m in enumerate(messages)}
        # Messages of several sizes are several chunks of their greatest common divisor.
        self.unit_bytes = math.gcd(*(m.size for m in messages))
        self.units = [m.size // self.unit_bytes for m in messages]
        check_count(
            sum(self.units), MAX_UNITS, f"chunks of {self.unit_bytes} bytes", str(et_set.prefix)
        )

    def reductions(self) -> dict[NodeKey, int]:
        """COMP nodes that add a received message into the rank's data: node -> message."""
        send_dep_sets = {(key[0], frozenset(self.deps[key])) for key in self.send_of}
        found = {}
        for key, node in self.nodes.items():
            # A COMP with the same dependencies as a send only orders it (our exporter's
            # markers for sends through switches); it carries no data.
            if (
                node.type != NodeType.COMP_NODE
                or (key[0], frozenset(self.deps[key])) in send_dep_sets
            ):
                continue
            received = [self.recv_of[dep] for dep in self.deps[key] if dep in self.recv_of]
            if received:
                found[key] = received[0]
        return found

    def reduce_bandwidth_GBps(self) -> float:
        """What the COMP nodes' durations make of an NPU's reduction speed (0: free).

        ASTRA-sim runs a COMP node for ``duration_micros`` whole microseconds; the most
        common bytes / duration among reductions gives the cost model's bandwidth.
        """
        rates = Counter(
            self.messages[m].size / (self.nodes[key].duration_micros * 1e-6) / GIB
            for key, m in self.reductions().items()
            if self.nodes[key].duration_micros > 0
        )
        return rates.most_common(1)[0][0] if rates else 0.0

    def where(self, key: NodeKey) -> str:
        node = self.nodes[key]
        return (
            f"{self.et_set.path(key[0])}: node {node.id} ({node.name or NodeType.Name(node.type)})"
        )


# ------------------------------------------------------------------- lineage
class _Lineage:
    """What each message moves: its chunks, whether it is reduced, whose data it sends.

    A message of several units (see :class:`_Graph`) moves that many chunks;
    ``chunk_class[m]`` names one class per unit. Where the traces leave a choice,
    the choice made is listed in ``guesses``:

    * A rank that sends its own data in several messages may send one chunk to
      several peers or several chunks. By default every such send starts a new
      chunk; ``same_chunk_to_peers`` makes the k-th such send to each peer the
      same chunk instead (an All-Gather's all-pairs exchange).
    * A send smaller than the data it depends on (recursive halving) carries an
      unknown part of it (see :meth:`_carried`).
    * A rank that ends reduction chains which never meet may hold one chunk or
      several; each is taken as a chunk of its own.
    * A reducing collective whose traces hold no reduction combines received
      data in an unknown way.
    """

    def __init__(
        self, graph: _Graph, kind: CollectiveKind, *, same_chunk_to_peers: bool = False
    ) -> None:
        self.graph = graph
        count = len(graph.messages)
        reductions = graph.reductions()
        self.reduced = [False] * count
        for m in reductions.values():
            self.reduced[m] = True
        self.reductions = reductions
        self.sources: list[tuple[int, ...]] = [
            tuple(sorted({m for dep in graph.deps[key] for m in self._data(dep)}))
            for key in self._send_keys()
        ]
        self.guesses: list[str] = []
        self.fresh_guess = False
        self.first_unit = list(itertools.accumulate(graph.units, initial=0))
        self.fresh_units: set[int] = set()  # units a rank sends of its own data
        self.partial: set[int] = set()  # messages of part of what they depend on
        self.unit_sources, own = self._carried()
        explicit = [self._chunk_attribute(key) for key in self._comm_keys()]
        if all(value is not None for value in explicit):
            self.explicit = True
            if any(units > 1 for units in graph.units):
                raise TacosError(
                    f"{graph.et_set.prefix}: messages of several sizes carry one "
                    f"{CHUNK_ATTRIBUTE!r} each; label messages of one size"
                )
            self.chunk_class: list[tuple[int, ...]] = [
                (self._explicit_chunk(i),) for i in range(count)
            ]
        elif any(value is not None for value in explicit):
            first = next(k for k, v in zip(self._comm_keys(), explicit, strict=True) if v is None)
            raise TacosError(
                f"{graph.where(first)} has no {CHUNK_ATTRIBUTE!r} attribute while other nodes "
                "have one; the traces are mixed"
            )
        else:
            self.explicit = False
            self.chunk_class = self._infer_classes(kind, own, same_chunk_to_peers)
        self.origins, self.sinks, self.first_seen = self._ends()

    def _send_keys(self) -> list[NodeKey]:
        return [(m.src, m.send_node) for m in self.graph.messages]

    def _comm_keys(self) -> list[NodeKey]:
        return self._send_keys() + [(m.dst, m.recv_node) for m in self.graph.messages]

    def _data(self, key: NodeKey) -> tuple[int, ...]:
        """Messages whose data node ``key`` holds: its receive, or the receive it reduces."""
        if key in self.graph.recv_of:
            return (self.graph.recv_of[key],)
        if key in self.reductions:
            return (self.reductions[key],)
        return ()

    def _chunk_attribute(self, key: NodeKey) -> int | None:
        try:
            value = get_attr(self.graph.nodes[key], CHUNK_ATTRIBUTE)
        except KeyError:
            return None
        except ValueError as err:
            raise TacosError(f"{self.graph.where(key)}: {err}") from None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TacosError(
                f"{self.graph.where(key)}: {CHUNK_ATTRIBUTE} {value!r} is not a chunk id"
            )
        ranks = self.graph.et_set.num_ranks
        # A correct collective moves nearly every chunk at least once (All-to-All leaves
        # its ranks' own blocks), so ids far beyond the messages sent name no real chunk.
        limit = 2 * len(self.graph.messages) + ranks * ranks + ranks
        if value >= limit:
            raise TacosError(
                f"{self.graph.where(key)}: {CHUNK_ATTRIBUTE} {value} is far beyond the "
                f"{len(self.graph.messages)} messages these traces send (chunk ids are below "
                f"{limit}); the attribute must number the collective's chunks"
            )
        return value

    def _explicit_chunk(self, index: int) -> int:
        message = self.graph.messages[index]
        sent = self._chunk_attribute((message.src, message.send_node))
        received = self._chunk_attribute((message.dst, message.recv_node))
        if sent != received:
            raise TacosError(
                f"{self.graph.where((message.dst, message.recv_node))}: receives chunk "
                f"{received}, but its send carries {CHUNK_ATTRIBUTE} {sent}"
            )
        assert sent is not None
        return sent

    def units_of(self, m: int) -> list[int]:
        """Global ids of the units message ``m`` moves."""
        return list(range(self.first_unit[m], self.first_unit[m + 1]))

    def _carried(
        self,
    ) -> tuple[list[list[tuple[int, ...]]], dict[tuple[int, int], list[list[int]]]]:
        """Per message and unit, the units of received data it carries (several: a reduction),
        and per (rank, peer) the units of each message that carry the rank's own data.

        A send of data of its own size forwards (or reduces) it unit by unit; a larger
        one carries its sources' units, then the rank's own data; a smaller one some
        part of its sources, which is a guess (every unit waits for all of them).
        """
        graph = self.graph
        carried: list[list[tuple[int, ...]]] = []
        own: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
        for m, sources in enumerate(self.sources):
            message, units = graph.messages[m], graph.units[m]
            same_size = [self.units_of(j) for j in sources if graph.units[j] == units]
            gathered = [u for j in sources for u in self.units_of(j)]
            if same_size:
                carried.append([tuple(src[k] for src in same_size) for k in range(units)])
            elif len(gathered) <= units:
                carried.append([(u,) for u in gathered] + [()] * (units - len(gathered)))
                fresh = self.units_of(m)[len(gathered) :]
                own[(message.src, message.dst)].append(fresh)
                self.fresh_units.update(fresh)
            else:
                carried.append([tuple(gathered)] * units)
                self.partial.add(m)
                self.guesses.append(
                    f"{graph.where((message.src, message.send_node))} sends {message.size} "
                    "bytes of data received in messages of other sizes; which part is unknown"
                )
        return carried, own

    def _infer_classes(
        self,
        kind: CollectiveKind,
        own: dict[tuple[int, int], list[list[int]]],
        same_chunk_to_peers: bool,
    ) -> list[tuple[int, ...]]:
        """Union-find over units: a unit joins the units of the data it carries."""
        parent = list(range(self.first_unit[-1]))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        def join(units: list[int], others: list[int]) -> None:
            for unit, other in zip(units, others, strict=True):
                parent[root(unit)] = root(other)

        for m, per_unit in enumerate(self.unit_sources):
            if m in self.partial:
                continue  # which of its sources' units it carries is unknown
            for unit, sources in zip(self.units_of(m), per_unit, strict=True):
                for source in sources:
                    join([unit], [source])
        self._note_fresh_sends(own, same_chunk_to_peers, join)
        self._note_missing_reductions(kind)
        classes = [
            tuple(root(u) for u in self.units_of(m)) for m in range(len(self.graph.messages))
        ]
        self._note_unmet_reductions(classes)
        return classes

    def _note_fresh_sends(
        self,
        fresh: dict[tuple[int, int], list[list[int]]],
        same_chunk_to_peers: bool,
        join: Callable[[list[int], list[int]], None],
    ) -> None:
        """Ranks sending their own data more than once: the guess, and its joins."""
        per_rank: dict[int, list[list[list[int]]]] = defaultdict(list)
        for (rank, _), messages in sorted(fresh.items()):
            per_rank[rank].append(messages)
        several = {
            rank: sum(map(len, lists))
            for rank, lists in per_rank.items()
            if sum(map(len, lists)) > 1
        }
        if several:
            self.fresh_guess = True
            rank, count = min(several.items())
            self.guesses.append(
                f"{len(several)} rank(s) send their own data in several messages (rank {rank}: "
                f"{count}); "
                + ("the k-th to each peer is taken as one chunk" if same_chunk_to_peers
                   else "each is taken as a chunk of its own")
            )  # fmt: skip
        for rank, lists in sorted(per_rank.items()):
            if rank in several and same_chunk_to_peers:
                for messages in lists[1:]:
                    for units, first in zip(messages, lists[0], strict=False):
                        if len(units) == len(first):
                            join(units, first)

    def _note_unmet_reductions(self, classes: list[tuple[int, ...]]) -> None:
        """A rank that ends several reduction chains which never meet: one chunk or several?"""
        forwarded = {m for sources in self.sources for m in sources}
        ends: dict[int, set[int]] = defaultdict(set)
        for m in set(self.reductions.values()) - forwarded:
            ends[self.graph.messages[m].dst].update(classes[m])
        several = sorted(rank for rank, chunks in ends.items() if len(chunks) > 1)
        if several:
            self.guesses.append(
                f"{len(several)} rank(s) (the first: {several[0]}) end reduction chains that "
                "never meet; each is taken as a chunk of its own"
            )

    def _note_missing_reductions(self, kind: CollectiveKind) -> None:
        """A reducing collective whose traces record no reduction (no COMP after a receive)."""
        if kind.reduces and not self.reductions:
            self.guesses.append(
                f"the {kind} records no reduction (no COMP node depends on a receive), so how "
                "received data is combined is unknown"
            )

    def _ends(self) -> tuple[dict[int, list[int]], dict[int, list[int]], dict[int, NodeKey]]:
        """Per chunk class: ranks that send it fresh, ranks that keep it, first fresh send."""
        origins: dict[int, list[int]] = defaultdict(list)
        first_seen: dict[int, NodeKey] = {}
        senders: dict[int, set[int]] = defaultdict(set)
        receivers: dict[int, list[int]] = defaultdict(list)
        first_unit = 0
        for i, message in enumerate(self.graph.messages):
            for unit, chunk in enumerate(self.chunk_class[i], start=first_unit):
                senders[chunk].add(message.src)
                receivers[chunk].append(message.dst)
                if unit in self.fresh_units or self.explicit and not self.sources[i]:
                    origins[chunk].append(message.src)
                    key = (message.src, message.send_node)
                    first_seen[chunk] = min(first_seen.get(chunk, key), key)
            first_unit += len(self.chunk_class[i])
        sinks = {chunk: sorted(set(ranks) - senders[chunk]) for chunk, ranks in receivers.items()}
        return {c: sorted(set(r)) for c, r in origins.items()}, sinks, first_seen


# ------------------------------------------------------------------- numbering
@dataclass(frozen=True)
class _Numbering:
    chunk_of: dict[int, int]  # chunk class -> chunk id
    per_rank: int
    root: int | None


def _number_chunks(kind: CollectiveKind, lineage: _Lineage, ranks: int) -> _Numbering:
    """Chunk ids in the collective's numbering (see tacos.collective), and its root."""
    classes = sorted({c for chunks in lineage.chunk_class for c in chunks})
    by_origin = {c: (lineage.origins.get(c) or [0])[0] for c in classes}
    by_sink = {c: (lineage.sinks.get(c) or [by_origin[c]])[0] for c in classes}
    root = None
    if kind.rooted:
        ends = by_origin if kind in (CollectiveKind.BROADCAST, CollectiveKind.SCATTER) else by_sink
        root = Counter(ends.values()).most_common(1)[0][0]
    if lineage.explicit:
        # Chunk ids come in blocks of chunks_per_rank, so the highest id moved tells how
        # many, rounding up: the last All-to-All block (the last rank's chunks to itself)
        # never moves. Nor does the root's own block of a Gather or Scatter.
        count = {CollectiveKind.BROADCAST: 1, CollectiveKind.REDUCE: 1,
                 CollectiveKind.ALL_TO_ALL: ranks * ranks}.get(kind, ranks)  # fmt: skip
        if kind in (CollectiveKind.GATHER, CollectiveKind.SCATTER) and root == ranks - 1:
            count -= 1
        return _Numbering({c: c for c in classes}, math.ceil((classes[-1] + 1) / count), root)
    block_of = {
        CollectiveKind.REDUCE_SCATTER: by_sink,
        CollectiveKind.SCATTER: by_sink,
        CollectiveKind.BROADCAST: dict.fromkeys(classes, 0),
        CollectiveKind.REDUCE: dict.fromkeys(classes, 0),
        CollectiveKind.ALL_TO_ALL: {c: by_origin[c] * ranks + by_sink[c] for c in classes},
    }.get(kind, by_origin)
    blocks: dict[int, list[int]] = defaultdict(list)
    for c in sorted(classes, key=lambda c: lineage.first_seen.get(c, (0, 0))):
        blocks[block_of[c]].append(c)
    per_rank = max(len(members) for members in blocks.values())
    chunk_of = {
        c: block * per_rank + k for block, members in blocks.items() for k, c in enumerate(members)
    }
    return _Numbering(chunk_of, per_rank, root)


# --------------------------------------------------------------------- timing
Hop = tuple[int, float, float]
"""(link id, start, end)."""


def _replay(graph: _Graph, topology: Topology) -> list[list[Hop]]:
    """Run the traces on the cost model; the hops each message takes, with their times.

    A node runs once all its ``data_deps`` have completed (a receive also waits
    for its message); sends queue on each link in the order they are issued. A
    message of k units holds a link as k chunks would; a reduction takes the cost
    model's time, any other COMP node its ``duration_micros``. These times order
    the transfers; :func:`_schedule` then times them as ``tacos simulate`` does.
    """
    unit = graph.unit_bytes
    routes: dict[tuple[int, int], list[Route]] = defaultdict(list)
    for table in routes_from(topology, unit):
        for route in table:
            routes[(route.src, route.dst)].append(route)
    arrival, busy = topology.link_times_us(unit), topology.link_busy_times_us(unit)
    reductions = graph.reductions()
    link_free = [0.0] * len(topology.links)
    hops: list[list[Hop]] = [[] for _ in graph.messages]
    dependants: dict[NodeKey, list[NodeKey]] = defaultdict(list)
    waiting: dict[NodeKey, int] = {}
    for key, deps in graph.deps.items():
        waiting[key] = len(deps) + (key in graph.recv_of)
        for dep in deps:
            dependants[dep].append(key)
    events: list[tuple[float, int, Any]] = []
    sequence = itertools.count()  # ties in time: first pushed, first served
    done: dict[NodeKey, float] = {}

    def push(time: float, event: Any) -> None:
        heapq.heappush(events, (time, next(sequence), event))

    def ready(key: NodeKey, now: float) -> None:
        if key not in graph.send_of:
            if key in reductions:
                now += topology.cost.reduce_us(graph.messages[reductions[key]].size)
            elif graph.nodes[key].type == NodeType.COMP_NODE:
                now += graph.nodes[key].duration_micros
            push(now, ("done", key))
            return
        message = graph.messages[graph.send_of[key]]
        candidates = routes.get((message.src, message.dst))
        if not candidates:
            raise TacosError(
                f"{graph.where(key)} sends to rank {message.dst}, but topology "
                f"{topology.name!r} has neither a link {message.src}->{message.dst} nor a path "
                "through switches only; import on a topology that has one (the default is "
                "fully connected)"
            )
        shortest = min(len(r.links) for r in candidates)
        route = min(
            (r for r in candidates if len(r.links) == shortest),
            key=lambda r: (link_free[r.links[0]], r.links),
        )
        push(now, ("hop", graph.send_of[key], route.links, 0))

    for key in graph.nodes:
        if waiting[key] == 0:
            ready(key, 0.0)
    while events:
        now, _, event = heapq.heappop(events)
        if event[0] == "hop":
            _, index, links, k = event
            link, units = links[k], graph.units[index]
            start = max(now, link_free[link])
            link_free[link] = start + units * busy[link]
            end = start + (units - 1) * busy[link] + arrival[link]
            hops[index].append((link, start, end))
            message = graph.messages[index]
            if k + 1 < len(links):
                push(end, ("hop", index, links, k + 1))
            else:
                push(end, ("done", (message.src, message.send_node)))
            continue
        key = event[1]
        done[key] = now
        followers = list(dependants[key])
        if key in graph.send_of:
            message = graph.messages[graph.send_of[key]]
            followers.append((message.dst, message.recv_node))
        for follower in followers:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                ready(follower, now)
    stuck = next((key for key in graph.nodes if key not in done), None)
    if stuck is not None:
        raise TacosError(
            f"{graph.where(_on_a_cycle(graph, stuck, done))} never runs: through data_deps "
            "and messages it waits on itself; ASTRA-sim would hang"
        )
    return hops


def _on_a_cycle(graph: _Graph, stuck: NodeKey, done: dict[NodeKey, float]) -> NodeKey:
    """A node on a waiting cycle, found by walking back from any node that never ran.

    A node that never ran waits on a predecessor that never ran (a dependency, or
    for a receive its message's send); walking back must repeat a node.
    """
    seen = set()
    while stuck not in seen:
        seen.add(stuck)
        waits_on = [dep for dep in graph.deps[stuck] if dep not in done]
        if stuck in graph.recv_of:
            message = graph.messages[graph.recv_of[stuck]]
            waits_on.append((message.src, message.send_node))
        stuck = next(key for key in waits_on if key not in done)
    return stuck


# ----------------------------------------------------------------- transfers
def _trains(
    graph: _Graph, lineage: _Lineage, hops: list[list[Hop]], message_of: list[int]
) -> list[list[int]]:
    """Per message, each unit's place in its train: the unit whose data arrives last first.

    A unit's data arrives with its source message, at that message's place in its
    own train; sources start before the messages that carry them on, so messages
    are placed in order of their start.
    """
    trains: list[list[int]] = [[0] * units for units in graph.units]
    for m in sorted(range(len(hops)), key=lambda m: hops[m][0][1]):
        if graph.units[m] == 1:
            continue

        def arrival(u: int, m: int = m) -> tuple[float, int]:
            sources = lineage.unit_sources[m][u]
            return max(
                (
                    (hops[j][-1][2], trains[j][s - lineage.first_unit[j]])
                    for s in sources
                    for j in (message_of[s],)
                ),
                default=(0.0, -1),
            )

        places = sorted(range(graph.units[m]), key=lambda u: (arrival(u), -u), reverse=True)
        for place, u in enumerate(places):
            trains[m][u] = place
    return trains


def _transfers(
    topology: Topology,
    graph: _Graph,
    lineage: _Lineage,
    numbering: _Numbering,
    hops: list[list[Hop]],
) -> list[Transfer]:
    """One transfer per unit of each message on each hop, in the order the replay started them.

    A unit's first hop depends on the arrivals of the units it carries (see
    :meth:`_Lineage._carried`), its later hops on its own previous hop. Times are
    provisional (see :func:`_schedule`). A message's units cross each link back to
    back, the one whose data arrived last first: then, as in ASTRA-sim, which sends
    a message whole once all its data is there, none of them leaves early.
    """
    message_of = [m for m, units in enumerate(graph.units) for _ in range(units)]
    trains = _trains(graph, lineage, hops, message_of)
    order = sorted(
        (start, m, k, trains[m][u], u)
        for m, path in enumerate(hops)
        for k, (_, start, _) in enumerate(path)
        for u in range(graph.units[m])
    )
    index = {(m, k, u): i for i, (_, m, k, _, u) in enumerate(order)}

    def arrived(unit: int) -> int:
        """The transfer that brings ``unit`` (a global unit id) to its receiver."""
        m = message_of[unit]
        return index[(m, len(hops[m]) - 1, unit - lineage.first_unit[m])]

    transfers = []
    for start, m, k, _, u in order:
        link = hops[m][k][0]
        previous = [index[(m, k - 1, u)]] if k else []
        deps = previous or [arrived(unit) for unit in lineage.unit_sources[m][u]]
        last = k == len(hops[m]) - 1
        transfers.append(
            Transfer(
                numbering.chunk_of[lineage.chunk_class[m][u]],
                topology.links[link].src,
                topology.links[link].dst,
                link,
                start,
                start,
                Op.REDUCE if last and lineage.reduced[m] else Op.COPY,
                tuple(sorted(deps)),
            )
        )
    return transfers


# ------------------------------------------------------------------- helpers
def _refuse_tenants(et_set: EtSet) -> None:
    """Traces of several tenants (``tacos-export --groups``) run one collective per tenant,
    which no single collective describes: read as one, they would fail its check."""
    rank, tenants = _metadata_attr(et_set, TENANTS_ATTRIBUTE) or (0, None)
    if isinstance(tenants, int) and tenants > 1:
        raise TacosError(
            f"{et_set.path(rank)}: the traces hold {tenants} tenants' collectives together "
            "(tacos-export --groups); check each with the bundle's schedule.json "
            "(tacos verify BUNDLE/schedule.json)"
        )


def _collective_kind(et_set: EtSet) -> CollectiveKind:
    found = _metadata_attr(et_set, "collective")
    if found is None:
        raise TacosError(
            f"{et_set.prefix}: the traces do not say which collective they implement (no "
            "'collective' attribute in their GlobalMetadata); pass --collective"
        )
    rank, value = found
    try:
        return CollectiveKind.parse(str(value))
    except TacosError as err:
        raise TacosError(f"{et_set.path(rank)}: GlobalMetadata 'collective': {err}") from None


def _metadata_attr(et_set: EtSet, name: str) -> tuple[int, object] | None:
    """The first rank (by number) whose GlobalMetadata has attribute ``name``, and its value."""
    for rank, (metadata, _) in sorted(et_set.traces.items()):
        try:
            return rank, get_attr(metadata, name)
        except KeyError:
            continue
        except ValueError as err:
            raise TacosError(f"{et_set.path(rank)}: GlobalMetadata: {err}") from None
    return None


def _no_messages(et_set: EtSet) -> TacosError:
    for rank, (_, nodes) in sorted(et_set.traces.items()):
        for node in nodes:
            if node.type == NodeType.COMM_COLL_NODE:
                return TacosError(
                    f"{et_set.path(rank)}: node {node.id} ({node.name}) is a COMM_COLL_NODE: "
                    "these traces ask ASTRA-sim for its built-in collective and hold no "
                    "sends or receives to import"
                )
    return TacosError(f"{et_set.prefix}: no COMM_SEND_NODE or COMM_RECV_NODE in any rank")


def _message_key(
    node: Node, rank: int, et_set: EtSet, *, sender: bool
) -> tuple[int, int, int, int]:
    """(tag, src, dst, size); the rank's own end defaults to the file's rank, as in ASTRA-sim."""
    where = f"{et_set.path(rank)}: node {node.id}"
    src = _int_attr(node, "comm_src", where, default=rank if sender else None)
    dst = _int_attr(node, "comm_dst", where, default=None if sender else rank)
    tag = _int_attr(node, "comm_tag", where, default=0)
    size = _int_attr(node, "comm_size", where, default=None)
    for peer in (src, dst):
        if not 0 <= peer < et_set.num_ranks:
            raise TacosError(f"{where}: peer {peer} is outside ranks 0..{et_set.num_ranks - 1}")
    own, name = (src, "comm_src") if sender else (dst, "comm_dst")
    if own != rank:
        raise TacosError(f"{where}: {name} is {own}, but this is rank {rank}'s trace")
    if src == dst:
        raise TacosError(f"{where}: sends to its own rank {src}; ASTRA-sim aborts on that")
    if size < 1:
        raise TacosError(f"{where}: comm_size {size}; ASTRA-sim aborts on empty messages")
    return (tag, src, dst, size)


def _int_attr(node: Node, name: str, where: str, *, default: int | None) -> int:
    """An integer attribute; ``default`` when absent (an error when there is no default)."""
    try:
        value = get_attr(node, name)
    except KeyError:
        if default is None:
            raise TacosError(f"{where}: attribute {name!r} is missing") from None
        return default
    except ValueError as err:
        raise TacosError(f"{where}: {err}") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TacosError(f"{where}: attribute {name!r} must be an integer, got {value!r}")
    return value
