"""TACOS greedy link-chunk matching on the time-expanded network (TEN).

This is the core every collective is built from: spread chunks from where
they are to the nodes that want them. Time moves from event to event (a
transfer arrives, a link frees, a chunk becomes available). At each event,
every idle link ``u -> v`` that could do something is matched with one chunk
that ``u`` holds and ``v`` neither holds nor is already receiving; the link is
then busy as the topology's link model says (:mod:`tacos.linkmodel`). Because every link frees
at its own time, heterogeneous links need no common time step.

Links are used through :mod:`routes <tacos.synthesizer.routes>`: a direct
NPU-to-NPU link, or a path through switches that ends at an NPU (switches
forward each chunk once and keep nothing). A link into a switch is matched
with a destination and a chunk at once: of the destinations that take a
chunk, one the chunk reaches soonest over the
:class:`~tacos.synthesizer.routes.Fabric` (the equal-cost path that arrives
first given the links' bookings; a switch hop waits in the switch until its
outgoing link is free, so later hops are booked in order), ties at random.
Such a path shares its links (NICs, inter-switch links) with many others, so
it carries a chunk only when no node nearer the receiver holds or is receiving
it: a chunk enters each server or pod once and spreads inside it locally.
The free uplinks into one crossbar (a switch linked to NPUs only, such as an
NVSwitch), and those into the NICs of one leaf switch, are first matched with
distinct destinations, as a crossbar scheduler matches inputs to outputs
(:func:`~tacos.synthesizer.routes.matching_groups`,
:meth:`_SpreadState.match_uplinks`). The uplink of a host with no other
link sends its own chunks first: while some destination lacks a chunk the host
is the source of, only such destinations and chunks count
(:meth:`_SpreadState._takers`).

A direct link leaves a chunk to faster links when they suffice: it does not
start a chunk its receiver wants if the receiver's other direct in-links
(:func:`~tacos.synthesizer.routes.faster_rivals`) can bring everything the
receiver still lacks strictly before this transfer would arrive (each rival
sends back to back from when it is free, at most what its sender holds, and
the chunks can be shared out among them: Hall's condition over the rivals,
:func:`rivals_deliver_all`). A slow link that takes the last chunk of a node
otherwise finishes the collective late (upstream TACOS's 7x10 heterogeneous
mesh: 38 chunks over a corner's slow link where 37 fit). The link looks again
when the first of those rival transfers would arrive, so it never starves.

A faster link may also overtake a slower one: it sends a chunk its receiver is
already getting over a slower direct link when its copy would arrive strictly
sooner (and it has nothing else for the receiver, or the slow transfer can
still carry something else the receiver lacks). The slow transfer is then
bound late: when it lands, it carries instead a chunk its sender held when it
started and the receiver still lacks (the policy's pick; a transfer with none
is dropped). So a slow link does not hold back a chunk a fast one could bring,
and what it brings is what the fast links did not (:meth:`_SpreadState.rebind`).
Upstream TACOS gets a similar effect by sending duplicates and replacing chunks
on arrival, but it replaces with chunks the sender got after the transfer began.

A node that does not want a chunk may still relay it, but only towards a node
that does: it must be strictly closer (in per-chunk link time) than the sender
to some node still waiting for that chunk. This keeps Gather, Scatter,
All-to-All and collectives over a subset of NPUs from flooding the network.

Which of several eligible chunks a link sends is the policy:

* ``"random"`` -- the plain TACOS rule: uniformly at random.
* ``"rarest"`` (default) -- the chunk fewest of ``v``'s in-neighbours (NPUs
  linked to ``v`` directly or through one switch) hold (so the other links
  into ``v`` keep something to send), then the chunk with the
  fewest copies in the network; remaining ties at random. When more than
  ``RAREST_COMPARE_ALL`` chunks are eligible, only those in the 64-chunk word
  of one drawn at random compete (a full scan per decision would dominate the
  run time at thousands of NPUs; ``benchmarks/policies.py`` measures the same
  collective times as the full scan). Measured on rings, meshes, tori and hypercubes
  it is never worse on average and often reaches the lower bound where random
  does not (``benchmarks/quality.py``).

The order in which idle links are matched is a seeded shuffle, so the same
seed gives the same schedule. Or, on networks without switches, fewest first
(``fewest_first``): each time, of the free links left, the one with the
fewest chunks it could send (first in the shuffled order on ties), counted
again after each match. A link taken first may send the one chunk another
link into the same NPU had for it: on torus2d:3x3 at one chunk per NPU, where
each NPU's four neighbours can each bring two of the chunks it lacks, the
shuffled order leaves some link with nothing at every seed and the All-Gather
takes three chunk times where two suffice; fewest first takes two. It loses
elsewhere (the heterogeneous 4x4 mesh's All-Gather, whose links free at
different times), so it is one more restart of the greedy, not the rule
(:mod:`.attempts`). Node state is one Python integer per node used
as a bit set over chunks, which keeps this reference implementation short and
exact; it is the oracle that faster implementations are tested against.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from tacos.errors import TacosError
from tacos.schedule import Op, Transfer
from tacos.synthesizer.routes import (
    Fabric,
    Route,
    faster_rivals,
    matching_groups,
    one_uplink_hosts,
    rarest_neighbours,
    routes_from,
)
from tacos.topology import Topology

DeliveryCallback = Callable[[int], None]
ChunkPolicy = Literal["rarest", "random"]
CHUNK_POLICIES: tuple[ChunkPolicy, ...] = ("rarest", "random")

_AVAILABLE, _ARRIVED, _LINK_FREE, _LOOK_AGAIN = 0, 1, 2, 3
NEARER = 1 - 1e-9
"""A node is nearer than a path when its distance is below the path's time by more than rounding."""
SOONER = 1 - 1e-9
"""A faster copy overtakes a transfer when it arrives sooner by more than rounding."""
RAREST_COMPARE_ALL = 8
"""The "rarest" policy compares all eligible chunks up to this many (else one word of them)."""
MAX_RIVALS = 8
"""A link leaves chunks to at most this many rivals that could send (Hall's condition
is checked over all their subsets); with more, it sends."""


@dataclass(frozen=True, slots=True)
class ChunkSource:
    """``node`` holds ``chunk`` from ``time`` on, made available by transfers ``deps``."""

    node: int
    chunk: int
    time: float = 0.0
    deps: tuple[int, ...] = ()


def greedy_spread(
    topology: Topology,
    sources: Iterable[ChunkSource],
    wants: Sequence[int],
    chunk_bytes: int,
    rng: random.Random,
    *,
    policy: ChunkPolicy = "rarest",
    link_free_at: Sequence[float] | None = None,
    index_offset: int = 0,
    on_delivery: DeliveryCallback | None = None,
    sends_in_flight: int | None = None,
    own_first: bool = True,
    near_fraction: float = 1.0,
    fewest_first: bool = False,
) -> list[Transfer]:
    """Spread chunks until every node holds the chunks it wants.

    Args:
        topology: links to use; NPUs may relay chunks, switches only forward.
        sources: where each chunk is at first, and since when.
        wants: per node, a bit set of the chunks it must end with.
        chunk_bytes: size of every chunk.
        rng: tie-breaking randomness (seeded by the caller).
        policy: how a link picks among eligible chunks (see module docs).
        link_free_at: per link, when it becomes usable (links busy with earlier work).
        index_offset: added to transfer indices used as dependencies, for schedules
            that continue an earlier list of transfers.
        on_delivery: called with how many wanted chunks arrived at each event.
        sends_in_flight: at most this many messages outstanding per NPU (a message
            holds its sender's port until it arrives); None for no limit.
        own_first: whether a host with one uplink sends its own chunks first
            (:meth:`_SpreadState._takers`).
        near_fraction: a path through switches leaves a chunk to the nodes nearer to
            its receiver than this fraction of the path's time (:class:`_NearHoldings`).
        fewest_first: match free links fewest sendable chunks first rather than in the
            shuffled order (module docs); networks without switches only.

    Returns:
        Transfers in the order they were decided (dependencies first; sort by
        start time for link order). Relays may have received chunks nobody
        ended up needing; see :func:`tacos.synthesizer.timing.prune`.
    """
    state = _SpreadState(
        topology, list(sources), wants, chunk_bytes, rng, policy, index_offset, own_first,
        near_fraction,
    )  # fmt: skip
    state.ports = sends_in_flight
    if fewest_first:
        if topology.num_switches:
            raise ValueError("fewest_first matches direct links only: no switches")
        state.fewest_first = True
    for link_id, free_at in enumerate(link_free_at or ()):
        if free_at > 0:
            state.free_at[link_id] = free_at
            state.push(free_at, _LINK_FREE, -1, link_id)

    while state.events and state.remaining > 0:
        now = state.events[0][0]
        freed, touched, delivered = state.apply_events(now)
        state.remaining -= delivered
        if on_delivery and delivered:
            on_delivery(delivered)
        if state.remaining == 0:
            break
        # Only links that just freed, or whose source just gained a chunk, can have a
        # new match: eligibility of an idle link only grows with what its source holds.
        candidates = set(freed)
        for node in touched:
            candidates.update(state.routes_by_first_link_of[node])
        ordered = [lk for lk in sorted(candidates) if state.free_at[lk] <= now]
        rng.shuffle(ordered)
        state.match_links(ordered, now)

    if state.remaining > 0:
        node, chunk = state.first_missing()
        raise TacosError(
            f"topology {topology.name!r}: chunk {chunk} can never reach node {node}; "
            "check that the topology is strongly connected"
        )
    return state.without_dropped()


class _SpreadState:
    """Everything the event loop of :func:`greedy_spread` reads and updates."""

    def __init__(
        self,
        topology: Topology,
        sources: list[ChunkSource],
        wants: Sequence[int],
        chunk_bytes: int,
        rng: random.Random,
        policy: ChunkPolicy,
        index_offset: int,
        own_first: bool,
        near_fraction: float,
    ) -> None:
        self.topology = topology
        self.wants = wants
        self.rng = rng
        self.policy = policy
        self.index_offset = index_offset
        self.durations = topology.link_times_us(chunk_bytes)  # start to arrival
        self.busy = topology.link_busy_times_us(chunk_bytes)  # start to the link's next use
        n = topology.num_nodes
        self.holds = [0] * n
        self.incoming = [0] * n
        self.free_at = [0.0] * len(topology.links)
        self.remaining = sum(w.bit_count() for w in wants)
        self.transfers: list[Transfer] = []
        self.source_deps: dict[tuple[int, int], tuple[int, ...]] = {}
        self.own_first = [0] * n  # per host sending its own chunks first: those chunks
        self.arrived_by: dict[tuple[int, int], int] = {}
        self.events: list[tuple[float, int, int, int, int]] = []
        self._order = 0
        self.ports: int | None = None
        self.fewest_first = False
        self.outstanding: defaultdict[int, int] = defaultdict(int)
        self.sender_of: dict[int, int] = {}  # last hop of a message -> its sending NPU

        self.routes_by_link: dict[int, list[Route]] = defaultdict(list)
        self.fabric = Fabric(topology, self.durations) if topology.num_switches else None
        for node_routes in routes_from(topology, chunk_bytes, self.fabric):
            for route in node_routes:
                self.routes_by_link[route.links[0]].append(route)
        self.routes_by_first_link_of: list[list[int]] = [[] for _ in range(n)]
        for link_id in sorted(self.routes_by_link):
            self.routes_by_first_link_of[topology.links[link_id].src].append(link_id)
        self.in_neighbours = rarest_neighbours(topology)
        group_of = matching_groups(topology)
        self.matching_of_uplink = {  # per routed link into a matched switch: its group
            link_id: group_of[topology.links[link_id].dst]
            for link_id in self.routes_by_link
            if group_of[topology.links[link_id].dst] >= 0
        }
        self.rivals = faster_rivals(topology, self.durations)
        self.looking_again: set[int] = set()  # links with a pending _LOOK_AGAIN event
        # Late binding: per receiver, chunk -> transfer over a link with rivals bringing it;
        # such a transfer's sender's holdings when it started; those overtaken (until they
        # land); those dropped.
        self.overtakable: list[dict[int, int]] = [{} for _ in range(n)]
        self.held_at_start: dict[int, int] = {}
        self.overtaken: set[int] = set()
        self.dropped: set[int] = set()

        num_chunks = 1 + max([s.chunk for s in sources] + [w.bit_length() for w in wants])
        self.copies = [0] * num_chunks
        # Per chunk, the nodes that want it and neither hold it nor are receiving it (a bit
        # set: what a node holds or receives only grows, so bits are only cleared).
        self.waiting_for = [0] * num_chunks
        for node, want in enumerate(wants):
            for chunk in _members(want):
                self.waiting_for[chunk] |= 1 << node
        self._targets = [node for node, want in enumerate(wants) if want]
        self._nearer: dict[tuple[int, int], int] = {}  # (u, v) -> targets v is nearer to
        self._distance_to: dict[int, dict[int, float]] = {}
        self.near = _NearHoldings(
            self._distances_to, self.holds, self.incoming, topology.num_npus, 1 / near_fraction
        )
        one_uplink = one_uplink_hosts(topology)
        for source in sources:
            self.copies[source.chunk] += 1
            self.source_deps[(source.node, source.chunk)] = source.deps
            if own_first and one_uplink[source.node]:
                self.own_first[source.node] |= 1 << source.chunk
            self.push(source.time, _AVAILABLE, source.chunk, source.node)

    def push(self, time: float, kind: int, a: int, b: int) -> None:
        heapq.heappush(self.events, (time, self._order, kind, a, b))
        self._order += 1

    def apply_events(self, now: float) -> tuple[list[int], set[int], int]:
        """Pop every event at ``now``; return freed links, nodes that gained, deliveries."""
        freed: list[int] = []
        touched: set[int] = set()
        delivered = 0
        landed_overtaken: list[int] = []
        while self.events and self.events[0][0] == now:
            _, _, kind, a, b = heapq.heappop(self.events)
            if kind == _LINK_FREE:
                freed.append(b)
                continue
            if kind == _LOOK_AGAIN:
                self.looking_again.discard(b)
                freed.append(b)
                continue
            if kind == _AVAILABLE:
                node, chunk = b, a
                self.near.gain(node, 1 << chunk)
            else:
                sender = self.sender_of.pop(a)
                self.outstanding[sender] -= 1
                touched.add(sender)  # its port is free again
                if a in self.overtaken:
                    self.overtaken.remove(a)
                    landed_overtaken.append(a)
                    continue
                transfer = self.transfers[a]
                node, chunk = transfer.dst, transfer.chunk
                self.incoming[node] &= ~(1 << chunk)
                self.arrived_by[(node, chunk)] = a + self.index_offset
                if self.overtakable[node].get(chunk) == a:
                    del self.overtakable[node][chunk]
                    del self.held_at_start[a]
            delivered += self._hold(node, chunk, touched)
        # In (start, link) order, which the compiled engines can follow too.
        landed_overtaken.sort(key=lambda i: (self.transfers[i].start, self.transfers[i].link))
        for index in landed_overtaken:
            delivered += self.rebind(index, touched)
        return freed, touched, delivered

    def _hold(self, node: int, chunk: int, touched: set[int]) -> int:
        """``node`` now holds ``chunk``; 1 if that delivers a chunk it wants, else 0."""
        bit = 1 << chunk
        if self.holds[node] & bit:
            return 0
        self.holds[node] |= bit
        self.waiting_for[chunk] &= ~(1 << node)
        touched.add(node)
        return 1 if self.wants[node] & bit else 0

    def rebind(self, index: int, touched: set[int]) -> int:
        """Bind the overtaken transfer ``index``, landing now, to a chunk its receiver lacks.

        Of the chunks its sender held when it started that the receiver wants
        and neither holds nor is receiving, the policy's pick; with none, the
        transfer is dropped from the schedule. Returns the deliveries (0 or 1).
        """
        transfer = self.transfers[index]
        u, v = transfer.src, transfer.dst
        held = self.held_at_start.pop(index)
        options = held & self.wants[v] & ~self.holds[v] & ~self.incoming[v]
        if not options:
            self.dropped.add(index)
            return 0
        chunk = self._choose(options, v)
        self.transfers[index] = replace(transfer, chunk=chunk, deps=self._deps_at(u, chunk))
        self.arrived_by[(v, chunk)] = index + self.index_offset
        self.near.gain(v, 1 << chunk)
        self.copies[chunk] += 1
        return self._hold(v, chunk, touched)

    def match_links(self, ordered: list[int], now: float) -> None:
        """Match the free links ``ordered`` one by one, but several free uplinks of one
        matching group together, where the first of them comes (:meth:`match_uplinks`);
        or fewest sendable chunks first (module docs)."""
        if self.fewest_first:
            left = list(ordered)
            while left:
                counts = [self._sendable(link_id) for link_id in left]
                self.match_link(left.pop(counts.index(min(counts))), now)
            return
        together: defaultdict[int, list[int]] = defaultdict(list)
        for link_id in ordered:
            if link_id in self.matching_of_uplink:
                together[self.matching_of_uplink[link_id]].append(link_id)
        for link_id in ordered:
            if link_id not in self.matching_of_uplink:
                self.match_link(link_id, now)
                continue
            uplinks = together.pop(self.matching_of_uplink[link_id], None)
            if uplinks is None:  # matched with the first of its group's
                continue
            if len(uplinks) > 1:
                self.match_uplinks(uplinks, now)
            else:
                self.match_link(link_id, now)

    def _sendable(self, link_id: int) -> int:
        """How many chunks ``link_id``'s sender holds that its receiver neither holds nor
        is receiving (what the fast engine counts per link)."""
        link = self.topology.links[link_id]
        receiver_has = self.holds[link.dst] | self.incoming[link.dst]
        return (self.holds[link.src] & ~receiver_has).bit_count()

    def match_uplinks(self, uplinks: list[int], now: float) -> None:
        """Match the free ``uplinks`` of one matching group with distinct destinations.

        One at a time, each uplink would take one of its soonest destinations
        at random; a later one may then find its only destinations taken and
        queue a chunk behind another while a receiver it could have fed
        idles (inside an NVSwitch server: GPU downlinks idle while the
        holders' uplinks serve receivers others could have served). A
        crossbar's outputs are the only thing its inputs contend for, so the
        uplinks' soonest destinations are matched first, as a crossbar
        scheduler would: each uplink takes one nobody has taken, at random
        (the draw :meth:`match_link` makes), or else one along an augmenting
        path, which makes the matching maximum (:func:`match_destinations`).
        Matched uplinks then send, the one with the fewest chunks for its
        destination first (so it still has one when the others have chosen);
        one whose destination no longer takes a chunk by the time matched
        for chooses as :meth:`match_link` does. An uplink left unmatched
        waits until the first matched one frees (its destinations are being
        served; queueing a chunk behind theirs measured slower, and costs a
        second look at every destination), unless a matched one did not send.

        The uplinks into the NICs of one leaf (a rail of up to 32 servers)
        contend for the leaf's links down to its NICs as a crossbar's for its
        outputs; matched, a 4-server rail cluster's All-Gather with one chunk
        per GPU went from 1.47 to 1.19 of its lower bound, and at 16 chunks
        per GPU from 1.17 to 1.12 of the throughput bound. Where a rail spans
        several leaves (64 servers) the local destinations, reached sooner
        and no longer colliding, are all served before the other leaves',
        whose chunks then arrive late: one chunk per GPU went from 1.10 to
        1.18 of the bound there (16 chunks: 1.15 to 1.12 of throughput).
        Matching all of a fabric's NIC uplinks as one group measured worse
        (a 4-server rail cluster: 1.19 to 1.47 at some seeds).
        """
        takers = [self._takers(link_id, now) for link_id in uplinks]
        soonests = [min((arrive for arrive, _, _ in t.values()), default=0.0) for t in takers]
        tight = [
            sorted(dst for dst, (arrive, _, _) in t.items() if arrive == soonest)
            for t, soonest in zip(takers, soonests, strict=True)
        ]
        matched = match_destinations(tight, self.rng)
        for i in sorted(matched, key=lambda i: (takers[i][matched[i]][1].bit_count(), i)):
            self.match_link(uplinks[i], now, only=(matched[i], soonests[i]))
        wake = min((self.free_at[uplinks[i]] for i in matched), default=now)
        for i, link_id in enumerate(uplinks):
            if i in matched or not tight[i]:
                continue
            if wake <= now:
                self.match_link(link_id, now)
            elif link_id not in self.looking_again:
                self.looking_again.add(link_id)
                self.push(wake, _LOOK_AGAIN, -1, link_id)

    def match_link(self, link_id: int, now: float, only: tuple[int, float] | None = None) -> None:
        """Give the free link ``link_id`` one chunk towards one NPU it leads to (``only``
        = (NPU, time): that NPU if it still takes one by then, see :meth:`match_uplinks`)."""
        sender = self.topology.links[link_id].src
        if self.ports is not None and self.outstanding[sender] >= self.ports:
            return
        routes = self.routes_by_link.get(link_id)
        if not routes:  # leaves a switch: only part of routes
            return
        if self.fabric is None or not self.topology.is_switch(self.topology.links[link_id].dst):
            (route,) = routes
            overtakes = self._overtakes(link_id, now)
            candidates = self._candidates(sender, route.dst, 0, overtakes)
            if candidates and not self._left_to_rivals(link_id, candidates, now, overtakes):
                self._send(sender, route.dst, route.links, self._choose(candidates, route.dst), now)
            return
        # A switch uplink: of the destinations that take a chunk, one reached soonest.
        takers = self._takers(link_id, now)
        if only is not None and only[0] in takers and takers[only[0]][0] <= only[1]:
            takers = {only[0]: takers[only[0]]}
        if not takers:
            return
        soonest = min(arrive for arrive, _, _ in takers.values())
        tied = [dst for dst, (arrive, _, _) in takers.items() if arrive == soonest]
        dst = tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
        _, candidates, links = takers[dst]
        self._send(sender, dst, links, self._choose(candidates, dst), now)

    def _takers(self, uplink: int, now: float) -> dict[int, tuple[float, int, tuple[int, ...]]]:
        """The NPUs the switch uplink ``uplink`` would bring a chunk to now: per NPU, when
        the chunk would arrive, the chunks to choose from and the path.

        Own chunks first, where this uplink is the sender's only link out (and
        the spread was asked to, see :mod:`tacos.synthesizer.attempts`): while
        a destination lacks one of the chunks the sender is the source of, only
        those destinations and chunks are offered. Nobody else can spread a
        chunk before its source has sent it, and a host whose one uplink relays
        others' chunks holds its own back (htsim's 8-host fat tree:
        Reduce-Scatter at 16 chunks per NPU went from 1.160 to 1.087 of the
        throughput bound). A GPU that also reaches its server's peers over
        NVLink has them spread its chunks too; there the rule measured slightly
        worse (a 16-server DGX-like Reduce-Scatter at 4 chunks per GPU 1.140 to
        1.151), so it is not applied.
        """
        sender = self.topology.links[uplink].src
        if self.ports is not None and self.outstanding[sender] >= self.ports:
            return {}
        assert self.fabric is not None
        takers = {}
        paths = self.fabric.earliest(uplink, now, self.free_at)
        for dst, (arrive, path_us, links) in paths.items():
            candidates = self._candidates(sender, dst, self.near.holdings(dst, path_us))
            if candidates:
                takers[dst] = (arrive, candidates, links)
        own = self.holds[sender] & self.own_first[sender]
        lacking_own = {
            dst: (arrive, candidates & own, links)
            for dst, (arrive, candidates, links) in takers.items()
            if candidates & own
        }
        return lacking_own or takers

    def _overtakes(self, link_id: int, now: float) -> int:
        """Chunks the direct link ``link_id`` would bring its receiver sooner than the
        slower transfers now bringing them (a bit set; see the module docs).

        Only when the link has nothing else for its receiver, or the slower
        transfer can still land with something the receiver lacks: else the
        slower link's time would be spent for nothing while this one could have
        carried another chunk.
        """
        link = self.topology.links[link_id]
        pending = self.overtakable[link.dst]
        if not pending or self.ports is not None:
            return 0
        arrival = now + self.durations[link_id]
        overtakes = 0
        lacking = self.wants[link.dst] & ~self.holds[link.dst] & ~self.incoming[link.dst]
        idle = not self.holds[link.src] & ~self.holds[link.dst] & ~self.incoming[link.dst]
        for chunk, index in pending.items():
            if (
                self.holds[link.src] >> chunk & 1
                and arrival < self.transfers[index].end * SOONER
                and (idle or self.held_at_start[index] & lacking)
            ):
                overtakes |= 1 << chunk
        return overtakes

    def _candidates(self, u: int, v: int, elsewhere: int, overtakes: int = 0) -> int:
        """The chunks worth sending from ``u`` to ``v`` (a bit set), none of ``elsewhere``.

        Those ``v`` lacks and wants (and neither is receiving nor would get sooner
        than over ``overtakes``), or if it wants none of them, those it would relay
        towards a node waiting for them.
        """
        eligible = self.holds[u] & ~self.holds[v] & ~(self.incoming[v] & ~overtakes) & ~elsewhere
        wanted = eligible & self.wants[v]
        if wanted or not eligible:
            return wanted
        # v brings chunk c closer when it is nearer than u to a node still waiting for c.
        nearer, waiting_for = self._nearer_targets(u, v), self.waiting_for
        return sum(1 << c for c in _members(eligible) if waiting_for[c] & nearer)

    def _left_to_rivals(self, link_id: int, candidates: int, now: float, overtakes: int) -> bool:
        """Whether the direct link ``link_id`` leaves its wanted ``candidates`` to faster links.

        A chunk it ``overtakes`` counts as one its receiver still lacks. If so,
        the link looks again when the first rival transfer counted on would
        arrive (unless it already will look again).
        """
        v = self.topology.links[link_id].dst
        rivals = self.rivals[link_id]
        if not rivals or self.ports is not None or not candidates & self.wants[v]:
            return False
        lacking = self.wants[v] & ~self.holds[v] & ~(self.incoming[v] & ~overtakes)
        horizon = now + self.durations[link_id]
        capacities, holdings, first_arrivals = [], [], []
        for rival in rivals:
            first_arrival = max(now, self.free_at[rival]) + self.durations[rival]
            have = self.holds[self.topology.links[rival].src] & lacking
            if first_arrival < horizon and have:
                sends = math.ceil((horizon - first_arrival) / self.busy[rival])
                capacities.append(min(sends, have.bit_count()))
                holdings.append(have)
                first_arrivals.append(first_arrival)
        if not rivals_deliver_all(lacking, capacities, holdings):
            return False
        if link_id not in self.looking_again:
            self.looking_again.add(link_id)
            self.push(min(first_arrivals), _LOOK_AGAIN, -1, link_id)
        return True

    def _choose(self, candidates: int, v: int) -> int:
        """The policy's pick among ``candidates`` (a non-empty bit set) for receiver ``v``."""
        if self.policy == "random":
            return _random_member(candidates, self.rng)
        return self._rarest(candidates, v)

    def _nearer_targets(self, u: int, v: int) -> int:
        """The nodes that want some chunk and that ``v`` is nearer to than ``u`` (a bit set,
        computed once per pair: relay decisions ask it for every chunk they weigh)."""
        nearer = self._nearer.get((u, v))
        if nearer is None:
            nearer = 0
            for target in self._targets:
                distance = self._distances_to(target)
                if distance.get(v, math.inf) < distance.get(u, math.inf):
                    nearer |= 1 << target
            self._nearer[(u, v)] = nearer
        return nearer

    def _distances_to(self, target: int) -> dict[int, float]:
        """Per-chunk time from every node to ``target`` (cached).

        Over the links themselves: a chain of routes is a path through NPUs and
        switches and the fastest path splits at NPUs into routes, so this is the
        distance over routes, found without listing every pair of NPUs.
        """
        if target not in self._distance_to:
            links, into = self.topology.links, self.topology.in_links
            dist = {target: 0.0}
            heap = [(0.0, target)]
            while heap:
                d, node = heapq.heappop(heap)
                if d > dist[node]:
                    continue
                for link_id in into[node]:
                    prev, cost = links[link_id].src, self.durations[link_id]
                    if d + cost < dist.get(prev, math.inf):
                        dist[prev] = d + cost
                        heapq.heappush(heap, (d + cost, prev))
            self._distance_to[target] = dist
        return self._distance_to[target]

    def _rarest(self, bits: int, v: int) -> int:
        """The chunk held by fewest in-neighbours of ``v``, then with fewest copies.

        Up to ``RAREST_COMPARE_ALL`` eligible chunks are all compared; from
        more, only those in the 64-chunk word of one drawn at random (a full
        scan per decision would dominate the run time at thousands of NPUs).
        Ties at random.
        """
        members = list(_members(bits))
        if len(members) > RAREST_COMPARE_ALL:
            word = members[self.rng.randrange(len(members))] >> 6
            members = [chunk for chunk in members if chunk >> 6 == word]
        neighbours = self.in_neighbours[v]
        scores = [
            (sum(self.holds[u] >> chunk & 1 for u in neighbours), self.copies[chunk])
            for chunk in members
        ]
        best_score = min(scores)
        best = [chunk for chunk, score in zip(members, scores, strict=True) if score == best_score]
        return best[self.rng.randrange(len(best))] if len(best) > 1 else best[0]

    def _hop_times(self, links: tuple[int, ...], now: float) -> list[tuple[float, float]]:
        """Start and end of each hop if the first link starts at ``now``."""
        times = []
        ready = now
        for link_id in links:
            start = max(ready, self.free_at[link_id])
            ready = start + self.durations[link_id]
            times.append((start, ready))
        return times

    def _deps_at(self, u: int, chunk: int) -> tuple[int, ...]:
        """What a transfer of ``chunk`` from ``u`` depends on: how ``u`` got it."""
        deps = self.source_deps.get((u, chunk))
        return (self.arrived_by[(u, chunk)],) if deps is None else deps

    def _send(self, u: int, v: int, links: tuple[int, ...], chunk: int, now: float) -> None:
        deps = self._deps_at(u, chunk)
        nodes = [u, *(self.topology.links[i].dst for i in links)]
        for hop, (link_id, (start, end)) in enumerate(
            zip(links, self._hop_times(links, now), strict=True)
        ):
            self.free_at[link_id] = start + self.busy[link_id]
            if hop == 0:
                self.push(self.free_at[link_id], _LINK_FREE, -1, link_id)
            transfer = Transfer(
                chunk, nodes[hop], nodes[hop + 1], link_id, start, end, Op.COPY, deps
            )
            deps = (len(self.transfers) + self.index_offset,)
            self.transfers.append(transfer)
        index = len(self.transfers) - 1
        self.push(self.transfers[-1].end, _ARRIVED, index, v)
        self.sender_of[index] = u
        self.outstanding[u] += 1
        overtaken = self.overtakable[v].pop(chunk, None)  # only a faster copy sends it again
        if overtaken is not None:
            self.overtaken.add(overtaken)  # its copy stays counted as this one
        else:
            self.copies[chunk] += 1
        if self.rivals[links[0]]:  # a slower link: faster ones may overtake it
            self.overtakable[v][chunk] = index
            self.held_at_start[index] = self.holds[u]
        self.incoming[v] |= 1 << chunk
        self.waiting_for[chunk] &= ~(1 << v)
        self.near.gain(v, 1 << chunk)

    def without_dropped(self) -> list[Transfer]:
        """The transfers but the dropped ones, dependencies renumbered (none are on those).

        Overtaken transfers that have not landed when the spread is done are dropped:
        their receivers have everything they want.
        """
        self.dropped |= self.overtaken
        if not self.dropped:
            return self.transfers
        kept = [i for i in range(len(self.transfers)) if i not in self.dropped]
        offset = self.index_offset
        new_index = {old + offset: new + offset for new, old in enumerate(kept)}
        return [
            replace(t, deps=tuple(new_index.get(d, d) for d in t.deps))
            for t in (self.transfers[i] for i in kept)
        ]

    def first_missing(self) -> tuple[int, int]:
        for node, want in enumerate(self.wants):
            for chunk in _members(want & ~self.holds[node]):
                return node, chunk
        raise AssertionError("nothing is missing")


class _NearHoldings:
    """Per receiver, the chunks that nodes nearer to it than a path hold or are receiving.

    A path through switches shares its links with many others (NICs,
    inter-switch links), so a chunk should cross it only when no node closer
    to the receiver has it: from there it reaches the receiver sooner and over
    cheaper links. This is what makes a chunk enter each server or pod of a
    cluster once and spread inside it locally.

    Only nodes nearer than a fraction of the path count when distances are
    scaled by its inverse (``scale``): at one chunk per NPU, a leaf's NICs are
    idle while the chunks wait to be relayed by a server nearer the receiver
    (:mod:`.attempts`).

    What a node holds or is receiving only grows, so each answer is kept as a
    bit set that is or-ed with every chunk a node nearer than its cut gains.
    """

    def __init__(
        self,
        distances_to: Callable[[int], dict[int, float]],
        holds: list[int],
        incoming: list[int],
        num_npus: int,
        scale: float = 1.0,
    ) -> None:
        self._distances_to = distances_to
        self._scale = scale
        self._num_npus = num_npus
        self._holds = holds
        self._incoming = incoming
        self._nearest_first: dict[int, tuple[list[float], list[int]]] = {}
        self._masks: dict[tuple[int, int], int] = {}
        self._watchers: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)

    def holdings(self, v: int, path_us: float) -> int:
        """Chunks held or being received by nodes nearer to ``v`` than ``path_us``."""
        distances, nodes = self._nearest(v)
        key = (v, bisect.bisect_left(distances, path_us * NEARER))
        mask = self._masks.get(key)
        if mask is None:
            mask = 0
            for node in nodes[: key[1]]:
                mask |= self._holds[node] | self._incoming[node]
                self._watchers[node].append(key)
            self._masks[key] = mask
        return mask

    def gain(self, node: int, bit: int) -> None:
        """``node`` now holds or is receiving the chunk ``bit``."""
        for key in self._watchers.get(node, ()):
            self._masks[key] |= bit

    def _nearest(self, v: int) -> tuple[list[float], list[int]]:
        """NPUs other than ``v`` by distance to ``v`` (and their distances)."""
        found = self._nearest_first.get(v)
        if found is None:
            order = sorted(
                (d * self._scale, node)
                for node, d in self._distances_to(v).items()
                if node != v and node < self._num_npus
            )
            found = ([d for d, _ in order], [node for _, node in order])
            self._nearest_first[v] = found
        return found


def match_destinations(tight: list[list[int]], rng: random.Random) -> dict[int, int]:
    """A maximum matching of uplinks to destinations: uplink ``i`` may take one of
    ``tight[i]`` (ascending ids). Returns uplink -> destination.

    Each uplink in turn takes one destination nobody has taken, at random, or
    else one along an augmenting path (Kuhn's algorithm: an uplink that finds
    none then finds none later either, so the matching is maximum).
    """
    owner: dict[int, int] = {}
    for i, dsts in enumerate(tight):
        free = [dst for dst in dsts if dst not in owner]
        if free:
            owner[free[rng.randrange(len(free))] if len(free) > 1 else free[0]] = i
        elif dsts:
            _augment(tight, owner, i)
    return {i: dst for dst, i in owner.items()}


def _augment(tight: list[list[int]], owner: dict[int, int], uplink: int) -> None:
    """Give ``uplink`` a destination of ``tight[uplink]`` along an augmenting path, if
    there is one (``owner`` unchanged if not).

    ``owner`` maps each matched destination to its uplink. Depth first, in
    the order of the lists; each destination is visited once. Iterative, as
    thousands of uplinks may enter one matching group.
    """
    visited: set[int] = set()
    stack = [(uplink, 0)]  # an uplink and the position of its next destination to try
    while stack:
        at, position = stack[-1]
        if position == len(tight[at]):
            stack.pop()
            continue
        stack[-1] = (at, position + 1)
        dst = tight[at][position]
        if dst in visited:
            continue
        visited.add(dst)
        if dst in owner:
            stack.append((owner[dst], 0))
            continue
        for along, next_position in stack:  # each uplink takes the destination it tried
            owner[tight[along][next_position - 1]] = along
        return


def rivals_deliver_all(lacking: int, capacities: list[int], holdings: list[int]) -> bool:
    """Whether rivals can share out the chunks of ``lacking`` (a bit set) between them.

    Rival ``i`` can send ``capacities[i]`` chunks, each one of ``holdings[i]``.
    That is a bipartite matching with capacities; by Hall's condition it
    exists when, for every set Q of rivals, the chunks only rivals of Q hold
    are at most what Q can send. Chunks are counted by which rivals hold them
    (one count per subset) and summed over subsets of each Q. At most
    ``MAX_RIVALS`` rivals (else False: 2**rivals subsets).
    """
    if sum(capacities) < lacking.bit_count() or len(capacities) > MAX_RIVALS:
        return False
    subsets = 1 << len(capacities)
    only_within = [0] * subsets  # first: chunks held by exactly that set; then: by a subset of it
    for chunk in _members(lacking):
        only_within[sum(1 << i for i, have in enumerate(holdings) if have >> chunk & 1)] += 1
    for i in range(len(capacities)):
        for q in range(subsets):
            if q >> i & 1:
                only_within[q] += only_within[q ^ (1 << i)]
    can_send = [0] * subsets
    for q in range(1, subsets):
        low = (q & -q).bit_length() - 1
        can_send[q] = can_send[q & (q - 1)] + capacities[low]
    return all(only_within[q] <= can_send[q] for q in range(subsets))


def _members(bits: int) -> Iterable[int]:
    """Indices of the set bits of ``bits``, lowest first."""
    while bits:
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low


def _random_member(bits: int, rng: random.Random) -> int:
    """A uniformly random index of a set bit of ``bits`` (which is non-zero)."""
    for _ in range(rng.randrange(bits.bit_count())):
        bits &= bits - 1
    return (bits & -bits).bit_length() - 1
