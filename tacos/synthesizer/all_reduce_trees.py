"""All-Reduce on one reduction tree and one broadcast tree per chunk, the two overlapped.

Why: the greedy builds All-Reduce as Reduce-Scatter, then All-Gather. Where
NPUs differ in bandwidth, that order has a floor above the link-capacity bound:
while gathering, a mesh corner must take in every chunk it does not own over
its two links, while reducing it must send as many, and levelled ownership
(:mod:`.ownership`) only trades one phase against the other (on mesh2d:8x8 at
4 chunks per NPU no split of ownership brings the two phases below 1.33x the
bound). Overlapping the phases lifts that floor: a corner's out-links carry
its partial sums while its in-links bring it finished chunks.

How:

1. **Trees.** Chunk ``c`` is reduced into and broadcast from its owner (the
   collective's own layout). Every other NPU picks its parent in the
   reduction tree among the neighbours one hop nearer the owner, and its parent
   in the broadcast tree among the neighbours one hop nearer from it, each time
   the link with the least link time booked so far by the trees of earlier
   chunks. Every path is a shortest one (no tree is deeper than the network's
   diameter) and link loads level out (mesh2d:8x8: the busiest link carries
   1.06x the link-capacity bound).
2. **Order.** Chunks are launched round-robin over their owners (owners in a
   seeded random order), so neighbouring launches load different links.
3. **List scheduling.** Every link serves, of the transfers whose inputs have
   arrived, the one of highest priority. The first pass uses launch order
   (reduction before broadcast, longest remaining path first). Then
   forward-backward rounds: the reversed dependency graph is scheduled taking
   the transfers that ended last first, and the next forward pass takes
   transfers by how late they ended in that backward schedule (the latest
   start time first). The fastest forward pass is re-timed by the replay.

It is one attempt of the entry point's All-Reduce (the faster schedule is
kept), for networks of direct links with uneven NPU bandwidth, the case
above; elsewhere Reduce-Scatter then All-Gather is at its bound or the trees
would need routes through switches.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Op, Transfer
from tacos.synthesizer.ownership import collective_owners
from tacos.synthesizer.timing import renumber, retime_asap
from tacos.topology import Topology

MAX_TREE_TRANSFERS = 300_000
"""Larger All-Reduces are not tried this way (list scheduling runs in Python)."""
FORWARD_BACKWARD_ROUNDS = 6
"""Rounds after the first pass (mesh2d:8x8, 4 chunks per NPU, 4 seeds: 1.21-1.23 of the
bound after 4 rounds, 1.19-1.22 after 8)."""


def tree_all_reduce_applies(
    topology: Topology, specs: Sequence[Collective], sends_in_flight: int | None
) -> bool:
    """Whether :func:`tree_all_reduce` is worth building (see the module docstring)."""
    if len(specs) != 1 or sends_in_flight is not None or topology.num_switches:
        return False
    (spec,) = specs
    if spec.kind is not CollectiveKind.ALL_REDUCE or len(spec.ranks) != topology.num_npus:
        return False
    if 2 * (topology.num_npus - 1) * spec.num_chunks > MAX_TREE_TRANSFERS:
        return False
    in_bandwidth = {
        sum(topology.links[i].bandwidth_GBps for i in topology.in_links[npu])
        for npu in topology.npus
    }
    return len(in_bandwidth) > 1


def tree_all_reduce(topology: Topology, spec: Collective, rng: random.Random) -> list[Transfer]:
    """The All-Reduce of the module docstring, re-timed as soon as possible."""
    owners = collective_owners(spec).tolist()
    link_us = [topology.cost.arrival_us(link, spec.chunk_bytes) for link in topology.links]
    plan = _Plan(topology, owners, link_us)
    launch = _launch_order(owners, rng)
    first = [(launch[t.chunk], t.op is Op.COPY, -rest) for t, rest in plan.transfers]
    transfers = [t for t, _ in plan.transfers]
    timeline = _Timeline(topology, transfers, spec.chunk_bytes)
    best = timeline.forward(first)
    forward = best
    for _ in range(FORWARD_BACKWARD_ROUNDS):
        backward = timeline.backward(list(-forward.end))
        forward = timeline.forward(list(-backward.end))
        if forward.finish_us < best.finish_us:
            best = forward
    order = sorted(range(len(transfers)), key=lambda i: (best.start[i], transfers[i].link, i))
    in_order = [
        Transfer(t.chunk, t.src, t.dst, t.link, float(best.start[i]), float(best.end[i]), t.op,
                 t.deps)
        for i, t in enumerate(transfers)
    ]  # fmt: skip
    return retime_asap(renumber(in_order, order), topology, spec.chunk_bytes)


def _launch_order(owners: Sequence[int], rng: random.Random) -> list[int]:
    """Each chunk's place in launch order: round-robin over owners in a random order."""
    distinct = sorted(set(owners))
    rng.shuffle(distinct)
    place = {owner: index for index, owner in enumerate(distinct)}
    seen: dict[int, int] = {}
    keys = []
    for chunk, owner in enumerate(owners):
        keys.append((seen.get(owner, 0), place[owner], chunk))
        seen[owner] = seen.get(owner, 0) + 1
    launch = [0] * len(owners)
    for position, (_, _, chunk) in enumerate(sorted(keys)):
        launch[chunk] = position
    return launch


class _Plan:
    """Every chunk's two trees as transfers (times unset), each with its remaining path.

    ``transfers[i] = (transfer, rest)``: ``rest`` counts the hops from this
    transfer to the end of its chunk's broadcast, the longest way.
    """

    def __init__(self, topology: Topology, owners: Sequence[int], link_us: Sequence[float]):
        self.topology = topology
        self.load_us = [0.0] * len(topology.links)
        self.link_us = link_us
        self.transfers: list[tuple[Transfer, int]] = []
        hops_cache: dict[int, tuple[dict[int, int], dict[int, int]]] = {}
        for chunk, owner in enumerate(owners):
            if owner not in hops_cache:
                hops_cache[owner] = (_hops(topology, owner, True), _hops(topology, owner, False))
            from_owner, to_owner = hops_cache[owner]
            up = self._parents(owner, to_owner, towards_owner=True)
            down = self._parents(owner, from_owner, towards_owner=False)
            self._add_chunk(chunk, owner, up, down)

    def _parents(self, owner: int, hops: dict[int, int], towards_owner: bool) -> dict[int, int]:
        """Per NPU, the least-loaded link to (or from) a neighbour one hop nearer the owner."""
        topology, chosen = self.topology, {}
        for npu in topology.npus:
            if npu == owner:
                continue
            if towards_owner:
                links = [i for i in topology.out_links[npu]
                         if hops.get(topology.links[i].dst) == hops[npu] - 1]  # fmt: skip
            else:
                links = [i for i in topology.in_links[npu]
                         if hops.get(topology.links[i].src) == hops[npu] - 1]  # fmt: skip
            link = min(links, key=lambda i: (self.load_us[i] + self.link_us[i], i))
            self.load_us[link] += self.link_us[link]
            chosen[npu] = link
        return chosen

    def _add_chunk(self, chunk: int, owner: int, up: dict[int, int], down: dict[int, int]):
        links = self.topology.links
        children: dict[int, list[int]] = {}
        for npu, link in up.items():
            children.setdefault(links[link].dst, []).append(npu)
        below: dict[int, list[int]] = {}
        for npu, link in down.items():
            below.setdefault(links[link].src, []).append(npu)
        # Broadcast depth under each NPU, then reduction depth above each NPU.
        broadcast_order = _breadth_first(owner, below)
        depth_below = {npu: 0 for npu in broadcast_order}
        for npu in reversed(broadcast_order):
            for child in below.get(npu, ()):
                depth_below[npu] = max(depth_below[npu], depth_below[child] + 1)
        reduction_order = _breadth_first(owner, children)
        to_root = {owner: 0}
        for npu in reduction_order[1:]:
            to_root[npu] = to_root[links[up[npu]].dst] + 1
        index: dict[int, int] = {}
        for npu in reversed(reduction_order[1:]):  # children before parents
            index[npu] = len(self.transfers)
            deps = tuple(index[child] for child in children.get(npu, ()))
            link = up[npu]
            reduce = Transfer(chunk, npu, links[link].dst, link, 0.0, 0.0, Op.REDUCE, deps)
            self.transfers.append((reduce, to_root[npu] + depth_below[owner]))
        reduced = tuple(index[child] for child in children.get(owner, ()))
        arrived: dict[int, int] = {}
        for npu in broadcast_order[1:]:  # parents before children
            link = down[npu]
            parent = links[link].src
            deps = reduced if parent == owner else (arrived[parent],)
            arrived[npu] = len(self.transfers)
            copy = Transfer(chunk, parent, npu, link, 0.0, 0.0, Op.COPY, deps)
            self.transfers.append((copy, depth_below[npu] + 1))


def _hops(topology: Topology, owner: int, outwards: bool) -> dict[int, int]:
    """Hops from ``owner`` to every NPU (``outwards``) or from every NPU to ``owner``."""
    hops, queue = {owner: 0}, deque([owner])
    while queue:
        npu = queue.popleft()
        for i in topology.out_links[npu] if outwards else topology.in_links[npu]:
            link = topology.links[i]
            other = link.dst if outwards else link.src
            if other not in hops:
                hops[other] = hops[npu] + 1
                queue.append(other)
    return hops


def _breadth_first(root: int, children: dict[int, list[int]]) -> list[int]:
    order = [root]
    for npu in order:
        order.extend(children.get(npu, ()))
    return order


@dataclass(frozen=True)
class _Times:
    start: np.ndarray
    end: np.ndarray

    @property
    def finish_us(self) -> float:
        return float(self.end.max(initial=0.0))


class _Timeline:
    """List scheduling of fixed transfers on their links, forwards or backwards in time."""

    def __init__(self, topology: Topology, transfers: Sequence[Transfer], chunk_bytes: int):
        cost = topology.cost
        self.link = [t.link for t in transfers]
        self.deps = [tuple(set(t.deps)) for t in transfers]
        self.dependants: list[list[int]] = [[] for _ in transfers]
        for i, deps in enumerate(self.deps):
            for d in deps:
                self.dependants[d].append(i)
        reduce_us = topology.reduce_time_us(chunk_bytes) if any(
            t.op is Op.REDUCE for t in transfers) else 0.0  # fmt: skip
        arrival = [cost.arrival_us(link, chunk_bytes) for link in topology.links]
        busy = arrival if cost.link_model == "paper" else [
            cost.busy_us(link, chunk_bytes) for link in topology.links]  # fmt: skip
        self.lasts_us = [
            arrival[t.link] + (reduce_us if t.op is Op.REDUCE else 0.0) for t in transfers
        ]
        self.busy_us = [busy[t.link] for t in transfers]

    def forward(self, priority: Sequence[object]) -> _Times:
        """Each link serves its ready transfer of smallest ``priority`` whenever it is free."""
        return self._run(self.deps, self.dependants, priority)

    def backward(self, priority: Sequence[object]) -> _Times:
        """The same on the reversed dependency graph (times count back from the end)."""
        return self._run(self.dependants, self.deps, priority)

    def _run(
        self, deps: Sequence[Sequence[int]], dependants: Sequence[Sequence[int]],
        priority: Sequence[object],
    ) -> _Times:  # fmt: skip
        count = len(self.link)
        waiting = [len(d) for d in deps]
        ready: dict[int, list[tuple[object, int]]] = {}
        free_at: dict[int, float] = {}
        start, end = np.zeros(count), np.zeros(count)
        events: list[tuple[float, int, int]] = []  # (time, 0 link frees / 1 arrival, id)

        def make_ready(i: int) -> int:
            heapq.heappush(ready.setdefault(self.link[i], []), (priority[i], i))
            return self.link[i]

        def serve(links: set[int], now: float) -> None:
            for link in sorted(links):
                queue = ready.get(link)
                if queue and free_at.get(link, 0.0) <= now:
                    _, i = heapq.heappop(queue)
                    start[i], end[i] = now, now + self.lasts_us[i]
                    free_at[link] = now + self.busy_us[i]
                    heapq.heappush(events, (free_at[link], 0, link))
                    heapq.heappush(events, (end[i], 1, i))

        serve({make_ready(i) for i in range(count) if not waiting[i]}, 0.0)
        while events:
            now, touched = events[0][0], set()
            while events and events[0][0] == now:
                _, kind, what = heapq.heappop(events)
                if kind == 0:
                    touched.add(what)
                    continue
                for j in dependants[what]:
                    waiting[j] -= 1
                    if not waiting[j]:
                        touched.add(make_ready(j))
            serve(touched, now)
        return _Times(start, end)
