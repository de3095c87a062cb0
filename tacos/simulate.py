"""Independent event-driven replay of a Schedule on its topology (alpha-beta links).

The recorded start and end times are *not* trusted: only the structure is
used. Each link serves its transfers one at a time: a link leaving an NPU in
the order the schedule lists them on it (an NPU runs a program), a link
leaving a switch in the order they became ready (a switch is a FIFO queue). A
transfer starts once it is next on its link, the link is idle and all its
dependencies have completed. The topology's cost model
(:mod:`tacos.linkmodel`) says how long it keeps the link (``latency +
chunk_bytes / bandwidth`` in the paper's model, the serialization alone in the
pipelined one), when it arrives, and how long a reduction then takes before its
result may be used. The collective time is when the last transfer completes.

For a schedule from :func:`tacos.synthesize` the replay reproduces every
start and end time exactly; for an imported schedule it gives the time the
algorithm would take on this topology.

``sends_in_flight`` optionally limits how many messages an NPU may have
outstanding at once (a one-port NPU model; a message through switches holds
the port until it arrives). ASTRA-sim's standalone workload route behaves like
``sends_in_flight=1``; among ready messages waiting for the port, the one listed
first in the schedule goes first, as ASTRA-sim issues ready nodes in id order.

Example:
    >>> import tacos
    >>> topo = tacos.from_spec("ring:4")
    >>> spec = tacos.Collective(tacos.CollectiveKind.ALL_GATHER, tuple(topo.npus))
    >>> schedule = tacos.synthesize(topo, spec)
    >>> tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    True
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from tacos.errors import TacosError
from tacos.linkmodel import CostModel
from tacos.schedule import Op, Schedule, Transfer, message_chains
from tacos.topology import Topology


@dataclass(frozen=True)
class SimulationResult:
    """Replayed times: per transfer (same indices as the schedule) and overall."""

    collective_time_us: float
    start_us: tuple[float, ...]
    end_us: tuple[float, ...]
    link_busy_us: dict[int, float]

    def link_utilisation(self) -> dict[int, float]:
        """Fraction of the collective time each used link was busy."""
        if self.collective_time_us <= 0:
            return {}
        return {k: v / self.collective_time_us for k, v in self.link_busy_us.items()}


def simulate(
    schedule: Schedule, *, sends_in_flight: int | None = None, cost: CostModel | None = None
) -> SimulationResult:
    """Replay ``schedule``; raises TacosError if its dependencies can never all be met.

    ``sends_in_flight`` defaults to the port limit the schedule was made for,
    ``cost`` to the cost model of its topology.
    """
    ports = schedule.sends_in_flight if sends_in_flight is None else sends_in_flight
    topology = schedule.topology if cost is None else schedule.topology.with_cost(cost)
    return _replay(schedule.transfers, topology, schedule.collective.chunk_bytes, ports)


def replay_times(
    transfers: Sequence[Transfer],
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
    *,
    streams: Sequence[int] | None = None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Start and end of every transfer when replayed as :func:`simulate` does.

    The synthesizer times its schedules with this, so a schedule's recorded
    times are by definition what the link model gives (the verifier still
    checks them independently).

    ``streams`` (one id per transfer) describes programs whose concurrent streams
    share links, as GPU threadblocks and channels do: each stream sends in the
    listed order, and an NPU's link serves, of the streams' next transfers that
    are ready, the one that became ready first (ties: listed first). Importers
    of such programs time them with it; sorted by start, the result then
    replays to the same times without streams.
    """
    result = _replay(transfers, topology, chunk_bytes, sends_in_flight, streams)
    return result.start_us, result.end_us


def _replay(
    transfers: Sequence[Transfer],
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None,
    streams: Sequence[int] | None = None,
) -> SimulationResult:
    messages = message_chains(transfers, topology) if sends_in_flight is not None else ()
    return _Replay(transfers, topology, chunk_bytes, sends_in_flight, messages, streams).run()


class _Replay:
    """Event-driven state: link queues, dependency counters, NPU send ports."""

    def __init__(
        self,
        transfers: Sequence[Transfer],
        topology: Topology,
        chunk_bytes: int,
        sends_in_flight: int | None,
        messages: Sequence[tuple[int, ...]],
        streams: Sequence[int] | None,
    ) -> None:
        self.transfers = transfers
        self.topology = topology
        self.nbytes = chunk_bytes
        count = len(transfers)
        # An NPU's link runs its transfers in the listed order (NPUs run programs), or
        # each stream's in that order; a switch's link serves whatever became ready
        # first (a FIFO queue).
        self.fixed_order: dict[int, dict[int, deque[int]]] = defaultdict(dict)
        for i in sorted(range(count), key=lambda i: (transfers[i].start, i)):
            if not self.topology.is_switch(transfers[i].src):
                queues = self.fixed_order[transfers[i].link]
                queues.setdefault(0 if streams is None else streams[i], deque()).append(i)
        self.fixed_members = {i for queues in self.fixed_order.values()
                              for queue in queues.values() for i in queue}  # fmt: skip
        self.streams = streams
        self.ready_at = [0.0] * count
        self.behind = _chain_behind(transfers, topology, chunk_bytes) if streams else []
        self.fifo: dict[int, list[tuple[float, tuple[float | int, ...], int]]] = defaultdict(list)
        self.waiting = [len(set(t.deps)) for t in transfers]
        self.dependants: list[list[int]] = [[] for _ in range(count)]
        for i, t in enumerate(transfers):
            for d in set(t.deps):
                self.dependants[d].append(i)
        self.start = [0.0] * count
        self.end = [0.0] * count
        self.link_idle: defaultdict[int, bool] = defaultdict(lambda: True)
        self.busy_time: defaultdict[int, float] = defaultdict(float)
        self.completions: list[tuple[float, int]] = []
        # Links that free before their transfer completes (pipelined links, reductions).
        self.link_frees: list[tuple[float, int]] = []
        self.frees_early: set[int] = set()
        self._link_times: dict[int, tuple[float, float]] = {}
        # Optional one-port NPUs: a message holds its sender's port until it arrives.
        self.ports = sends_in_flight
        self.outstanding: defaultdict[int, int] = defaultdict(int)
        self.port_queue: defaultdict[int, list[int]] = defaultdict(list)
        self.message_end = {hops[-1]: hops[0] for hops in messages}  # last hop -> first hop

    def link_times(self, link_id: int) -> tuple[float, float]:
        """(arrival, busy) time of a message on the link, by the cost model (cached)."""
        times = self._link_times.get(link_id)
        if times is None:
            link, cost = self.topology.links[link_id], self.topology.cost
            arrival_us = cost.arrival_us(link, self.nbytes)
            busy_us = arrival_us if cost.link_model == "paper" else cost.busy_us(link, self.nbytes)
            times = self._link_times[link_id] = (arrival_us, busy_us)
        return times

    @cached_property
    def reduce_us(self) -> float:
        """Time to add a chunk in (asked for at the first reduction, so that spreads never
        stumble on a reduce bandwidth they do not use)."""
        return self.topology.reduce_time_us(self.nbytes)

    def run(self) -> SimulationResult:
        for i in range(len(self.transfers)):
            if self.waiting[i] == 0 and i not in self.fixed_members:
                self.enqueue(i, 0.0)
        self.start_ready({t.link for t in self.transfers}, 0.0)
        finished = 0
        while self.completions:
            # Everything that completes at one instant is applied before anything new
            # starts, so the outcome never depends on the order of simultaneous events.
            now = self.completions[0][0]
            if self.link_frees and self.link_frees[0][0] < now:
                now = self.link_frees[0][0]
            links_to_try: set[int] = set()
            while self.link_frees and self.link_frees[0][0] == now:
                _, link_id = heapq.heappop(self.link_frees)
                self.link_idle[link_id] = True
                links_to_try.add(link_id)
            while self.completions and self.completions[0][0] == now:
                _, i = heapq.heappop(self.completions)
                finished += 1
                t = self.transfers[i]
                if i not in self.frees_early:
                    self.link_idle[t.link] = True
                    links_to_try.add(t.link)
                if i in self.message_end:
                    # A freed port goes to a message already waiting for it, as ASTRA-sim
                    # reissues waiting sends when the send completes.
                    npu = self.transfers[self.message_end[i]].src
                    self.outstanding[npu] -= 1
                    self.drain_port(npu, now)
                for j in self.dependants[i]:
                    self.waiting[j] -= 1
                    if self.waiting[j] == 0:
                        self.ready_at[j] = now
                        if j not in self.fixed_members:
                            self.enqueue(j, now)
                        links_to_try.add(self.transfers[j].link)
            self.start_ready(links_to_try, now)
        if finished < len(self.transfers):
            stuck = next(i for i in range(len(self.transfers)) if self.end[i] == 0.0)
            raise TacosError(
                f"the schedule deadlocks: transfer {stuck} (link {self.transfers[stuck].link}) "
                "waits forever for its dependencies; its dependency graph or link order has a cycle"
            )
        return SimulationResult(
            max(self.end, default=0.0), tuple(self.start), tuple(self.end), dict(self.busy_time)
        )

    def enqueue(self, i: int, ready: float) -> None:
        """Queue a ready transfer on its switch's link.

        A switch serves in order of readiness; ties go by what the transfer is (chunk,
        op, the link it came in on), not by its position, so that re-sorting a schedule
        cannot change its replay. Pipelined links (ASTRA-sim's) let the message that
        entered the fabric first go first, then the one from the lower link (measured:
        then bundles through a switch replay within 0.03%).
        """
        t = self.transfers[i]
        came_in_on = tuple(self.transfers[d].link for d in t.deps)
        identity: tuple[float | int, ...] = (t.chunk, t.op == "reduce", *came_in_on)
        if self.topology.cost.link_model == "pipelined":
            identity = (*(self.start[d] for d in t.deps), *came_in_on, t.chunk, t.op == "reduce")
        heapq.heappush(self.fifo[t.link], (ready, identity, i))

    def next_on(self, link_id: int) -> int | None:
        """The transfer the idle link would serve next, if one is ready."""
        if not self.link_idle[link_id]:
            return None
        queues = self.fixed_order.get(link_id)
        if queues and len(queues) == 1:  # one program on the link: its next transfer
            (queue,) = queues.values()
            return queue[0] if queue and self.waiting[queue[0]] == 0 else None
        if queues:
            heads = [q[0] for q in queues.values() if q and self.waiting[q[0]] == 0]
            return min(heads, key=lambda i: (self.ready_at[i], -self.behind[i], i), default=None)
        fifo = self.fifo.get(link_id)
        return fifo[0][2] if fifo else None

    def start_ready(self, links: set[int], now: float) -> None:
        """Start what can start on ``links``; with NPU ports, lowest schedule index first."""
        contenders: defaultdict[int, list[int]] = defaultdict(list)
        for link_id in sorted(links):
            i = self.next_on(link_id)
            if i is None:
                continue
            src = self.transfers[i].src
            if self.ports is None or self.topology.is_switch(src):
                self.begin(i, now)
            else:
                contenders[src].append(i)
        for npu, ready in contenders.items():
            waiting = self.port_queue[npu]
            for i in ready:
                if i not in waiting:
                    heapq.heappush(waiting, i)
        for npu in sorted(self.port_queue):
            self.drain_port(npu, now)

    def drain_port(self, npu: int, now: float) -> None:
        """Start waiting messages of ``npu`` while its port has room, lowest index first."""
        waiting = self.port_queue[npu]
        blocked = []
        while waiting and self.outstanding[npu] < self.ports:  # type: ignore[operator]
            i = heapq.heappop(waiting)
            if self.next_on(self.transfers[i].link) == i:
                self.outstanding[npu] += 1
                self.begin(i, now)
            else:
                blocked.append(i)
        for i in blocked:
            heapq.heappush(waiting, i)

    def begin(self, i: int, now: float) -> None:
        link_id = self.transfers[i].link
        if i in self.fixed_members:
            self.fixed_order[link_id][0 if self.streams is None else self.streams[i]].popleft()
        else:
            heapq.heappop(self.fifo[link_id])
        self.link_idle[link_id] = False
        self.start[i] = now
        arrival_us, busy_us = self.link_times(link_id)
        self.end[i] = now + arrival_us
        if self.transfers[i].op is Op.REDUCE:
            self.end[i] += self.reduce_us
        free_at = now + busy_us
        if free_at != self.end[i]:
            self.frees_early.add(i)
            heapq.heappush(self.link_frees, (free_at, link_id))
        self.busy_time[link_id] += free_at - now
        heapq.heappush(self.completions, (self.end[i], i))


def _chain_behind(
    transfers: Sequence[Transfer], topology: Topology, chunk_bytes: int
) -> list[float]:
    """Per transfer, the longest chain of arrival times from its start through its dependants.

    Streams sharing a link serve, of transfers ready at the same time, the one
    with the most work behind it first (critical path first, as list schedulers do).
    """
    dependants: list[list[int]] = [[] for _ in transfers]
    for i, t in enumerate(transfers):
        for d in t.deps:
            dependants[d].append(i)
    order = sorted(range(len(transfers)), key=lambda i: transfers[i].start, reverse=True)
    behind = [0.0] * len(transfers)
    for i in order:
        link = topology.links[transfers[i].link]
        own = topology.cost.arrival_us(link, chunk_bytes)
        behind[i] = own + max((behind[j] for j in dependants[i]), default=0.0)
    return behind
