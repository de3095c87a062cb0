"""Independent event-driven replay of a Schedule on its topology (alpha-beta links).

The recorded start and end times are *not* trusted: only the structure is
used. Each link serves its transfers one at a time: a link leaving an NPU in
the order the schedule lists them on it (an NPU runs a program), a link
leaving a switch in the order they became ready (a switch is a FIFO queue). A
transfer starts once it is next on its link, the link is idle and all its
dependencies have completed, and it then takes ``latency + chunk_bytes /
bandwidth``. The collective time is when the last transfer completes.

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
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.schedule import Schedule


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


def simulate(schedule: Schedule, *, sends_in_flight: int | None = None) -> SimulationResult:
    """Replay ``schedule``; raises TacosError if its dependencies can never all be met."""
    replay = _Replay(schedule, sends_in_flight)
    return replay.run()


class _Replay:
    """Event-driven state: link queues, dependency counters, NPU send ports."""

    def __init__(self, schedule: Schedule, sends_in_flight: int | None) -> None:
        self.schedule = schedule
        self.transfers = transfers = schedule.transfers
        self.topology = schedule.topology
        self.nbytes = schedule.collective.chunk_bytes
        count = len(transfers)
        # An NPU's link runs its transfers in the listed order (NPUs run programs);
        # a switch's link serves whatever became ready first (a FIFO queue).
        self.fixed_order: dict[int, deque[int]] = defaultdict(deque)
        for i in sorted(range(count), key=lambda i: (transfers[i].start, i)):
            if not self.topology.is_switch(transfers[i].src):
                self.fixed_order[transfers[i].link].append(i)
        self.fifo: dict[int, list[tuple[float, int]]] = defaultdict(list)
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
        # Optional one-port NPUs: a message holds its sender's port until it arrives.
        self.ports = sends_in_flight
        self.outstanding: defaultdict[int, int] = defaultdict(int)
        self.port_queue: defaultdict[int, list[int]] = defaultdict(list)
        self.message_end: dict[int, int] = {}  # last hop -> first hop
        if sends_in_flight is not None:
            self.message_end = {hops[-1]: hops[0] for hops in schedule.messages()}

    def run(self) -> SimulationResult:
        for i, t in enumerate(self.transfers):
            if self.waiting[i] == 0 and self.topology.is_switch(t.src):
                heapq.heappush(self.fifo[t.link], (0.0, i))
        for link_id in {t.link for t in self.transfers}:
            self.try_start(link_id, 0.0)
        finished = 0
        while self.completions:
            now, i = heapq.heappop(self.completions)
            finished += 1
            t = self.transfers[i]
            self.link_idle[t.link] = True
            if i in self.message_end:
                self.release_port(self.transfers[self.message_end[i]].src, now)
            for j in self.dependants[i]:
                self.waiting[j] -= 1
                if self.waiting[j] == 0:
                    if self.topology.is_switch(self.transfers[j].src):
                        heapq.heappush(self.fifo[self.transfers[j].link], (now, j))
                    self.try_start(self.transfers[j].link, now)
            self.try_start(t.link, now)
        if finished < len(self.transfers):
            stuck = next(i for i in range(len(self.transfers)) if self.end[i] == 0.0)
            raise TacosError(
                f"the schedule deadlocks: transfer {stuck} (link {self.transfers[stuck].link}) "
                "waits forever for its dependencies; its dependency graph or link order has a cycle"
            )
        return SimulationResult(
            max(self.end, default=0.0), tuple(self.start), tuple(self.end), dict(self.busy_time)
        )

    def next_on(self, link_id: int) -> int | None:
        """The transfer the link would serve next, if one is ready."""
        queue = self.fixed_order.get(link_id)
        if queue:
            return queue[0] if self.waiting[queue[0]] == 0 else None
        fifo = self.fifo.get(link_id)
        return fifo[0][1] if fifo else None

    def try_start(self, link_id: int, now: float) -> None:
        if not self.link_idle[link_id]:
            return
        i = self.next_on(link_id)
        if i is None:
            return
        src = self.transfers[i].src
        uses_port = self.ports is not None and not self.topology.is_switch(src)
        if uses_port and self.outstanding[src] >= self.ports:  # type: ignore[operator]
            if i not in self.port_queue[src]:
                heapq.heappush(self.port_queue[src], i)
            return
        if link_id in self.fixed_order and self.fixed_order[link_id]:
            self.fixed_order[link_id].popleft()
        else:
            heapq.heappop(self.fifo[link_id])
        if uses_port:
            self.outstanding[src] += 1
        self.link_idle[link_id] = False
        self.start[i] = now
        self.end[i] = now + self.topology.links[link_id].transfer_time_us(self.nbytes)
        self.busy_time[link_id] += self.end[i] - now
        heapq.heappush(self.completions, (self.end[i], i))

    def release_port(self, npu: int, now: float) -> None:
        self.outstanding[npu] -= 1
        if self.port_queue[npu]:
            self.try_start(self.transfers[heapq.heappop(self.port_queue[npu])].link, now)
