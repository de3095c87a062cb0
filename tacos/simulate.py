"""Independent event-driven replay of a Schedule on its topology (alpha-beta links).

The recorded start and end times are *not* trusted: only the structure is
used. Each link serves its transfers one at a time, in the order the schedule
lists them on that link; a transfer starts once it is at the head of its link's
queue, the link is idle and all its dependencies have completed, and it then
takes ``latency + chunk_bytes / bandwidth``. The collective time is when the
last transfer completes.

For a schedule from :func:`tacos.synthesize` the replay reproduces every
start and end time exactly; for an imported schedule it gives the time the
algorithm would take on this topology.

``sends_in_flight`` optionally limits how many transfers a node may have
outstanding at once (a one-port NPU model). ASTRA-sim's standalone workload
route behaves like ``sends_in_flight=1``; among ready transfers waiting for the
port, the one listed first in the schedule goes first, as ASTRA-sim issues
ready nodes in id order.

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
    transfers = schedule.transfers
    count = len(transfers)
    links = schedule.topology.links
    nbytes = schedule.collective.chunk_bytes

    queues: dict[int, deque[int]] = defaultdict(deque)
    for i in sorted(range(count), key=lambda i: (transfers[i].start, i)):
        queues[transfers[i].link].append(i)
    waiting = [len(set(t.deps)) for t in transfers]
    dependants: list[list[int]] = [[] for _ in range(count)]
    for i, t in enumerate(transfers):
        for d in set(t.deps):
            dependants[d].append(i)

    start = [0.0] * count
    end = [0.0] * count
    link_idle: defaultdict[int, bool] = defaultdict(lambda: True)
    busy_time: dict[int, float] = defaultdict(float)
    completions: list[tuple[float, int]] = []
    outstanding: defaultdict[int, int] = defaultdict(int)
    port_queue: defaultdict[int, list[int]] = defaultdict(list)

    def try_start(link_id: int, now: float) -> None:
        queue = queues[link_id]
        if not (link_idle[link_id] and queue and waiting[queue[0]] == 0):
            return
        i = queue[0]
        src = transfers[i].src
        if sends_in_flight is not None and outstanding[src] >= sends_in_flight:
            if i not in port_queue[src]:
                heapq.heappush(port_queue[src], i)
            return
        queue.popleft()
        link_idle[link_id] = False
        outstanding[src] += 1
        start[i] = now
        end[i] = now + links[link_id].transfer_time_us(nbytes)
        busy_time[link_id] += end[i] - now
        heapq.heappush(completions, (end[i], i))

    for link_id in list(queues):
        try_start(link_id, 0.0)
    done = 0
    while completions:
        now, i = heapq.heappop(completions)
        done += 1
        link_id = transfers[i].link
        link_idle[link_id] = True
        outstanding[transfers[i].src] -= 1
        if port_queue[transfers[i].src]:
            try_start(transfers[heapq.heappop(port_queue[transfers[i].src])].link, now)
        for j in dependants[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                try_start(transfers[j].link, now)
        try_start(link_id, now)

    if done < count:
        stuck = next(q[0] for q in queues.values() if q)
        raise TacosError(
            f"the schedule deadlocks: transfer {stuck} (link {transfers[stuck].link}) waits "
            "forever for its dependencies; its dependency graph or link order has a cycle"
        )
    return SimulationResult(max(end, default=0.0), tuple(start), tuple(end), dict(busy_time))
