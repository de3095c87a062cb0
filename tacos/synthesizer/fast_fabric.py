"""The fast engine on switched topologies: the reference's routes as arrays, compiled.

:func:`fabric_spread` returns the transfers :func:`tacos.synthesizer.greedy.greedy_spread`
returns on a topology with switches (same seed, same transfers, same random
state after), and :func:`replay_table` re-times transfers as
:func:`tacos.synthesizer.timing.retime_asap` does. What the reference builds
lazily (routes, the shortest paths through the fabric, the distances between
NPUs that the nearer-holder rule compares) is built here once, as arrays
(:class:`FabricArrays`), for :mod:`tacos.synthesizer._fabric_kernels`.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from tacos.errors import TacosError
from tacos.synthesizer import _fabric_kernels as FK
from tacos.synthesizer._replay import replay
from tacos.synthesizer.arrays import RandomState, csr, link_endpoints, rival_arrays
from tacos.synthesizer.greedy import RAREST_COMPARE_ALL, ChunkPolicy
from tacos.synthesizer.routes import (
    Fabric,
    matching_groups,
    one_uplink_hosts,
    rarest_neighbours,
)
from tacos.topology import Topology
from tacos.transfers import TransferTable


@dataclass(frozen=True)
class FabricArrays:
    """A topology's routes, fabric paths and NPU distances for one chunk size, as arrays.

    * ``has_routes[l]``: link ``l`` is the first link of some route (others are
      never matched); ``first_ptr``/``first_links``: per node, those of its links.
    * ``inbr_ptr``/``inbrs``: per node, the "rarest" policy's in-neighbours
      (:func:`~tacos.synthesizer.routes.rarest_neighbours`).
    * ``rivals_ptr``/``rivals``: per link, the faster links it may leave chunks to
      (:func:`~tacos.synthesizer.routes.faster_rivals`); ``slow_in_ptr``/``slow_in``:
      per node, the in-links whose transfers faster ones may overtake
      (:func:`~tacos.synthesizer.routes.overtakable_in_links`); ``rival_slot``: per link
      with rivals, its row in the kernel's overtaking table (-1 for the others).
    * ``near_ptr``/``near_nodes``/``near_dist``: per NPU, the other NPUs by
      distance to it, nearest first; ``max_keys`` bounds how many distance cuts
      of one node the nearer-holder rule can ask for.
    * ``dag_*``: per switch entered by a link with routes, its
      :class:`~tacos.synthesizer.routes.ShortestPaths` flattened (``dag_of_link``:
      which one a link enters, -1 for links between NPUs); ``dest_base``: where
      each link's per-destination rows start in the kernel's per-link tables.
    * ``matching_of_link``: per link with routes into a switch, its matching group
      (:func:`~tacos.synthesizer.routes.matching_groups`); -1 for the others.
      The free uplinks of one group are matched together.
    * ``one_uplink``: per node, a host whose only link out leads into a switch
      (:func:`~tacos.synthesizer.routes.one_uplink_hosts`).
    """

    link_src: np.ndarray
    link_dst: np.ndarray
    link_time: np.ndarray
    has_routes: np.ndarray
    first_ptr: np.ndarray
    first_links: np.ndarray
    inbr_ptr: np.ndarray
    inbrs: np.ndarray
    rivals_ptr: np.ndarray
    rivals: np.ndarray
    slow_in_ptr: np.ndarray
    slow_in: np.ndarray
    rival_slot: np.ndarray
    near_ptr: np.ndarray
    near_nodes: np.ndarray
    near_dist: np.ndarray
    max_keys: int
    dag_of_link: np.ndarray
    dag_node_ptr: np.ndarray
    dag_nodes: np.ndarray
    dag_first_npu: np.ndarray
    dag_edge_ptr: np.ndarray
    dag_edge_link: np.ndarray
    dag_edge_pred: np.ndarray
    dag_path_us: np.ndarray
    dest_base: np.ndarray
    matching_of_link: np.ndarray
    one_uplink: np.ndarray

    @classmethod
    def of(cls, topology: Topology, chunk_bytes: int) -> FabricArrays:
        times = np.asarray(topology.link_times_us(chunk_bytes), np.float64)
        num_npus, num_links = topology.num_npus, len(topology.links)
        link_src, link_dst = link_endpoints(topology)
        out_ptr, out_links = csr(topology.out_links)
        from_npu = np.nonzero(link_src < num_npus)[0]
        into_switch = from_npu[link_dst[from_npu] >= num_npus]
        entries, dag_of_entry = np.unique(link_dst[into_switch], return_inverse=True)
        cost_ps = np.asarray(Fabric.cost_ps_of(times.tolist()), np.int64)
        into_ptr, into_links = csr(topology.in_links)
        with ThreadPoolExecutor(1) as helper:  # both kernels release the GIL: two cores
            nearest = helper.submit(
                FK.nearest_first, into_ptr, link_src[into_links], times[into_links], num_npus
            )
            dags = FK.fabric_dags(out_ptr, out_links, link_dst, cost_ps, times, num_npus, entries)
            near_ptr, near_nodes, near_dist = nearest.result()
        node_ptr, nodes, first_npu, edge_ptr, edge_links, edge_preds, path_us, length_ps = dags
        dag_of_link = np.full(num_links, -1, np.int64)
        dag_of_link[into_switch] = dag_of_entry
        has_routes = FK.links_with_routes(
            out_ptr, out_links, link_dst, cost_ps, num_npus, dag_of_link, node_ptr, nodes,
            first_npu, length_ps,
        )  # fmt: skip
        dag_of_link[~has_routes] = -1
        routed = has_routes.tolist()
        first_ptr, first_links = csr([[i for i in out if routed[i]] for out in topology.out_links])
        inbr_ptr, inbrs = csr(rarest_neighbours(topology))
        rivals_ptr, rivals, slow_in_ptr, slow_in, rival_slot = rival_arrays(
            topology, times.tolist()
        )
        max_keys = 1 + max(
            (len(np.unique(near_dist[near_ptr[v] : near_ptr[v + 1]])) for v in topology.npus),
            default=0,
        )
        dag_sizes = np.append(np.diff(node_ptr), 0)  # dag_of_link -1 (none) reads the 0
        # Each link into a switch has a row per position of its DAG in the kernel's tables.
        dest_base = np.zeros(num_links + 1, np.int64)
        np.cumsum(dag_sizes[dag_of_link], out=dest_base[1:])
        matching_of_node = np.asarray(matching_groups(topology), np.int64)
        matching_of_link = np.where(dag_of_link >= 0, matching_of_node[link_dst], -1)
        one_uplink = np.asarray(one_uplink_hosts(topology), np.bool_)
        return cls(
            link_src, link_dst, times, has_routes, first_ptr, first_links, inbr_ptr, inbrs,
            rivals_ptr, rivals, slow_in_ptr, slow_in, rival_slot, near_ptr,
            near_nodes, near_dist, max_keys, dag_of_link, node_ptr, nodes, first_npu, edge_ptr,
            edge_links, edge_preds, path_us, dest_base, matching_of_link, one_uplink,
        )  # fmt: skip

    def distances(self, num_npus: int) -> np.ndarray:
        """``dist[x, t]``: the per-chunk time from NPU ``x`` to NPU ``t`` (inf: no path),
        the distances the reference's relays compare (NPUs only: the rows of
        ``near_ptr`` past them, the switches', are empty)."""
        dist = np.full((num_npus, num_npus), np.inf)
        listed = self.near_ptr[num_npus]
        targets = np.repeat(np.arange(num_npus), np.diff(self.near_ptr[: num_npus + 1]))
        dist[self.near_nodes[:listed], targets] = self.near_dist[:listed]
        np.fill_diagonal(dist, 0.0)
        return dist


@dataclass(frozen=True)
class Wants:
    """Per node, the chunks it must end with (less those it starts with are not counted):
    ``bits`` (a ``uint64`` row per node, bit ``c`` of word ``c // 64``), and the span
    ``lo[v] <= chunk < hi[v]`` each row lies in (empty for nodes that want nothing);
    ``partial`` when some NPU wants fewer than all (then other nodes may relay)."""

    bits: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    partial: bool

    @classmethod
    def everything(cls, num_nodes: int, num_npus: int, num_chunks: int) -> Wants:
        """Every NPU wants every chunk (``bits`` is then not needed: it has no rows)."""
        hi = np.where(np.arange(num_nodes) < num_npus, num_chunks, 0).astype(np.int64)
        bits = np.zeros((0, (num_chunks + 63) // 64), np.uint64)
        return cls(bits, np.zeros(num_nodes, np.int64), hi, False)

    @classmethod
    def of(cls, num_npus: int, wanted: np.ndarray) -> Wants:
        """From ``wanted[node, chunk]`` (booleans)."""
        num_nodes, num_chunks = wanted.shape
        padded = np.zeros((num_nodes, 64 * ((num_chunks + 63) // 64)), np.bool_)
        padded[:, :num_chunks] = wanted
        bits = np.packbits(padded, axis=1, bitorder="little").view("<u8").astype(np.uint64)
        some = wanted.any(axis=1)
        lo = np.where(some, wanted.argmax(axis=1), 0)
        hi = np.where(some, num_chunks - wanted[:, ::-1].argmax(axis=1), 0)
        partial = not wanted[:num_npus].all()
        return cls(bits, lo.astype(np.int64), hi.astype(np.int64), partial)

    def wanted(self, node: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        """Whether each ``node`` wants its ``chunk`` (or starts with it)."""
        if not self.partial:
            return (self.lo[node] <= chunk) & (chunk < self.hi[node])
        return (self.bits[node, chunk >> 6] >> (chunk & 63).astype(np.uint64) & 1).astype(bool)

    def count(self, source_node: np.ndarray) -> int:
        """How many (node, chunk) deliveries: every wanted chunk but the sources' own."""
        own = self.wanted(source_node, np.arange(len(source_node))).sum()
        if not self.partial:
            return int((self.hi - self.lo).sum() - own)
        return int(np.unpackbits(self.bits.view(np.uint8)).sum() - own)


_cache: dict[tuple[int, int], tuple[Topology, FabricArrays]] = {}


def fabric_arrays(topology: Topology, chunk_bytes: int) -> FabricArrays:
    """:meth:`FabricArrays.of`, kept for the last few topologies (All-Reduce asks twice)."""
    key = (id(topology), chunk_bytes)
    found = _cache.get(key)
    if found is None or found[0] is not topology:
        if len(_cache) >= 4:
            _cache.pop(next(iter(_cache)))
        found = (topology, FabricArrays.of(topology, chunk_bytes))
        _cache[key] = found
    return found[1]


def fabric_spread(
    topology: Topology,
    source_node: np.ndarray,
    source_time: np.ndarray,
    source_deps_ptr: np.ndarray,
    source_deps: np.ndarray,
    chunk_bytes: int,
    rng: random.Random,
    policy: ChunkPolicy,
    *,
    link_free_at: np.ndarray | None = None,
    index_offset: int = 0,
    own_first: bool = True,
    near_fraction: float = 1.0,
    sends_in_flight: int | None = None,
    wants: Wants | None = None,
) -> TransferTable:
    """The reference's greedy spread of chunk ``c`` from ``source_node[c]`` to every NPU,
    or to the NPUs that ``wants`` says want it (relayed by others on their way).

    Transfers in decision order (the reference's order, before sorting);
    dependencies index them plus ``index_offset``, or are the source's
    (``source_deps`` of the chunk, CSR). ``rng`` advances as the reference's does.
    """
    arrays = fabric_arrays(topology, chunk_bytes)
    num_chunks = len(source_node)
    if wants is None:
        wants = Wants.everything(topology.num_nodes, topology.num_npus, num_chunks)
    dist = arrays.distances(topology.num_npus) if wants.partial else np.zeros((0, 0))
    random_state = RandomState(rng)
    free_at = np.zeros(len(topology.links)) if link_free_at is None else link_free_at
    chunk, link, start, end, dep, missing = FK.run_fabric_spread(
        arrays.link_src, arrays.link_dst, arrays.link_time, arrays.has_routes, arrays.first_ptr,
        arrays.first_links, arrays.inbr_ptr, arrays.inbrs, arrays.rivals_ptr, arrays.rivals,
        arrays.slow_in_ptr, arrays.slow_in, arrays.rival_slot,
        arrays.near_ptr, arrays.near_nodes, _near_distances(arrays, near_fraction),
        arrays.max_keys, arrays.dag_of_link,
        arrays.dag_node_ptr, arrays.dag_nodes, arrays.dag_first_npu, arrays.dag_edge_ptr,
        arrays.dag_edge_link, arrays.dag_edge_pred, arrays.dag_path_us, arrays.dest_base,
        arrays.matching_of_link, arrays.one_uplink & own_first, num_chunks,
        np.asarray(source_node, np.int64), np.asarray(source_time, np.float64),
        np.asarray(free_at, np.float64), wants.lo, wants.hi, wants.bits, dist,
        wants.count(np.asarray(source_node, np.int64)),
        policy == "rarest", RAREST_COMPARE_ALL, index_offset, sends_in_flight or 0,
        random_state.mt, random_state.counters,
    )  # fmt: skip
    random_state.save()
    if missing:
        raise TacosError(
            f"topology {topology.name!r}: some chunk can never reach some node; "
            "check that the topology is strongly connected"
        )
    ptr, deps = FK.dependency_lists(
        dep, np.asarray(source_deps_ptr, np.int64), np.asarray(source_deps, np.int64)
    )
    op = np.zeros(len(chunk), np.uint8)
    src, dst = arrays.link_src[link], arrays.link_dst[link]
    return TransferTable(chunk, src, dst, link, start, end, op, ptr, deps)


def replayed_order(
    transfers: TransferTable,
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows in the order the compiled replay starts them, by (start, link, position),
    with their starts and ends (the default cost model; an NPU's link in order of
    recorded start, its messages ``sends_in_flight`` at a time, as
    :func:`tacos.simulate.replay_times` has them; under a port limit, the rows must be
    in start order, as the replay's positions break ties)."""
    link_time = np.asarray(topology.link_times_us(chunk_bytes), np.float64)
    order, start = replay(
        transfers.link, transfers.chunk, transfers.op, transfers.deps_ptr, transfers.deps,
        transfers.start, transfers.src >= topology.num_npus, link_time, sends_in_flight or 0,
        transfers.src, transfers.dst >= topology.num_npus,
    )  # fmt: skip
    if len(order) < len(transfers):
        raise TacosError("the synthesized schedule deadlocks in its replay (a bug: please report)")
    return order, start, start + link_time[transfers.link[order]]


def replay_times_of(
    transfers: TransferTable,
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its start and end as the compiled replay times it (:func:`replayed_order`)."""
    order, start_in_order, end_in_order = replayed_order(
        transfers, topology, chunk_bytes, sends_in_flight
    )
    start, end = np.empty(len(transfers)), np.empty(len(transfers))
    start[order], end[order] = start_in_order, end_in_order
    return start, end


def replay_table(
    transfers: TransferTable,
    topology: Topology,
    chunk_bytes: int,
    sends_in_flight: int | None = None,
) -> TransferTable:
    """``retime_asap``: replayed times, sorted by (start, link, position).

    Without a port limit ``transfers`` need not be in start order: the replay
    orders an NPU's link by recorded start, and no two transfers of one link
    start together.
    """
    order, start, end = replayed_order(transfers, topology, chunk_bytes, sends_in_flight)
    return transfers.take(order, start=start, end=end)


def _near_distances(arrays: FabricArrays, near_fraction: float) -> np.ndarray:
    """``near_dist`` scaled as the reference's ``_NearHoldings`` scales it; unscaled
    without a copy (it holds a distance per pair of NPUs: 134 MB at 4096 GPUs)."""
    if near_fraction == 1.0:
        return arrays.near_dist
    return arrays.near_dist * (1 / near_fraction)
