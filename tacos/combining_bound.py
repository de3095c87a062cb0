"""All-Reduce: a message carries only what its sender has combined by the time it leaves.

The cut bounds (:mod:`tacos.latency_cuts`) let every message into a set of nodes
carry the data of any far rank as soon as that rank's data could be there. But
an NPU sends one message at a time, holding one sum, and a sum of many ranks'
data takes time to gather: on htsim's 8-host tree a host of the other pod
holds its rack-mate's data too after 86 us, all four of its pod's no sooner
than 172 us, and its messages take 341.5 us to reach host 0: one arriving
before 427 us brings one far host's data, before 513 us at most two. Host 0's
one link takes in a message every 43 us, and for each of the 8 chunks it must
take in all 4 far contributions: 771 us, where the cut bounds give 644
(TACOS: 985.7).

For a node set ``X`` with ranks inside and ``F``, some ranks outside it:

* every rank of ``X`` must learn, for every chunk, the data of every rank of
  ``F``; a contribution first enters ``X`` in a transfer over a link
  ``e = u -> v`` into ``X`` (``u`` outside), part of a message whose sender
  ``w`` is an NPU outside ``X`` (a message leaving ``X`` and coming back
  brings nothing new), and which carries at most the contributions ``w`` knew
  when it left;
* ``w`` can know ``i`` of them no sooner than ``know_i(w)``: the ``i``-th
  smallest of its times from the ranks of ``F`` (0 for itself), and, on up to
  :data:`MAX_COUNTED_NPUS` NPUs, no sooner than the links into ``w``, or into
  a set holding it (its server), can have brought the ``i`` less those inside
  (counted as below, each transfer's content from those distances, then the
  time on to ``w``): on dgx:4x8 a GPU knows the data of 16 GPUs outside its
  server only once its server's 8 NICs have brought it, 196.0 -> 200.7 us;
* so a transfer over ``e`` bringing ``i`` contributions ends no sooner than
  ``arrive_i(e) = min over w of know_i(w) + time(w, u) + duration(e)``, and
  they need ``time(v, nearest rank of X)`` more to be of use;
* transfers over ``e`` end at least ``busy(e)`` apart, so by ``T`` the link
  can have brought at most ``sum over k >= 0 of #{i : arrive_i(e) <= T - k
  busy(e)}`` (counting back from ``T``: the latest transfers carry the most);
* all links into ``X`` together must bring ``chunks x |F|``: the smallest such
  ``T`` bounds the collective. Every rank of ``X`` needs all of it, and a
  transfer lands at one NPU, so what arrives later than ``T`` less the least
  time between two ranks of ``X`` serves one rank only (as the cut bounds
  spread a server's last chunks: dgx:4x8, one NVSwitch hop, 190.6 -> 196.0 us).

Sets are those of the cut bounds (servers, pods, single ranks); ``F`` is every
rank outside, or the farther half of them (fewer to bring, but later). Any
choice gives a valid bound. On up to :data:`MAX_NPUS` NPUs.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.latency_cuts import (
    TimedLinks,
    cut_sets,
    earliest_to_spread,
    soonest_arrivals,
    spread_inside,
)
from tacos.topology import Topology

MAX_NPUS = 128
"""Larger topologies get 0.0 (no bound): it costs NPUs x far ranks per link into a set, and
it binds where few servers or pods hold few chunks each. On dgx:32x8 (256 GPUs, one chunk
each) it took 1 s for 60% of the best bound; on dgx:16x8, 0.3 s for 69%."""
MAX_COUNTED_NPUS = 32
"""Up to this many NPUs, what a sender can know is also limited by the links into it and
into its server (htsim's 8 hosts: 728 -> 771 us; dgx:4x8 196.0 -> 200.7 us in 0.5 s
instead of 0.2; dgx:8x8 with two servers per leaf, 64 GPUs, 373.4 -> 384.2 us but in
5.8 s)."""
FAR_FRACTIONS = (0.0, 0.5)
"""``F``: the ranks outside a set at least as far from it as this quantile of their times."""


def combining_bound_us(topology: Topology, collective: Collective) -> float:
    """The largest bound of the module docs over the sets and ``F`` tried, in us (0.0 for
    other collectives than All-Reduce, above :data:`MAX_NPUS` NPUs, and on networks
    without switches, where it never exceeded the cut bounds: meshes, tori, rings,
    hypercubes and heterogeneous meshes of the quality suite, at 1 to 4 chunks per NPU,
    for 20-120 ms a call)."""
    if (
        collective.kind is not CollectiveKind.ALL_REDUCE
        or topology.num_npus > MAX_NPUS
        or not topology.num_switches
    ):
        return 0.0
    links = _Links(topology, collective.chunk_bytes)
    ranks = np.zeros(topology.num_nodes, bool)
    ranks[list(collective.ranks)] = True
    known: dict[bytes, np.ndarray] = {}
    sets = cut_sets(topology, ranks)
    groups = [inside for inside in sets if np.count_nonzero(inside[: topology.num_npus]) > 1]
    bound = 0.0
    for inside in sets:
        outside_ranks = np.flatnonzero(ranks & ~inside)
        if not (ranks & inside).any() or not len(outside_ranks):
            continue
        to_inside = links.backward.from_nodes(np.flatnonzero(ranks & inside))
        far_us = to_inside[outside_ranks]
        spread = spread_inside(topology, links, ranks, inside)
        for fraction in FAR_FRACTIONS:
            far = outside_ranks[far_us >= np.quantile(far_us, fraction)]
            key = far.tobytes()
            if key not in known:
                known[key] = links.knowing_us(far, groups)
            first, step = links.into(inside, known[key], to_inside)
            count = collective.num_chunks * len(far)
            bound = max(bound, earliest_to_spread(first, step, count, spread))
    return bound


def _entries(arrive: np.ndarray, busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links into a set, ``arrive[e, i - 1]`` (nondecreasing in ``i``) the soonest a
    transfer over link ``e`` can bring ``i`` contributions, ``busy[e]`` apart, as chunk
    arrivals for :mod:`tacos.latency_cuts`: one per link and ``i``, each counting once for
    every transfer over ``e`` that ends in ``[arrive, T]`` on the grid ``T - k busy``
    (counting back from ``T``, the latest transfers carry the most)."""
    return arrive.ravel(), np.repeat(busy, arrive.shape[1])


class _Links(TimedLinks):
    """The cuts' timed links, and the times between the topology's NPUs and nodes."""

    def __init__(self, topology: Topology, chunk_bytes: int) -> None:
        super().__init__(topology, chunk_bytes)
        self.topology = topology
        self.from_npu = np.stack([self.forward.from_nodes([npu]) for npu in topology.npus])
        """``from_npu[w, n]``: the time from NPU ``w`` to node ``n``."""

    @cached_property
    def to_npu(self) -> np.ndarray:
        """``to_npu[w, n]``: the time from node ``n`` to NPU ``w``."""
        return np.stack([self.backward.from_nodes([npu]) for npu in self.topology.npus])

    def knowing_us(self, far: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
        """``know[w, i - 1]``: the soonest NPU ``w`` can know ``i`` contributions of the
        ranks ``far`` (module docs): from distances alone, and on up to
        :data:`MAX_COUNTED_NPUS` NPUs, from what the links into ``w`` and into each of
        ``groups`` (node masks) holding it can have brought it."""
        npus = self.topology.num_npus
        alone = np.sort(self.from_npu[far][:, :npus].T, axis=1)
        if npus > MAX_COUNTED_NPUS:
            return alone
        known = alone.copy()
        is_far = np.zeros(npus, bool)
        is_far[far] = True
        singles = [np.arange(self.topology.num_nodes) == npu for npu in range(npus)]
        for inside in [*singles, *groups]:
            members = np.flatnonzero(inside[:npus])
            own = int(is_far[members].sum())
            if own == len(far):
                continue
            links, arrive = self._entering(inside, alone)
            for npu in members:
                reach = arrive + self.to_npu[npu, self.dst[links]][:, None]
                first, step = _entries(reach, self.busy[links])
                brought = soonest_arrivals(first, step, len(far) - own)
                known[npu, own:] = np.maximum(known[npu, own:], brought)
        return known

    def into(
        self, inside: np.ndarray, know: np.ndarray, to_inside: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The links into ``inside`` as :func:`_entries`, each transfer bringing what a
        sender outside could know (``know``) when it left, and ``to_inside`` more to reach
        a rank."""
        links, arrive = self._entering(inside, know)
        return _entries(arrive + to_inside[self.dst[links]][:, None], self.busy[links])

    def _entering(self, inside: np.ndarray, know: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links into ``inside``, and per link and ``i``, the soonest a transfer over it
        can end bringing ``i`` contributions: its sender, outside, knew them (``know``)."""
        senders = ~inside[: self.topology.num_npus]
        links = np.flatnonzero(~inside[self.src] & inside[self.dst])
        soonest: dict[int, np.ndarray] = {}  # per tail of a link in: when a sum can be there
        arrive = np.empty((len(links), know.shape[1]))
        for row, link in enumerate(links):
            tail = int(self.src[link])
            if tail not in soonest:
                leave = know[senders] + self.from_npu[senders, tail][:, None]
                soonest[tail] = leave.min(axis=0, initial=np.inf)
            arrive[row] = soonest[tail] + self.duration[link]
        return links, arrive
