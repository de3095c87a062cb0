"""Collectives on trees per chunk: All-Reduce on one reduction tree and one broadcast tree,
the two overlapped; All-Gather on broadcast trees; Reduce-Scatter as that All-Gather's mirror
(or, where every chunk goes straight from its owner, with its very messages).

Why: the greedy builds All-Reduce as Reduce-Scatter, then All-Gather. Where
NPUs differ in bandwidth, that order has a floor above the link-capacity bound:
while gathering, a mesh corner must take in every chunk it does not own over
its two links, while reducing it must send as many, and levelled ownership
(:mod:`.ownership`) only trades one phase against the other (on mesh2d:8x8 at
4 chunks per NPU no split of ownership brings the two phases below 1.33x the
bound). Overlapping the phases lifts that floor: a corner's out-links carry
its partial sums while its in-links bring it finished chunks. On two servers
joined by a slow network, the greedy's chunks cross it twice (reduced into an
owner in one server, then gathered back), which at one chunk per GPU costs
1.6-1.9x the best bound; reducing each chunk inside both servers and swapping
the two sums crosses once (four servers: twice, but each root sends only two
sums per chunk).

All-Gather on a cluster: the greedy sends a chunk into a server over whichever
NIC is free when it looks, ties at random, so at one chunk per GPU some NICs
bring a server eight chunks where others bring six (rails over two leaves:
1.343x the best bound at seed 0, 1.281x at seeds 1-3). Sending every chunk
from its owner straight to the NPU at the owner's place in every other server
(its rail-mate), which broadcasts it inside, gives every NIC the same share by
construction: 1.281x, and 1.000x on two xgmi servers at four chunks per GPU
(the greedy: 1.159x). Reduce-Scatter is that All-Gather built on the
transposed network and played backwards
(:func:`~tacos.synthesizer.timing.played_backwards`, as the greedy builds it),
its links then reordered by forward-backward rounds where that is faster
(:func:`~tacos.synthesizer.list_scheduling.improved`): played backwards, the
switches serve in arrival order in the new direction too, which can cost
time (fat-tree:4 at 16 chunks per NPU: the All-Gather 1.029x the best bound,
its mirror 1.054x, reordered 1.029x). List-scheduling reduction trees
directly was slower (rails: 1.485x against 1.281x).

How, for NPUs split into groups (the whole network, or two to four servers, or
the servers under two to four leaf switches, more through a hub; for
All-Gather any number of servers or leaves):

1. **Messages.** A message goes from an NPU to an NPU over a direct link or
   through switches only (never through another NPU, which would add itself
   into a sum in passing), by a fastest such route: of those, the one with the
   least link time booked so far, so parallel links and a fat tree's planes
   share the messages (htsim's fat tree: one aggregation switch per pod had
   carried every message between its racks).
2. **Trees.** Chunk ``c`` is owned as the collective lays chunks out; in every
   group its root is the NPU at the owner's place in its own group (an
   All-Reduce over one group of direct links, at several chunks per NPU, is
   also tried on spanning trees rooted at the central NPU nearest the owner:
   :data:`CENTRAL_MIN_CHUNKS_PER_NPU`; and where slow links join its two halves,
   as two groups rooted on the cut: :func:`~.roots.split_in_halves`). Each tree
   books the link time its messages take, and later trees choose by what is
   booked, so link loads level out. Two ways to grow them:

   * *Nearer parents*: inside a group, every other NPU picks its parent in the
     reduction tree among the members strictly nearer the root (in
     microseconds, by messages between members), and its parent in the
     broadcast tree among those strictly nearer from it, each time the route
     with the least link time booked so far. Paths are shortest ones
     (mesh2d:8x8: the busiest link carries 1.06x the link-capacity bound).
   * *Spanning* (on networks of direct links only): the tree grows from the
     root, each time joining the NPU whose message books the least, plus half
     its new parent's distance from the root in the tree: the Prim-Dijkstra
     trade-off (Alpert et al., 1995) between a cheapest spanning tree and a
     shortest-path one. Shortest paths cross a slow cut once per NPU behind it
     (a heterogeneous mesh's rows each send a partial sum down every column);
     a cheapest tree crosses it once per chunk (hetero 4x4 at 16 chunks per
     NPU: the busiest link carries 1.01x the link-capacity bound, against 1.16x
     with nearer parents). Deeper trees fill the pipeline more slowly, so at
     one chunk per NPU the nearer parents often win.

   * *Flat* (All-Reduce on hosts behind one link each, two to four groups):
     every member sends straight to the root and takes the result straight
     from it. A host that relays a partial sum spends its one link on it
     twice; htsim's pods at one chunk per host 1071.6 -> 985.7 us (with the
     root-by-root first pass below; 1.278 of the best bound).

   Trees of nearer parents are then grown again, each chunk's among all the
   others' (:data:`GROWN_ROUNDS`), and both are scheduled where that lightens
   the busiest link enough (:data:`REGROWN_IF_BUSIEST_BELOW`).
3. **Exchange.** All-Gather: the owner of a chunk sends it to every other
   group's root, each by the least-loaded of its fastest routes, before the
   roots broadcast it. All-Reduce: with two groups, each root sends the other
   its group's sum, which is added in on arrival; with three, every root
   sends it to both others at once; with four, recursive doubling (two such
   rounds, between roots whose group indices differ in one bit). A root must
   send what it has summed before that round's sum has been added to it (else
   the other counts itself twice); a schedule where that fails is dropped.
   With more groups, at few chunks per NPU (:data:`HUB_MAX_CHUNKS_PER_NPU`),
   through a hub instead: every other group's root is the member with the
   least-loaded route into the owner's group, where its sum lands and is
   added in on the way to the owner; the result goes back by the same NPUs
   and is broadcast in each group (on a cluster the sums cross into the
   owner's server over different rails at once).
4. **Order.** Chunks are launched round-robin over their owners (owners in a
   seeded random order), so neighbouring launches load different links.
5. **List scheduling.** Every link serves, of the transfers whose inputs have
   arrived, the one of highest priority. Three first passes (four for All-Reduce)
   (:func:`_first_passes`): chunk by chunk in launch order, a pipeline; phase
   by phase with the NPUs of a group taking turns at each root, as a crossbar
   scheduler would; and the longest way to the end first. After each,
   forward-backward rounds: the reversed dependency graph is scheduled taking
   the transfers that ended last first, and the next forward pass takes
   transfers by how late they ended in that backward schedule (the latest
   start time first). The fastest forward pass gets more rounds
   (:data:`POLISHING_ROUNDS`), then restarts from its own order with every
   start time moved at random (:data:`PERTURBED_RESTARTS`), and the fastest is
   re-timed by the replay.

The entry point builds this for each layout :func:`tree_layouts` offers
(groups, and how trees grow) and keeps it only when it beats the greedy; a plan
whose busiest link is busy as long as the greedy takes is not scheduled.
All-Reduce: on networks of direct links with uneven NPU bandwidth (meshes,
heterogeneous meshes) both ways, on two to four servers or leaves, and through
a hub on more of them at one or two chunks per NPU; and on any servers, leaves
or hosts behind one link as the layout's own Reduce-Scatter, then its
All-Gather, each chunk gathered once reduced (:func:`_then_gathered`: eight
servers would need three rounds of exchange, Reduce-Scatter then All-Gather
crosses twice). Elsewhere the greedy's Reduce-Scatter then All-Gather is at its
bound (tori, rings). All-Gather and Reduce-Scatter: on any number of
servers, and of leaves, up to :data:`MAX_GATHER_TREE_TRANSFERS`. On hosts
behind one link each (fat trees), all three with every rank a group of its
own, straight from each owner to every host (:func:`_direct`), up to
:data:`MAX_DIRECT_TRANSFERS`: the All-Gather list-scheduled, or where every host's link
is alike timed as a rotation (:mod:`.rotation`, up to :data:`MAX_ROTATION_TRANSFERS`), the
Reduce-Scatter
sending its messages with the chunks renamed (:func:`_sent_to_owners`), the
All-Reduce the one then the other (:func:`_then_gathered`). Any of these works
on a subset of the ranks too (its servers, or the subset itself where its own
links join it).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from tacos.classic.network import node_groups
from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Op, Transfer
from tacos.synthesizer.list_scheduling import (
    Timeline,
    improved,
    longest_chains_us,
    perturbed,
    refined,
    replayed,
    settled,
    with_times,
)
from tacos.synthesizer.message_routes import MessageRoutes, Reach, Route
from tacos.synthesizer.ownership import collective_owners, owned_chunks
from tacos.synthesizer.roots import placed_roots, split_in_halves
from tacos.synthesizer.rotation import rotation, slots_line_up
from tacos.synthesizer.timing import played_backwards
from tacos.topology import Topology
from tacos.transfers import OP_CODES, TransferTable

MAX_TREE_TRANSFERS = 300_000
"""Larger All-Reduces are not tried this way (mesh2d:8x8 at 16 chunks per NPU, 129,024
transfers, takes about 3 s against the greedy's 0.2 s; building the trees is most of it)."""
MAX_JOINED_TRANSFERS = 400_000
"""All-Reduces as a layout's Reduce-Scatter then All-Gather (:func:`_then_gathered`) are
tried up to this many transfers in each plan, counting every message at the most hops
any takes: dgx:16x8 at four chunks per GPU, 390,144 so counted (145,408 in fact), about
8 s for 1.017 of the best bound, where the greedy takes 1.047 and the hierarchical ring
1.043."""
MAX_GATHER_TREE_TRANSFERS = 50_000
"""Larger All-Gathers and Reduce-Scatters are not tried this way (fat-tree:8, 128 hosts,
at one chunk per NPU: about 48,000 transfers, 3 s against the greedy's 0.7 s; the
greedy is within 6% of the bound there, and at four chunks the trees took 12 s)."""
MAX_FAR_GATHER_TREE_TRANSFERS = 400_000
FAR_FROM_BOUND = 1.08
"""All-Gathers and Reduce-Scatters of up to 400,000 transfers are tried on trees where the
greedy ends more than 8% above the collective's best lower bound (``far_from_bound`` of
:func:`tree_layouts`). At sixteen chunks per GPU on dgx:4x8 with two servers per leaf
and half the spine bandwidth (95,232 transfers so counted), the greedy at 1.130 (All-Gather)
and 1.100 (Reduce-Scatter) of that bound, its leaves' trees took the All-Gather from
1.201 to 1.130 of the throughput bound (0.6 -> 2.5 s) and the Reduce-Scatter from 1.159
to 1.132; on dgx:8x8 with two servers per leaf (387,072) the Reduce-Scatter 1.172 -> 1.134
(1.088 of the bound before). Nearer the bound they gained nothing and cost seconds:
fat-tree:8 at one chunk per host, the greedy 1.055 of it, 1.2 -> 3.8 s for the
All-Gather; dgx:8x8 with two servers per leaf, its All-Gather at 1.057, 1.139 -> 1.138
in 9 s instead of 1. Where they are tried and lose, that is the price: rails over two
leaves at four chunks per GPU (the greedy 1.091 of the bound) keeps the greedy's
schedules, the All-Gather in 3.1 s instead of 0.5, the Reduce-Scatter in 6.6 instead of
2.0."""
MAX_DIRECT_TRANSFERS = 400_000
"""Collectives straight from each owner (:func:`_direct`) are tried up to this many
transfers in the All-Gather they list-schedule: fat-tree:8 at four chunks per host,
371,712 transfers, in 6 s against the greedy's 1.4 s (1.024 -> 1.008 of the best bound,
the ring's time); singletons need no trees grown, so they cost less per transfer."""
MAX_ROTATION_TRANSFERS = 2_000_000
"""Where every host's link is alike, collectives straight from each owner are timed as a
rotation (:mod:`.rotation`) up to this many transfers in the All-Gather: fat-tree:8 at
sixteen chunks per host, 1,486,848, the All-Gather in about 3 s where list scheduling
took 30.8 s and 1.85 GB."""
TREE_KINDS = (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
"""The collectives built on trees: Reduce-Scatter from the All-Gather's plan."""
EXCHANGING_GROUPS = (2, 3, 4)
"""Servers are reduced apart and exchange their sums when there are two to four: each
root sends one or two sums per chunk (three: to both others at once, dgx:3x8 at one
chunk per GPU 1.801 -> 1.629 of the best bound; four: by recursive doubling). With
eight it would cross the network three times, where Reduce-Scatter then All-Gather
crosses twice; an exchange of every root with every other measured 2.26x the best bound
on dgx:4x8 at one chunk per NPU (the greedy: 1.54x)."""
HUB_MAX_CHUNKS_PER_NPU = 2
"""More servers (or leaves) than that, at up to this many chunks per NPU, are also tried
through each chunk's owner's server (:attr:`TreeLayout.hub`): each other server's sum
crosses once each way, each over the least-loaded link into the owner's server, so a
chunk's crossings run over different rails at once. At one chunk per GPU against the
greedy's Reduce-Scatter then All-Gather: rails over two leaves 1.455 (its leaf trees) ->
1.369 of the best bound, dgx:8x4 with two rails 1.472 -> 1.245, dgx:6x4 1.285 -> 1.226,
dgx:8x8 1.279 -> 1.251 (dgx:16x8 1.187, the greedy's 1.142 kept); at two, dgx:8x4 with two
rails 1.241 -> 1.165 (dgx:8x8 1.167 against 1.164); at four the greedy won on all four
(1.074-1.108 against 1.113-1.142). On two to four servers the exchange wins (one chunk
per GPU, through a hub: dgx:4x8 1.634 against 1.481, dgx:3x8 1.844 against 1.629)."""
CENTRAL_MIN_CHUNKS_PER_NPU = 4
"""All-Reduce over a whole network of direct links is also tried with spanning trees rooted
at central NPUs (:attr:`TreeLayout.central`, :mod:`.roots`) from this many chunks per
NPU, and as two halves where slow links join them. A root at the edge (a mesh corner)
waits for data from the far side before its broadcast can start and its last results
must cross back: the pipeline fills and drains across the whole network. A central root
halves both. Of the best layout's time over the best bound, owners' roots -> central
ones: mesh2d:8x8 at 4 chunks per NPU 1.153 -> 1.104, at 16 1.023 -> 1.014,
mesh3d:4x4x4 at 4 1.107 -> 1.071, mesh2d:4x4 at 16 1.031 -> 1.025, hetero 8x4 at 16
1.048 -> 1.043. At one chunk per NPU only hetero 8x4 gained (1.167 -> 1.161: half the
NPUs then root two chunks each at once); at four the hetero meshes kept the owners'
roots. Trees of nearer parents at central roots were never the fastest (hetero 4x4 at
16 chunks 1.060, its halves 1.055; mesh2d:8x8 at 16 1.054 against 1.014), so they are
not built."""
SPANNING_DISTANCE_WEIGHT = 0.5
"""In spanning trees, what a microsecond of the new parent's distance from the root weighs
against a microsecond of link time booked: 0 grows the cheapest tree, 1 about a
shortest-path tree. Of 0, 0.25, 0.5 and 1 over the meshes and heterogeneous meshes at 1,
4 and 16 chunks per NPU, 0.5 was never far from the best (times the throughput bound for
the four: mesh2d:8x8 at 4 chunks 1.296, 1.197, 1.189, 1.211; mesh3d:4x4x4 at 16 chunks
1.179, 1.030, 1.032, 1.044; hetero 8x4 at 16 chunks 1.227, 1.155, 1.156, 1.160)."""
GROWN_ROUNDS = 2
"""Trees of nearer parents are grown twice: the second time each chunk's are ripped up and
grown again among every other chunk's (as routers negotiate congestion), since the
first chunks chose before any link was booked. The busiest link over the throughput
bound at 16 chunks per NPU: hetero 4x4 1.266 -> 1.094, hetero 8x4 1.195 -> 1.105
(more rounds: 1.090, 1.105). Spanning trees weigh distance too and lost time with it."""
REGROWN_IF_BUSIEST_BELOW = 0.95
"""Regrown trees are scheduled too (the faster kept) when their busiest link carries at
most this much of the first trees' busiest. A lighter busiest link paid where the first
trees were badly unbalanced (hetero 4x4 All-Reduce at 16 chunks per NPU: 1.218 -> 1.180
of the throughput bound; the busiest link 14% lighter); on the meshes, 3-5% lighter,
the regrown trees scheduled no faster or slower (mesh3d:4x4x4 at one chunk per NPU
1.300 -> 1.333 of the best bound)."""
POLISHING_ROUNDS = 40
POLISHED_AFTER_IDLE_ROUNDS = 8
"""The fastest of the first passes' schedules gets up to 40 more forward-backward rounds,
until 8 in a row gain nothing: the rounds do not improve steadily, and a later one may
beat the best so far by a few percent. Over the throughput bound, hetero 8x4 at 16
chunks per NPU 1.153 -> 1.144, at 4 1.347 -> 1.336; rails over two leaves at one chunk
per GPU 1.888 -> 1.803; the meshes unchanged."""
PERTURBED_RESTARTS = 30
PERTURBED_TRANSFER_RESTARTS = 300_000
"""Then up to 30 perturbed restarts (:func:`~.list_scheduling.perturbed`, noise of a
typical transfer's time), fewer for plans of more than 10,000 transfers (restarts times
transfers at most 300,000): forward-backward rounds stop in a local optimum, and the
noise leaves it. The best bound over, nearer parents before -> after: mesh2d:8x8 at one
chunk per NPU 1.222 -> 1.178, mesh3d:4x4x4 1.300 -> 1.267, hetero 4x4 at four chunks
1.174 -> 1.135 and at sixteen 1.081 -> 1.071, hetero 8x4 at four 1.197 -> 1.167;
dgx:6x4 through a hub at one chunk per GPU 1.226 -> 1.177, rails over two leaves 1.369
-> 1.346. About 1 s per 10,000 transfers of plan."""
MAX_PERTURBED_TRANSFERS = 40_000
"""Larger plans are not perturbed: every gain measured was on plans of at most 32,256
transfers (mesh2d:8x8 at four chunks per NPU, 1.164 -> 1.155), and the cluster plans
above (rails over two leaves at four chunks per GPU, about 75,000; dgx:16x8 at one)
gained nothing for 5-11 s more. All-Gathers (and the Reduce-Scatters mirrored from them)
are not perturbed either: on the cluster suite at one and four chunks per GPU none
gained, and rails over two leaves at one took 4.5 s instead of 2.2."""
DROPPED_BEHIND = 1.10
"""A plan whose first passes end more than 10% after the fastest schedule so far (the
``to_beat_us`` of :func:`tree_collective`) is dropped unpolished: polishing (rounds and
restarts) never gained more than 5.6% on the cluster and quality suites (dgx:6x8's hub
at one chunk per GPU 357.2 -> 338.3 us, 1.6% behind the greedy before; fat-tree:4's hub
841.3 -> 801.2; hetero 4x4's spanning trees at four chunks per NPU 468.2 -> 450.6).
Rails over two leaves at one chunk per GPU polished its leaves' exchange, whose first
passes end 10-17% after the hub's 456.1 us, only to lose: 16.4-19.5 s -> 14.7-14.9 s
for its All-Reduce, the same schedule. Every time in the quality suite and in the cluster
suite at one chunk per NPU is unchanged."""
POLISHED_ABOVE_BUSIEST = 1.03
"""Only schedules ending later than this times their busiest link's booked time are
polished: one within 3% of it has little left to gain (the meshes at 16 chunks per NPU,
1.00-1.03, gained nothing and took 1.3 s more; hetero 8x4's spanning trees, 1.04,
gained 1%)."""


class TreeLayout(NamedTuple):
    """What :func:`tree_collective` builds on: the groups of NPUs, whether the trees grow
    spanning (else by nearer parents; module docstring), and whether an All-Reduce goes
    through each chunk's owner's group (``hub``) or is the layout's Reduce-Scatter then
    its All-Gather (``joined``, :func:`_then_gathered`) rather than exchanging the
    groups' sums."""

    groups: tuple[tuple[int, ...], ...]
    spanning: bool = False
    flat: bool = False
    """Every NPU's parent in both trees is the root itself: a host behind one link sends its
    own data once and takes in the result once, where relaying a partial sum costs its
    link a message more per chunk."""
    hub: bool = False
    central: bool = False
    """All-Reduce over a network of direct links, roots placed by its shape (:mod:`.roots`)
    rather than by the owner's place: in one group, the central NPU nearest the owner; in
    two halves, the NPU on the cut nearest the owner and its neighbour across."""
    joined: bool = False
    rotating: bool = False
    """Straight from each owner (singleton groups), the All-Gather timed as a rotation
    (:mod:`.rotation`) rather than list-scheduled."""


def tree_layouts(
    topology: Topology,
    specs: Sequence[Collective],
    sends_in_flight: int | None,
    far_from_bound: Callable[[], bool] = lambda: False,
) -> list[TreeLayout]:
    """The layouts worth building :func:`tree_collective` for (see the module docstring):
    for All-Reduce, the whole network on direct links with uneven NPU bandwidth, with
    trees of nearer parents and spanning ones (spanning ones also with central roots from
    :data:`CENTRAL_MIN_CHUNKS_PER_NPU` chunks per NPU, and then its halves where slow
    links join them, :func:`~.roots.split_in_halves`), and the servers (or leaves,
    :func:`_leaves`) of a cluster whose same-place NPUs reach each other through
    switches, two to four exchanging sums, more through a hub; for All-Gather and
    Reduce-Scatter, a cluster's servers and its leaves; for all three, every rank on
    its own where each is a host behind one link (:func:`_direct`) or has a link to
    every other (:func:`_pairwise_linked`). Each up to a number of transfers
    (:func:`_most`); All-Gather and Reduce-Scatter trees up to more where
    ``far_from_bound()`` (asked only then) says the greedy is far from the bound
    (:data:`MAX_FAR_GATHER_TREE_TRANSFERS`)."""
    if len(specs) != 1 or sends_in_flight is not None:
        return []
    (spec,) = specs
    if spec.kind not in TREE_KINDS:
        return []
    reduces = spec.kind is CollectiveKind.ALL_REDUCE
    most = max(
        MAX_TREE_TRANSFERS,
        MAX_FAR_GATHER_TREE_TRANSFERS,
        MAX_DIRECT_TRANSFERS,
        MAX_JOINED_TRANSFERS,
        MAX_ROTATION_TRANSFERS,
    )
    if spec.num_chunks * (len(spec.ranks) - 1) > most:  # every layout makes more
        return []
    layouts: list[TreeLayout] = []
    in_bandwidth = {
        sum(topology.links[i].bandwidth_GBps for i in topology.in_links[npu]) for npu in spec.ranks
    }
    if reduces and not topology.num_switches and len(in_bandwidth) > 1:
        whole = (tuple(sorted(spec.ranks)),)
        layouts += [TreeLayout(whole), TreeLayout(whole, spanning=True)]
        if spec.chunks_per_rank >= CENTRAL_MIN_CHUNKS_PER_NPU:
            layouts.append(TreeLayout(whole, spanning=True, central=True))
            halves = split_in_halves(topology, spec.ranks)
            if halves is not None:
                layouts.append(TreeLayout(halves, central=True))
    routes = MessageRoutes(topology, spec.chunk_bytes)
    servers = node_groups(topology, spec.ranks)
    direct = _direct(topology, spec.ranks)
    for groups in (servers, _leaves(routes, servers)):
        if groups is not None:
            exchanging = len(groups) in EXCHANGING_GROUPS
            hub = (
                reduces
                and len(groups) > max(EXCHANGING_GROUPS)
                and spec.chunks_per_rank <= HUB_MAX_CHUNKS_PER_NPU
            )
            as_tuples = tuple(tuple(group) for group in groups)
            if exchanging or hub or not reduces:
                layouts.append(TreeLayout(as_tuples, hub=hub))
            if reduces and direct and exchanging:
                layouts.append(TreeLayout(as_tuples, flat=True))
            if reduces and not direct:  # hosts behind one link: joined straight (below)
                layouts.append(TreeLayout(as_tuples, joined=True))
    singletons = tuple((rank,) for rank in sorted(spec.ranks))
    if direct:
        # The rotation's replay is compiled in the default cost model only.
        rotating = topology.cost.is_default and slots_line_up(topology, spec.ranks)
        layouts.append(TreeLayout(singletons, joined=reduces, rotating=rotating))
    elif _pairwise_linked(topology, spec.ranks):
        layouts.append(TreeLayout(singletons, joined=reduces))

    def fits(layout: TreeLayout, count: int) -> bool:
        if count <= _most(layout, reduces):
            return True
        gathers = not reduces and not _straight(layout)
        return gathers and count <= MAX_FAR_GATHER_TREE_TRANSFERS and far_from_bound()

    return [
        layout for layout in layouts
        if fits(layout, _transfers(layout, spec, 1))
        and routes.connect(layout.groups, places=not layout.central)
        and fits(layout, _transfers(layout, spec, routes.longest_hops))
    ]  # fmt: skip


def _direct(topology: Topology, ranks: Sequence[int]) -> bool:
    """Whether an All-Gather may go straight from each owner to every rank: each rank is a
    host behind one link each way into a switch (a fat tree's, or one switch's), so it
    can pass nothing on that it could not have been sent directly, and what decides the
    time is when each host's one link is busy. On fat-tree:4 at four chunks per host the
    greedy, relaying through edge neighbours first, left every host's link idle for
    about five chunk times early on (1.098 of the best bound, the ring 1.066); direct,
    list-scheduled or as a rotation (:mod:`.rotation`, where the hosts' links are
    alike), 1.066 like the ring (1.176 against 1.235 at one chunk); fat-tree:8 1.024 ->
    1.008 at four chunks, 1.055 -> 1.031 at one, and at sixteen the ring's time, as a
    rotation only. Where the fabric is thinner than the hosts' links it loses and is not
    kept: on ns-3's 128-node tree its busiest link alone outlasts the greedy, so it is
    not even scheduled (:func:`tree_collective`'s ``within_us``); htsim's 8 hosts, whose
    core links are half as fast, 1.363 as a rotation against the greedy's 1.096.
    Reduce-Scatter and All-Reduce send its messages (:func:`tree_collective`). There an
    All-Reduce is joined straight only: on fat-tree:8 the servers' (hosts under one edge
    switch) and leaves' joined plans were slower (at one chunk per host 5568.7 and 5628.8
    us against 5288.3, at four 20832.5 and 20952.7 against 20451.9) and took 30 of the 40
    seconds."""
    return all(
        len(topology.out_links[rank]) == len(topology.in_links[rank]) == 1
        and topology.is_switch(topology.links[topology.out_links[rank][0]].dst)
        for rank in ranks
    )


def _pairwise_linked(topology: Topology, ranks: Sequence[int]) -> bool:
    """Whether every rank has a link of its own to every other rank (a fully connected
    network, or ranks of one): then an All-Gather may go straight from each owner too,
    each link carrying its sender's chunks only. The greedy relays there and two
    links into one NPU may bring it the same chunk while a third has nothing left it
    lacks: fully-connected:16 at two chunks per NPU took three chunk times for
    All-Gather and Reduce-Scatter (1.500 of the bound) and 1.250 of it for
    All-Reduce, at three 1.333 and 1.167; straight, every collective meets its bound
    at one to four chunks per NPU on 8 and 16 NPUs."""
    wanted = set(ranks)
    return all(
        wanted <= {topology.links[i].dst for i in topology.out_links[rank]} | {rank}
        for rank in ranks
    )


def _most(layout: TreeLayout, reduces: bool) -> int:
    """How many transfers ``layout`` may schedule: straight from each owner,
    :data:`MAX_ROTATION_TRANSFERS` as a rotation, else :data:`MAX_DIRECT_TRANSFERS`;
    joined, :data:`MAX_JOINED_TRANSFERS` in each plan; else for All-Reduce
    :data:`MAX_TREE_TRANSFERS`, for All-Gather and Reduce-Scatter
    :data:`MAX_GATHER_TREE_TRANSFERS`."""
    if layout.rotating:
        return MAX_ROTATION_TRANSFERS
    if _straight(layout):
        return MAX_DIRECT_TRANSFERS
    if layout.joined:
        return MAX_JOINED_TRANSFERS
    return MAX_TREE_TRANSFERS if reduces else MAX_GATHER_TREE_TRANSFERS


def _straight(layout: TreeLayout) -> bool:
    """Whether every rank is a group of its own: chunks go straight from their owners."""
    return all(len(group) == 1 for group in layout.groups)


def _leaves(routes: MessageRoutes, servers: list[list[int]] | None) -> list[list[int]] | None:
    """The servers joined where their first NPUs reach each other fastest of any two
    (under one leaf switch, where others are a spine further), in server order; None
    unless that makes fewer groups of equal size.

    Rails over two leaves: each leaf's four servers reduce a chunk apart, the two sums
    swap over the spine (at one chunk per GPU 1.598 -> 1.523 of the best bound, at four
    1.131 -> 1.107; eight servers exchanging would cross the network three times)."""
    if servers is None:
        return None
    firsts = [server[0] for server in servers]
    reach = [routes.from_npu(first) for first in firsts]
    apart = [[reach[a][b][0] if b in reach[a] else math.inf for b in firsts]
             for a in range(len(servers))]  # fmt: skip
    nearest = min(apart[a][b] for a in range(len(servers)) for b in range(len(servers)) if a != b)
    leaf_of = list(range(len(servers)))
    for a in range(len(servers)):
        for b in range(a):
            if apart[a][b] <= nearest and apart[b][a] <= nearest:
                leaf_of[a] = min(leaf_of[a], leaf_of[b])
    joined: dict[int, list[int]] = {}
    for server, leaf in zip(servers, leaf_of, strict=True):
        joined.setdefault(leaf, []).extend(server)
    leaves = list(joined.values())
    if len({len(leaf) for leaf in leaves}) != 1 or len(leaves) in (1, len(servers)):
        return None
    return leaves


def _transfers(layout: TreeLayout, spec: Collective, hops: int) -> int:
    """How many transfers the plan makes at most, messages of at most ``hops`` links: per
    chunk, one into every NPU but the owner, and for All-Reduce one out of every NPU but
    the owner (through a hub) or but the roots and each root's exchange rounds."""
    npus, roots = sum(len(group) for group in layout.groups), len(layout.groups)
    if spec.kind is not CollectiveKind.ALL_REDUCE or layout.joined:  # per plan
        return spec.num_chunks * (npus - 1) * hops
    if layout.hub:
        return spec.num_chunks * 2 * (npus - 1) * hops
    exchanged = sum(len(pairs) for pairs in _exchange_rounds(roots))
    return spec.num_chunks * (2 * (npus - roots) + exchanged) * hops


def tree_collective(
    topology: Topology,
    spec: Collective,
    layout: TreeLayout,
    rng: random.Random,
    within_us: float = math.inf,
    to_beat_us: float = math.inf,
) -> TransferTable | list[Transfer] | None:
    """The collective of the module docstring, re-timed as soon as possible; None when
    some root of an All-Reduce would send its partial sum after another root's had been
    added to it, or when every plan keeps some link busy for ``within_us`` or longer (it
    cannot finish sooner, so it is not scheduled) or ends its first passes far behind
    ``to_beat_us``, the fastest schedule so far (:data:`DROPPED_BEHIND`). Transfers are
    sorted by (start, link), dependencies before dependants."""
    gather = replace(spec, kind=CollectiveKind.ALL_GATHER)
    if layout.joined:
        return _reduced_then_gathered(topology, spec, layout._replace(joined=False), rng, within_us)
    if spec.kind is CollectiveKind.ALL_GATHER and layout.rotating:
        return rotation(topology, spec, within_us)
    if spec.kind is CollectiveKind.REDUCE_SCATTER and _straight(layout):
        spread = tree_collective(topology, gather, layout, rng, within_us)
        if spread is None:
            return None
        assert isinstance(spread, TransferTable)
        return _replayed(_sent_to_owners(spread, spec), topology, spec)
    if spec.kind is CollectiveKind.REDUCE_SCATTER:
        spread = tree_collective(
            topology.transposed(), gather, layout, rng, within_us, to_beat_us
        )  # its mirror takes as long
        if spread is None:
            return None
        assert isinstance(spread, TransferTable)
        mirrored = played_backwards(list(spread), topology, spec.chunk_bytes)
        return improved(topology, mirrored, spec.chunk_bytes) or mirrored
    owners = collective_owners(spec).tolist()
    reduces = spec.kind is CollectiveKind.ALL_REDUCE
    routes = MessageRoutes(topology, spec.chunk_bytes)
    partners = None
    if layout.central:
        placed = placed_roots(routes, layout.groups)
        if placed is None:
            return None
        root_of, partners = placed
        owners = [root_of[owner] for owner in owners]
    plan = _Plan(
        routes, layout.groups, owners, layout.spanning, reduces, layout.hub, layout.flat, partners
    )
    launch = _launch_order(owners, rng)
    first, *regrown = plan.rounds
    lighter = REGROWN_IF_BUSIEST_BELOW * first.busiest_us
    busy_us = np.asarray(topology.link_busy_times_us(spec.chunk_bytes))
    tried = [
        trees for trees in (first, *(t for t in regrown if t.busiest_us <= lighter))
        if trees.busiest_busy_us(busy_us) < within_us
    ]  # fmt: skip
    noise = np.random.default_rng(rng.getrandbits(64))
    timed = [
        _timed(topology, spec, trees, layout.groups, launch, noise, to_beat_us) for trees in tried
    ]
    return min(
        (table for table in timed if table is not None),
        key=lambda table: float(table.end.max()),
        default=None,
    )


def _sent_to_owners(gather: TransferTable, spec: Collective) -> TransferTable:
    """A Reduce-Scatter with the messages of ``gather``, an All-Gather in which every chunk
    goes straight from its owner to each rank (:func:`_direct`): the message that took
    an owner's ``j``-th chunk to a rank takes the owner's part of that rank's ``j``-th
    chunk there instead, added in on arrival. Every ordered pair of ranks still
    exchanges the same messages on the same routes at the same times, so it takes as
    long as the All-Gather (to be re-timed by the replay all the same: switches break
    ties by chunk). Played backwards instead, the switches' arrival order changed and
    cost time: fat-tree:4 at four chunks per host 1.082 of the best bound, the ring and
    this 1.066."""
    next_hop = np.full(len(gather), -1, np.int64)
    next_hop[gather.deps] = gather.dep_rows  # a message's hops each wait for the one before
    last_hop = np.arange(len(gather))
    while (following := next_hop[last_hop]).max(initial=-1) >= 0:  # one hop further a pass
        last_hop = np.where(following >= 0, following, last_hop)
    place = gather.chunk % spec.chunks_per_rank  # the owner's j-th chunk
    renamed = owned_chunks(spec, gather.dst[last_hop], place)
    op = np.where(next_hop < 0, OP_CODES.index(Op.REDUCE), OP_CODES.index(Op.COPY))
    return replace(gather, chunk=renamed, op=op.astype(gather.op.dtype))


def _reduced_then_gathered(
    topology: Topology,
    spec: Collective,
    layout: TreeLayout,
    rng: random.Random,
    within_us: float,
) -> TransferTable | None:
    """All-Reduce as ``layout``'s Reduce-Scatter, then its All-Gather (:func:`_then_gathered`);
    None when either plan keeps some link busy for ``within_us`` or longer. Straight from
    each owner the Reduce-Scatter sends the All-Gather's messages (:func:`_sent_to_owners`),
    so every link carries twice the All-Gather's load and the gate halves."""
    gather = replace(spec, kind=CollectiveKind.ALL_GATHER)
    scatter_spec = replace(spec, kind=CollectiveKind.REDUCE_SCATTER)
    straight = _straight(layout)
    gate_us = within_us / 2 if straight else within_us
    spread = tree_collective(topology, gather, layout, rng, gate_us)
    if spread is None:
        return None
    assert isinstance(spread, TransferTable)
    if straight:
        scatter = _sent_to_owners(spread, scatter_spec)
    else:
        reduced = tree_collective(topology, scatter_spec, layout, rng, within_us)
        if reduced is None:
            return None
        scatter = TransferTable.from_transfers(reduced)
    joined = _then_gathered(scatter, spread, collective_owners(spec))
    return _replayed(joined, topology, spec)


def _then_gathered(
    scatter: TransferTable, gather: TransferTable, owners: np.ndarray
) -> TransferTable:
    """All-Reduce: ``scatter``, then ``gather`` with each chunk's first hops waiting for the
    parts added into the chunk's owner, timed after the Reduce-Scatter ends (each link:
    its Reduce-Scatter transfers, then its All-Gather ones; the replay pulls the latter
    in). Each owner's chunks are renamed in the All-Gather so that it sends first the
    ones reduced first: a played-backwards Reduce-Scatter completes last what its
    All-Gather launched first, and as built the two did not overlap at all (dgx:6x4 at
    four chunks per GPU: 945.9 us, renamed 894.3, 1.025 of the best bound; the greedy
    943.5, the hierarchical ring 915.9). Straight from each owner every host then sends
    on without a pause: fat-tree:4 at four chunks per host 1.033 of the best bound,
    where the hierarchical ring takes 1.050."""
    code = OP_CODES.index(Op.REDUCE)
    reduced = np.flatnonzero((scatter.op == code) & (scatter.dst == owners[scatter.chunk]))
    done_us = np.zeros(len(owners))
    np.maximum.at(done_us, scatter.chunk[reduced], scatter.end[reduced])
    first_us = np.full(len(owners), np.inf)
    np.minimum.at(first_us, gather.chunk, gather.start)
    renamed = np.empty(len(owners), np.int64)  # per owner: k-th launched -> k-th reduced
    renamed[np.lexsort((first_us, owners))] = np.lexsort((done_us, owners))
    gather = replace(gather, chunk=renamed[gather.chunk])
    after_us = float(scatter.end.max())
    later = replace(gather, start=gather.start + after_us, end=gather.end + after_us)
    both = TransferTable.joined([scatter, later], [0, 0])
    # The All-Gather's first hops (no dependencies of their own) wait for the parts.
    first_hops = len(scatter) + np.flatnonzero(np.diff(gather.deps_ptr) == 0)
    reduced = reduced[np.argsort(scatter.chunk[reduced], kind="stable")]
    parts = np.bincount(scatter.chunk[reduced], minlength=len(owners))
    first_part = np.concatenate(([0], np.cumsum(parts)))
    chunks = both.chunk[first_hops].tolist()
    waits = [reduced[first_part[c] : first_part[c + 1]] for c in chunks]
    counts = np.diff(both.deps_ptr)
    counts[first_hops] = parts[chunks]
    return replace(
        both,
        deps_ptr=np.concatenate(([0], np.cumsum(counts))),
        deps=np.insert(
            both.deps, np.repeat(both.deps_ptr[first_hops], parts[chunks]), np.concatenate(waits)
        ),
    )


def _replayed(table: TransferTable, topology: Topology, spec: Collective) -> TransferTable:
    """``table`` at the times the replay gives it, sorted as schedules list transfers."""
    start, end = replayed(table, topology, spec.chunk_bytes)
    return with_times(table, start, end)


def _timed(
    topology: Topology,
    spec: Collective,
    trees: _Trees,
    groups: Sequence[Sequence[int]],
    launch: Sequence[int],
    noise: np.random.Generator,
    to_beat_us: float = math.inf,
) -> TransferTable | None:
    """``trees`` list-scheduled from each first pass, the fastest polished (by more
    forward-backward rounds, then perturbed restarts drawing on ``noise``) and re-timed by
    the replay; None when a root would send its sum after another's was added into it, or
    when the first passes end more than :data:`DROPPED_BEHIND` times ``to_beat_us``."""
    planned = trees.table()
    timeline = Timeline(topology, planned, spec.chunk_bytes)
    chains_us = longest_chains_us(planned, topology.link_times_us(spec.chunk_bytes))
    best = min(
        (settled(timeline, first) for first in _first_passes(trees, groups, launch, chains_us)),
        key=lambda times: times.finish_us,
    )
    if best.finish_us > DROPPED_BEHIND * to_beat_us:
        return None
    fastest = [best]
    if best.finish_us > POLISHED_ABOVE_BUSIEST * trees.busiest_us:
        best = refined(timeline, best, POLISHING_ROUNDS, POLISHED_AFTER_IDLE_ROUNDS)
        restarts = min(PERTURBED_RESTARTS, PERTURBED_TRANSFER_RESTARTS // len(planned))
        if len(planned) > MAX_PERTURBED_TRANSFERS or spec.kind is not CollectiveKind.ALL_REDUCE:
            restarts = 0
        typical_us = float(np.median(timeline.lasts_us))
        searched = perturbed(timeline, best, restarts, typical_us, noise)
        fastest = [best] if searched is best else [searched, best]
    kept = None
    for times in fastest:  # the exchange may hold in one order only; the replay decides
        recorded = replace(planned, start=times.start, end=times.end)
        start, end = replayed(recorded, topology, spec.chunk_bytes)
        exchanged = all(start[out] < end[into] for out, into in trees.exchanges)
        if exchanged and (kept is None or end.max() < kept[1].max()):
            kept = start, end
    return None if kept is None else with_times(planned, *kept)


def _first_passes(
    trees: _Trees, groups: Sequence[Sequence[int]], launch: Sequence[int], chains_us: np.ndarray
) -> list[list[tuple[int, ...]] | np.ndarray]:
    """The priorities list scheduling starts from; forward-backward rounds refine each.

    * Chunk by chunk in launch order (each chunk's reduction, exchange, then
      broadcast, longest remaining path first): a pipeline, which meshes want.
    * Phase by phase, as a crossbar scheduler would: every NPU that collects
      partial sums (or hands out results) takes its chunks in launch order, and
      the members of a group send to (or receive from) it in a rotation by their
      place, so no two hit one NPU at once (in the exchange, the groups take
      turns likewise: rails over two leaves' All-Gather at one chunk per GPU
      1.587 -> 1.281x the best bound). Inside a server behind one switch
      the chunk order leaves the switch's links to one NPU idle while others
      queue (a100-2node at one chunk per GPU: 1.386 of the old best bound, 1.309
      so). It wins on some meshes too (hetero 4x4 at 1 and 4 chunks per NPU,
      seeds 1 and 2), so both always run (mesh2d:8x8 at 16 chunks: 2.8 s
      against 2.2 s for one).
    * Critical path first (``chains_us``: per transfer, the longest chain of link
      times from it to the end), as the classic algorithms are ranked: at one
      chunk per NPU the chains decide the time, and the other two passes hold a
      chunk with a long way to go behind one launched before it (hetero 4x4
      All-Reduce: 177.9 -> 152.5 us, the chain of its corners' chunks; the
      hierarchical ring takes 160.9).
    * All-Reduce, root by root (:func:`_root_turns`), then critical path first:
      every NPU first helps sum the first chunk of each root, then the second,
      so a root sums and sends on its first chunk while its later ones are
      still coming in, where the other passes gather them all first (htsim's
      pods in flat trees at one chunk per host: 1028.6 -> 985.7 us).
    """
    by_chunk: list[tuple[int, ...]] = [
        (launch[p.transfer.chunk], p.phase, -p.rest) for p in trees.transfers
    ]
    place = {npu: (index, len(group)) for group in groups for index, npu in enumerate(group)}
    group_place = {npu: (index, len(groups)) for index, group in enumerate(groups) for npu in group}
    turns: dict[tuple[int, int], dict[int, int]] = {}  # (hub, phase) -> launch -> turn
    for planned in trees.transfers:
        turns.setdefault((planned.hub, planned.phase), {})[launch[planned.transfer.chunk]] = 0
    for chunks in turns.values():
        for turn, chunk in enumerate(sorted(chunks)):
            chunks[chunk] = turn
    by_phase: list[tuple[int, ...]] = []
    for planned in trees.transfers:
        chunk, phase = launch[planned.transfer.chunk], planned.phase
        where = group_place if phase == EXCHANGING else place
        (at, size), (sender_at, _) = where[planned.receiver], where[planned.sender]
        turn = turns[(planned.hub, phase)][chunk]
        by_phase.append((phase, turn, (at - sender_at) % size, -planned.rest))
    passes: list[list[tuple[int, ...]] | np.ndarray] = [by_chunk, by_phase, -chains_us]
    root_turns = _root_turns(trees, launch)
    if root_turns:
        by_root = np.array([root_turns[p.transfer.chunk] for p in trees.transfers], np.float64)
        passes.append(by_root * (chains_us.max(initial=0.0) + 1) - chains_us)
    return passes


def _root_turns(trees: _Trees, launch: Sequence[int]) -> dict[int, int]:
    """Per chunk of an All-Reduce, how many chunks launched before it are first reduced
    into the same NPU (empty for an All-Gather)."""
    root_of: dict[int, int] = {}
    for planned in trees.transfers:
        if planned.phase == REDUCING:
            root_of.setdefault(planned.transfer.chunk, planned.receiver)
    taken: dict[int, int] = {}
    turns: dict[int, int] = {}
    for chunk in sorted(root_of, key=lambda c: launch[c]):
        turns[chunk] = taken.get(root_of[chunk], 0)
        taken[root_of[chunk]] = turns[chunk] + 1
    return turns


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


REDUCING, EXCHANGING, BROADCASTING = 0, 1, 2
"""A transfer's phase, for the first passes' priorities."""


class _Planned(NamedTuple):
    """A transfer of the plan and what the first passes rank it by."""

    transfer: Transfer
    phase: int
    rest: int
    """Messages from this one to the end of its chunk's broadcast, the longest way."""
    sender: int
    receiver: int
    """The NPUs the message this transfer is a hop of goes from and to."""

    @property
    def hub(self) -> int:
        """The NPU its phase gathers at or spreads from: the receiver while reducing, the
        sender after."""
        return self.receiver if self.phase == REDUCING else self.sender


class _Trees(NamedTuple):
    """Every chunk's trees as transfers (times unset), dependencies first."""

    transfers: list[_Planned]
    """Chunk after chunk, each chunk's dependencies numbered from its first transfer."""
    exchanges: list[tuple[int, int]]
    """In transfer indices, a root's first hop out in an exchange round with a last hop
    into that root in the same round: the send must start before the arrival ends."""
    offsets: np.ndarray
    """Per transfer, the index of its chunk's first transfer."""
    busiest_us: float
    """The link time booked on the busiest link."""

    def busiest_busy_us(self, busy_us: np.ndarray) -> float:
        """How long the busiest link is busy (``busy_us`` per link): no schedule of these
        transfers ends sooner."""
        links = np.fromiter((p.transfer.link for p in self.transfers), np.int64)
        return float(np.bincount(links, weights=busy_us[links]).max(initial=0.0))

    def table(self) -> TransferTable:
        """The transfers as a table, their dependencies numbered over the whole plan."""
        table = TransferTable.from_transfers([p.transfer for p in self.transfers])
        shift = np.repeat(self.offsets, np.diff(table.deps_ptr))
        return replace(table, deps=table.deps + shift)


class _Plan:
    """Trees grown for every chunk, link loads booked as they grow: ``rounds`` holds them
    as first grown, then (nearer parents) as regrown (:data:`GROWN_ROUNDS`). While a
    chunk's trees grow, ``transfers`` and ``exchanges`` collect them, numbered from 0.
    ``reduces``: an All-Reduce; else an All-Gather (broadcast trees only). ``partners``:
    per owner, its chunks' root in every group (else the NPU at the owner's place in each,
    as on a cluster's servers)."""

    def __init__(
        self,
        routes: MessageRoutes,
        groups: Sequence[Sequence[int]],
        owners: Sequence[int],
        spanning: bool,
        reduces: bool = True,
        hub: bool = False,
        flat: bool = False,
        partners: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        self.routes = routes
        self.spanning = spanning
        self.flat = flat
        self.reduces = reduces
        self.load_us = [0.0] * len(routes.topology.links)
        place = {npu: (g, i) for g, group in enumerate(groups) for i, npu in enumerate(group)}
        members = [frozenset(group) for group in groups]
        self._distance_of: dict[int, tuple[dict[int, float], dict[int, float]]] = {}
        trees: list[tuple[list[_Planned], list[tuple[int, int]]]] = []
        self.rounds: list[_Trees] = []
        for grown in range(1 if spanning else GROWN_ROUNDS):
            for chunk, owner in enumerate(owners):
                if grown:  # rip this chunk's trees up, grow them again among the others'
                    for planned in trees[chunk][0]:
                        self.load_us[planned.transfer.link] -= routes.link_us[planned.transfer.link]
                # _message numbers the chunk's transfers from 0, joined below.
                self.transfers: list[_Planned] = []
                self.exchanges: list[tuple[int, int]] = []
                if hub:
                    self._add_hub_chunk(chunk, owner, members)
                else:
                    roots = (
                        partners[owner]
                        if partners is not None
                        else [group[place[owner][1]] for group in groups]
                    )
                    self._add_chunk(chunk, owner, roots, members)
                if grown:
                    trees[chunk] = (self.transfers, self.exchanges)
                else:
                    trees.append((self.transfers, self.exchanges))
            self.rounds.append(_joined(trees, max(self.load_us)))

    def _parents(
        self, root: int, inside: frozenset[int], distance: dict[int, float], up: bool
    ) -> dict[int, tuple[int, Route]]:
        """Per NPU of the group, the least-loaded route to (``up``) or from a member
        strictly nearer the root (``distance``: to the root, or from it)."""
        chosen: dict[int, tuple[int, Route]] = {}
        for npu in sorted(inside - {root}):
            ends = self.routes.into(npu, inside) if up else self.routes.out_of(npu, inside)
            options = [(self._cheapest(route), other) for other, (_, route) in ends
                       if distance[other] < distance[npu]]  # fmt: skip
            (_, route), other = min(options)
            self._book(route)
            chosen[npu] = (other, route)
        return chosen

    def _spanning(
        self, root: int, inside: frozenset[int], up: bool
    ) -> dict[int, tuple[int, Route]]:
        """Per NPU of the group, its route to (``up``) or from its parent in a tree grown
        from the root: each time the NPU, parent and route of least booked cost plus
        :data:`SPANNING_DISTANCE_WEIGHT` times the parent's distance from the root.

        Costs only grow as links are booked, so a heap entry whose cost has grown is
        put back with its new cost, and the one popped unchanged is the least."""
        chosen: dict[int, tuple[int, Route]] = {}
        distance = {root: 0.0}
        waiting: list[tuple[float, int, int, Reach]] = []

        def cost(parent: int, route: Route) -> tuple[float, Route]:
            """The cost of joining by ``route``'s cheapest alternative, and that route."""
            booked_us, cheapest = self._cheapest(route)
            return booked_us + SPANNING_DISTANCE_WEIGHT * distance[parent], cheapest

        def offer(parent: int) -> None:
            ends = self.routes.out_of(parent, inside) if up else self.routes.into(parent, inside)
            for npu, reach in ends:
                if npu not in distance:
                    heapq.heappush(waiting, (cost(parent, reach[1])[0], npu, parent, reach))

        offer(root)
        while waiting:
            was, npu, parent, (us, route) = heapq.heappop(waiting)
            if npu in distance:
                continue
            now, cheapest = cost(parent, route)
            if now > was:
                heapq.heappush(waiting, (now, npu, parent, (us, route)))
                continue
            self._book(cheapest)
            chosen[npu] = (parent, cheapest)
            distance[npu] = distance[parent] + us
            offer(npu)
        return chosen

    def _cheapest(self, route: Route) -> tuple[float, Route]:
        return self.routes.cheapest(route, self.load_us)

    def _book(self, route: Route) -> None:
        for link in route:
            self.load_us[link] += self.routes.link_us[link]

    def _message(self, chunk: int, route: Route, op: Op, deps: tuple[int, ...], phase: int,
                 rest: int) -> tuple[int, int]:  # fmt: skip
        """The transfers of one message; (its first hop, its last hop)."""
        links, first = self.routes.topology.links, len(self.transfers)
        sender, receiver = links[route[0]].src, links[route[-1]].dst
        for hop, link in enumerate(route):
            last = hop == len(route) - 1
            transfer = Transfer(chunk, links[link].src, links[link].dst, link, 0.0, 0.0,
                                op if last else Op.COPY, deps)  # fmt: skip
            self.transfers.append(_Planned(transfer, phase, rest, sender, receiver))
            deps = (len(self.transfers) - 1,)
        return first, len(self.transfers) - 1

    def _add_chunk(
        self,
        chunk: int,
        owner: int,
        roots: Sequence[int],
        members: Sequence[frozenset[int]],
    ) -> None:
        """All-Reduce: reduce into every group's root, exchange the roots' sums. All-Gather:
        the owner sends the chunk to every other group's root. Then broadcast from each."""
        grown = [self._trees_at(root, inside) for root, inside in zip(roots, members, strict=True)]
        ups, downs = [up for up, _ in grown], [down for _, down in grown]
        below = [_heights(root, _parent_of(down)) for root, down in zip(roots, downs, strict=True)]
        if self.reduces:
            rounds = len(_exchange_rounds(len(roots)))
            sums_at = {
                root: self._reduced(chunk, root, up, {}, rounds + heights[root])
                for root, up, heights in zip(roots, ups, below, strict=True)
            }
            self._exchange(
                chunk, roots, sums_at, [b[root] for root, b in zip(roots, below, strict=True)]
            )
        else:
            sums_at = self._to_roots(chunk, owner, roots, below)
        for root, down in zip(roots, downs, strict=True):
            self._broadcast(chunk, root, down, sums_at[root])

    def _add_hub_chunk(self, chunk: int, owner: int, members: Sequence[frozenset[int]]) -> None:
        """All-Reduce through the owner's group (:attr:`TreeLayout.hub`): every other group
        reduces the chunk into the member with the cheapest route into the owner's group
        and sends its sum there; the owner's group reduces it with those sums added in
        where they land, and the result goes back the same ways and is broadcast inside
        each group."""
        hub = next(inside for inside in members if owner in inside)
        crossings = []  # per other group: its root, where it lands, and the two routes
        for inside in members:
            if inside is not hub:
                (_, route), root, landing = min(
                    (self._cheapest(route), npu, other)
                    for npu in sorted(inside)
                    for other, (_, route) in self.routes.into(npu, hub)
                )
                self._book(route)
                back = self._cheapest(self.routes.from_npu(landing)[root][1])[1]
                self._book(back)
                crossings.append((root, landing, route, back, inside))
        trees = [(root, *self._trees_at(root, inside)) for root, _, _, _, inside in crossings]
        hub_up, hub_down = self._trees_at(owner, hub)
        landed: dict[int, list[int]] = {}
        for (root, up, down), (_, landing, route, _, _) in zip(trees, crossings, strict=True):
            summed = self._reduced(chunk, root, up, {}, 3 + _heights(root, _parent_of(down))[root])
            _, last = self._message(chunk, route, Op.REDUCE, tuple(summed), EXCHANGING, 3)
            landed.setdefault(landing, []).append(last)
        summed = self._reduced(chunk, owner, hub_up, landed, 2)
        got = self._broadcast(chunk, owner, hub_down, summed)
        for (root, _, down), (_, landing, _, back, _) in zip(trees, crossings, strict=True):
            _, last = self._message(chunk, back, Op.COPY, got[landing], EXCHANGING, 2)
            self._broadcast(chunk, root, down, [last])

    def _trees_at(
        self, root: int, inside: frozenset[int]
    ) -> tuple[dict[int, tuple[int, Route]], dict[int, tuple[int, Route]]]:
        """A group's reduction tree at ``root`` (none for an All-Gather) and its broadcast
        tree, grown in that order."""
        from_root, to_root = self._distances(root, inside)
        up = self._tree(root, inside, to_root, up=True) if self.reduces else {}
        return up, self._tree(root, inside, from_root, up=False)

    def _distances(
        self, root: int, inside: frozenset[int]
    ) -> tuple[dict[int, float], dict[int, float]]:
        """:meth:`MessageRoutes.distances` inside ``root``'s group, computed once per root."""
        if root not in self._distance_of:
            self._distance_of[root] = self.routes.distances(root, inside)
        return self._distance_of[root]

    def _tree(
        self, root: int, inside: frozenset[int], distance: dict[int, float], up: bool
    ) -> dict[int, tuple[int, Route]]:
        """A group's reduction (``up``) or broadcast tree: each NPU's parent and route."""
        if self.flat:  # only the root is nearer than anyone: every parent is the root
            return self._parents(root, inside, {npu: float(npu != root) for npu in inside}, up)
        if self.spanning:
            return self._spanning(root, inside, up)
        return self._parents(root, inside, distance, up)

    def _reduced(
        self,
        chunk: int,
        root: int,
        up: dict[int, tuple[int, Route]],
        into: dict[int, list[int]],
        after: int,
    ) -> list[int]:
        """The messages of a reduction tree, each NPU's waiting for what adds into it
        (``into``, filled as they go: per NPU, the last hops that arrive in it); the last
        hops into ``root``. ``after``: messages from the root to the chunk's end."""
        to_go = _depths(root, _parent_of(up))
        for npu in sorted(up, key=lambda n: (-to_go[n], n)):  # children before parents
            parent, route = up[npu]
            rest = to_go[npu] + after
            _, last = self._message(
                chunk, route, Op.REDUCE, tuple(into.get(npu, ())), REDUCING, rest
            )
            into.setdefault(parent, []).append(last)
        return into.get(root, [])

    def _broadcast(
        self, chunk: int, root: int, down: dict[int, tuple[int, Route]], deps: Sequence[int]
    ) -> dict[int, tuple[int, ...]]:
        """The messages of a broadcast tree from ``root``, which has the chunk once
        ``deps`` have ended; per NPU, the hop that brings it."""
        got = {root: tuple(deps)}
        heights = _heights(root, _parent_of(down))
        depth = _depths(root, _parent_of(down))
        for npu in sorted(down, key=lambda n: (depth[n], n)):  # parents before children
            parent, route = down[npu]
            _, last = self._message(
                chunk, route, Op.COPY, got[parent], BROADCASTING, 1 + heights[npu]
            )
            got[npu] = (last,)
        return got

    def _to_roots(
        self, chunk: int, owner: int, roots: Sequence[int], below: Sequence[dict[int, int]]
    ) -> dict[int, list[int]]:
        """All-Gather: the owner (its own group's root) sends the chunk straight to every
        other root, by the least-loaded of its fastest routes; per root, the hop that
        brings it. Relaying through nearer roots instead lengthens the path a chunk
        takes across the network (rails over two leaves at one chunk per GPU: 1.485
        against 1.281 of the best bound)."""
        got: dict[int, list[int]] = {owner: []}
        for root, heights in zip(roots, below, strict=True):
            if root != owner:
                route = self._cheapest(self.routes.from_npu(owner)[root][1])[1]
                self._book(route)
                rest = 1 + heights[root]
                _, last = self._message(chunk, route, Op.COPY, (), EXCHANGING, rest)
                got[root] = [last]
        return got

    def _exchange(
        self,
        chunk: int,
        roots: Sequence[int],
        sums_at: dict[int, list[int]],
        broadcast_depth: Sequence[int],
    ) -> None:
        """The roots' exchange rounds (:func:`_exchange_rounds`): in each, every root sends
        what it has summed so far to its peers of the round, which add it in. A root's
        sends must leave before that round's sums arrive in it (checked after re-timing,
        :attr:`exchanges`)."""
        rounds = _exchange_rounds(len(roots))
        for step, pairs in enumerate(rounds):
            sent: dict[int, list[int]] = {root: [] for root in roots}
            arrived: dict[int, list[int]] = {root: [] for root in roots}
            for index, peer_index in pairs:
                root, peer = roots[index], roots[peer_index]
                route = self._cheapest(self.routes.from_npu(root)[peer][1])[1]
                self._book(route)
                rest = len(rounds) - step + broadcast_depth[peer_index]
                first, last = self._message(
                    chunk, route, Op.REDUCE, tuple(sums_at[root]), EXCHANGING, rest
                )
                sent[root].append(first)
                arrived[peer].append(last)
            for root in roots:
                self.exchanges += [(out, into) for out in sent[root] for into in arrived[root]]
                sums_at[root] += arrived[root]


def _exchange_rounds(count: int) -> list[list[tuple[int, int]]]:
    """Per round of the roots' exchange, the (sender, receiver) pairs of root indices:
    recursive doubling for a power of two (in round ``r``, the roots whose indices
    differ in bit ``r``), else one round of every root to every other."""
    if count & (count - 1) == 0:
        return [[(index, index ^ (1 << step)) for index in range(count)]
                for step in range((count - 1).bit_length())]  # fmt: skip
    return [[(index, peer) for index in range(count) for peer in range(count) if peer != index]]


def _joined(
    trees: Sequence[tuple[list[_Planned], list[tuple[int, int]]]], busiest_us: float
) -> _Trees:
    """Every chunk's transfers and exchange pairs, each numbered from 0, as one plan."""
    transfers: list[_Planned] = []
    exchanges: list[tuple[int, int]] = []
    offsets: list[int] = []
    for planned, paired in trees:
        offset = len(transfers)
        transfers += planned
        offsets += [offset] * len(planned)
        exchanges += [(out + offset, into + offset) for out, into in paired]
    return _Trees(transfers, exchanges, np.array(offsets, np.int64), busiest_us)


def _parent_of(tree: dict[int, tuple[int, Route]]) -> dict[int, int]:
    """Each NPU's parent in a tree given as each one's (parent, route)."""
    return {npu: parent for npu, (parent, _) in tree.items()}


def _depths(root: int, parent_of: dict[int, int]) -> dict[int, int]:
    """Messages between ``root`` and every NPU of a tree given by each one's parent."""
    depth = {root: 0}
    for npu in parent_of:
        path = []
        while npu not in depth:
            path.append(npu)
            npu = parent_of[npu]
        for step in reversed(path):
            depth[step] = depth[npu] + 1
            npu = step
    return depth


def _heights(root: int, parent_of: dict[int, int]) -> dict[int, int]:
    """Messages from each NPU of a tree to the deepest NPU below it."""
    depth = _depths(root, parent_of)
    height = dict.fromkeys(depth, 0)
    for npu in sorted(parent_of, key=lambda n: -depth[n]):
        height[parent_of[npu]] = max(height[parent_of[npu]], height[npu] + 1)
    return height
