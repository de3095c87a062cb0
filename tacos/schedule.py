"""The schedule IR: every chunk movement over every link, with its timing and causes.

A :class:`Schedule` is plain data. The synthesizer and the importers write it;
the verifier, the simulator and every exporter read it. Transfers are kept in
start-time order, so a transfer's dependencies always have smaller indices.

The JSON form is versioned (``format`` + ``version``) and column-oriented so
that large schedules stay compact; floats are written with ``repr`` and read
back bit-identically, so a round trip is lossless.

:meth:`Schedule.per_rank` is the one place that turns the global transfer list
into per-node programs (ordered sends and receives with the receives each send
waits for); exporters build on it instead of re-deriving it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from tacos.collective import Collective
from tacos.errors import TacosError, describe, whole_number
from tacos.jsonfile import load_json, parse_json
from tacos.output import write_text_atomic
from tacos.topology import Topology

SCHEDULE_FORMAT = "tacos-schedule"
SCHEDULE_SET_FORMAT = "tacos-schedule-set"
SCHEDULE_VERSION = 1
_COLUMNS = ("chunk", "src", "dst", "link", "start", "end", "op", "deps")


class Op(StrEnum):
    """What the receiver does with the chunk: overwrite (copy) or accumulate (reduce)."""

    COPY = "copy"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class Transfer:
    """One chunk crossing one link during ``[start, end]`` microseconds.

    ``end`` is when the chunk has arrived (and, for a reduction, been added in);
    how long the link itself stays busy is the topology's link model
    (:mod:`tacos.linkmodel`). ``deps`` are indices of earlier transfers whose
    data this one sends: the transfer that brought the chunk to ``src`` or, for a
    reduction, every transfer that added a contribution to it at ``src``.
    """

    chunk: int
    src: int
    dst: int
    link: int
    start: float
    end: float
    op: Op = Op.COPY
    deps: tuple[int, ...] = ()


class StepKind(StrEnum):
    SEND = "send"
    RECV = "recv"


@dataclass(frozen=True, slots=True)
class RankStep:
    """One send or receive in an NPU's program.

    A step moves one *message*: a transfer between two NPUs, or a chain of
    transfers through switches (``hops``, first to last). ``transfer`` is the
    message's last hop, the one that delivers to the receiving NPU; it names the
    message uniquely. ``waits_for`` lists the messages (receives on this same
    NPU) that must complete before a send.
    """

    kind: StepKind
    transfer: int
    peer: int
    chunk: int
    op: Op
    time: float
    waits_for: tuple[int, ...] = ()
    hops: tuple[int, ...] = ()


@dataclass(frozen=True)
class RankProgram:
    """The ordered steps of one node (start-time order, receives before sends on ties)."""

    node: int
    steps: tuple[RankStep, ...]

    @property
    def sends(self) -> tuple[RankStep, ...]:
        return tuple(s for s in self.steps if s.kind is StepKind.SEND)

    @property
    def recvs(self) -> tuple[RankStep, ...]:
        return tuple(s for s in self.steps if s.kind is StepKind.RECV)


@dataclass
class Schedule:
    """A collective algorithm on a topology: the transfers, in start-time order."""

    topology: Topology
    collective: Collective
    transfers: Sequence[Transfer]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def collective_time_us(self) -> float:
        """When the last transfer ends (0 for an empty schedule)."""
        end = getattr(self.transfers, "end", None)  # a TransferTable's column
        if end is not None:
            return float(end.max()) if len(end) else 0.0
        return max((t.end for t in self.transfers), default=0.0)

    def messages(self) -> list[tuple[int, ...]]:
        """NPU-to-NPU messages as chains of transfer indices, ordered by their last hop.

        Formats without switches see a switch path as one message from the NPU
        that entered the fabric to the NPU that left it. Switches forward each
        arrival exactly once (the verifier checks it), so chains are unique.
        """
        return message_chains(self.transfers, self.topology)

    @property
    def sends_in_flight(self) -> int | None:
        """The NPU port limit the schedule was made for (None: unlimited)."""
        value = self.meta.get("sends_in_flight")
        return None if value is None else int(value)

    def per_rank(self) -> dict[int, RankProgram]:
        """Per-NPU programs for every NPU that sends or receives.

        Steps are ordered by the time the message leaves its sender; at equal
        times receives come first and then transfer index, so both ends list
        their common messages in the same order. A send waits for the receives
        named in its first hop's ``deps``; switch hops are folded into messages
        (see :meth:`messages`).
        """
        steps: dict[int, list[tuple[float, int, int, RankStep]]] = {}
        for hops in self.messages():
            first, last = self.transfers[hops[0]], self.transfers[hops[-1]]
            index = hops[-1]
            send = RankStep(
                StepKind.SEND, index, last.dst, last.chunk, last.op, first.start, first.deps, hops
            )
            recv = RankStep(
                StepKind.RECV, index, first.src, last.chunk, last.op, first.start, (), hops
            )
            steps.setdefault(first.src, []).append((first.start, 1, index, send))
            steps.setdefault(last.dst, []).append((first.start, 0, index, recv))
        return {
            node: RankProgram(node, tuple(step for *_, step in sorted(entries)))
            for node, entries in sorted(steps.items())
        }

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
        if hasattr(self.transfers, "columns"):  # a TransferTable: straight from its arrays
            columns = self.transfers.columns()
        else:
            for t in self.transfers:
                for name in _COLUMNS:
                    value = getattr(t, name)
                    columns[name].append(
                        value.value if name == "op" else list(value) if name == "deps" else value
                    )
        return {
            "format": SCHEDULE_FORMAT,
            "version": SCHEDULE_VERSION,
            "collective": self.collective.to_dict(),
            "collective_time_us": self.collective_time_us,
            "meta": self.meta,
            "topology": self.topology.to_dict(),
            "transfers": columns,
        }

    def to_json(self) -> str:
        """Deterministic text: one line per top-level field and per transfer column."""
        data = self.to_dict()
        lines = []
        for key, value in data.items():
            if key in ("transfers", "topology"):
                inner = ",\n".join(f"  {json.dumps(k)}: {_compact(v)}" for k, v in value.items())
                lines.append(f" {json.dumps(key)}: {{\n{inner}\n }}")
            else:
                lines.append(f" {json.dumps(key)}: {_compact(value)}")
        return "{\n" + ",\n".join(lines) + "\n}\n"

    def save(self, path: str | Path) -> None:
        write_text_atomic(Path(path), self.to_json())

    @classmethod
    def from_dict(cls, data: Any, source: str = "schedule") -> Schedule:
        if not isinstance(data, dict) or data.get("format") != SCHEDULE_FORMAT:
            raise TacosError(
                f'{source}: not a TACOS schedule (expected "format": {SCHEDULE_FORMAT!r})'
            )
        version = data.get("version")
        if version != SCHEDULE_VERSION:
            raise TacosError(
                f"{source}: schedule version {describe(version)} is not supported "
                f"(this tacos reads version {SCHEDULE_VERSION}); re-synthesize or upgrade tacos"
            )
        for key in ("collective", "topology", "transfers"):
            if key not in data:
                raise TacosError(f"{source}: missing field {key!r}")
        topology = Topology.from_dict(data["topology"], f"{source}: topology")
        try:  # a valid schedule's NPUs all reach each other (failed ones are removed)
            topology.check_connected()
        except TacosError as err:
            raise TacosError(f"{source}: topology: {err}") from None
        collective = Collective.from_dict(data["collective"], f"{source}: collective")
        transfers = _transfers_from_columns(data["transfers"], topology, f"{source}: transfers")
        return cls(topology, collective, transfers, dict(data.get("meta") or {}))

    @classmethod
    def from_json(cls, text: str, source: str = "schedule") -> Schedule:
        return cls.from_dict(parse_json(text, source), source)

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        return cls.from_dict(load_json(path, "schedule"), str(path))


def message_chains(transfers: Sequence[Transfer], topology: Topology) -> list[tuple[int, ...]]:
    """Transfers grouped into NPU-to-NPU messages (see :meth:`Schedule.messages`)."""
    chains = []
    for index, t in enumerate(transfers):
        if topology.is_switch(t.dst):
            continue
        chain = [index]
        while topology.is_switch(transfers[chain[0]].src):
            deps = transfers[chain[0]].deps
            if len(deps) != 1:
                raise TacosError(
                    f"transfer {chain[0]} leaves a switch without exactly one incoming "
                    "transfer to forward; the schedule does not verify"
                )
            chain.insert(0, deps[0])
        chains.append(tuple(chain))
    return chains


def save_schedules(path: str | Path, schedules: Sequence[Schedule]) -> None:
    """One schedule as a schedule file; several tenants as one schedule-set file."""
    if len(schedules) == 1:
        schedules[0].save(path)
        return
    body = ",\n".join(s.to_json().rstrip("\n") for s in schedules)
    text = (
        f'{{"format": "{SCHEDULE_SET_FORMAT}", "version": {SCHEDULE_VERSION}, '
        f'"schedules": [\n{body}\n]}}\n'
    )
    write_text_atomic(Path(path), text)


def load_schedules(path: str | Path) -> list[Schedule]:
    """A schedule file (one tenant) or a schedule-set file (several)."""
    path = Path(path)
    data = load_json(path, "schedule")
    if isinstance(data, dict) and data.get("format") == SCHEDULE_SET_FORMAT:
        if data.get("version") != SCHEDULE_VERSION:
            raise TacosError(
                f"{path}: schedule-set version {describe(data.get('version'))} is not supported "
                f"(this tacos reads version {SCHEDULE_VERSION}); upgrade tacos"
            )
        items = data.get("schedules")
        if not isinstance(items, list) or not items:
            raise TacosError(f"{path}: 'schedules' must be a non-empty list")
        return [Schedule.from_dict(item, f"{path}: schedules[{i}]") for i, item in enumerate(items)]
    return [Schedule.from_dict(data, str(path))]


def merge_tenants(schedules: Sequence[Schedule]) -> Schedule:
    """Several tenants' schedules on one topology as one schedule, for joint replay and export.

    Transfers are concatenated (dependencies and chunk ids shifted so they stay
    distinct) and re-sorted by start time. The merged collective lists every
    tenant's ranks; it describes the traffic, not a collective to verify: verify
    each tenant's own schedule.
    """
    if len(schedules) == 1:
        return schedules[0]
    first = schedules[0]
    transfers: list[Transfer] = []
    chunk_offset = 0
    for schedule in schedules:
        base = len(transfers)
        transfers.extend(
            replace(
                t,
                chunk=t.chunk + chunk_offset,
                deps=tuple(d + base for d in t.deps),
            )
            for t in schedule.transfers
        )
        chunk_offset += schedule.collective.num_chunks
    order = sorted(range(len(transfers)), key=lambda i: (transfers[i].start, transfers[i].link, i))
    position = {old: new for new, old in enumerate(order)}
    merged = [
        replace(transfers[old], deps=tuple(sorted(position[d] for d in transfers[old].deps)))
        for old in order
    ]
    ranks = tuple(r for s in schedules for r in s.collective.ranks)
    collective = replace(first.collective, ranks=ranks)
    meta = {**first.meta, "tenants": [list(s.collective.ranks) for s in schedules]}
    return Schedule(first.topology, collective, merged, meta)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _id(value: Any, where: str) -> int:
    """A chunk, node, link or transfer number: whole, and within the 64-bit integers every
    array and format keeps it in (whether it names something real is for :mod:`tacos.verify`)."""
    number = whole_number(value, where)
    if not -(2**63) <= number < 2**63:
        raise TacosError(f"{where}: {describe(number)} is out of range")
    return number


def _transfers_from_columns(columns: Any, topology: Topology, source: str) -> list[Transfer]:
    if not isinstance(columns, dict) or set(columns) != set(_COLUMNS):
        raise TacosError(f"{source}: needs exactly the columns {', '.join(_COLUMNS)}")
    for name in _COLUMNS:
        if not isinstance(columns[name], list):
            raise TacosError(f"{source}: column {name!r} must be a list, one entry per transfer")
    count = len(columns["chunk"])
    for name in _COLUMNS:
        if len(columns[name]) != count:
            raise TacosError(f"{source}: column {name!r} must be a list of {count} entries")
    transfers = []
    for i in range(count):
        where = f"{source}[{i}]"
        try:
            op = Op(columns["op"][i])
        except ValueError:
            raise TacosError(
                f"{where}: op {describe(columns['op'][i])} is not 'copy' or 'reduce'"
            ) from None
        try:
            transfer = Transfer(
                _id(columns["chunk"][i], f"{where}: chunk"),
                _id(columns["src"][i], f"{where}: src"),
                _id(columns["dst"][i], f"{where}: dst"),
                _id(columns["link"][i], f"{where}: link"),
                float(columns["start"][i]),
                float(columns["end"][i]),
                op,
                tuple(_id(d, f"{where}: deps") for d in columns["deps"][i]),
            )
        except (TypeError, ValueError) as err:
            raise TacosError(f"{where}: bad value ({err})") from None
        if not 0 <= transfer.link < len(topology.links):
            raise TacosError(f"{where}: link {transfer.link} does not exist in the topology")
        if any(not 0 <= d < count for d in transfer.deps):
            raise TacosError(f"{where}: a dependency is not a transfer index in 0..{count - 1}")
        transfers.append(transfer)
    return transfers
