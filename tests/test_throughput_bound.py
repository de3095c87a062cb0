"""The throughput-optimal cut bound (ForestColl): hand-worked values, brute force, schedules.

Times below use 1 MiB at 1 GB/s = 2**20 / 2**30 s = 976.5625 us (GB = 2**30 bytes).
"""

from __future__ import annotations

import time
from fractions import Fraction

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tacos
from tacos import throughput
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.gossip_bound import OUTSIDE, gossip_bound_us, partitions, port_capacity_GBps
from tacos.topology import Link, Topology

MIB = 2**20
US_PER_MIB_PER_GBPS = 976.5625
AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE
# Deterministic in CI: fixed examples, no example database.
deterministic = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def spec(kind: CollectiveKind, topo: Topology, chunks: int = 1, size: int = MIB) -> Collective:
    return Collective(kind, tuple(topo.npus), chunks, size)


def bound(topo: Topology, kind: CollectiveKind, chunks: int = 1, size: int = MIB) -> float:
    return tacos.lower_bounds(topo, spec(kind, topo, chunks, size)).throughput_us


def links(*rows: tuple[int, int, float]) -> tuple[Link, ...]:
    return tuple(Link(u, v, bandwidth, 0.5) for u, v, bandwidth in rows)


# ------------------------------------------------------------------ hand-computed
def test_ring_of_four():
    # Each NPU owns 1 MiB. S = three consecutive NPUs: 3 MiB must leave over
    # 2 links x 50 GB/s, ratio 3/100; two adjacent: 2/100; two opposite: 2/200;
    # one: 1/100. Worst 3/100: 3 MiB / 100 GB/s = 3 * 976.5625 / 100 = 29.296875 us.
    # That is the ingress bound (every NPU takes 3 MiB in over 2 links).
    topo = tacos.from_spec("ring:4")
    assert bound(topo, AG) == bound(topo, RS) == 29.296875
    found = tacos.lower_bounds(topo, spec(AG, topo))
    assert found.throughput_us == found.ingress_us
    assert found.best_us == found.chunk_ingress_us == 40.0625  # 2 chunk times with latency


def test_star_through_one_switch():
    # S = the switch and three NPUs: 3 MiB leave over the one link switch -> NPU
    # (50 GB/s): 3 * 976.5625 / 50 = 58.59375 us.
    topo = tacos.from_spec("switch:4")
    assert bound(topo, AG) == bound(topo, RS) == 58.59375


def two_nodes_of_two_gpus() -> Topology:
    """GPUs 0, 1 in one node, 2, 3 in the other, 100 GB/s inside, 10 GB/s between 1 and 2."""
    return Topology(
        4,
        links((0, 1, 100), (1, 0, 100), (2, 3, 100), (3, 2, 100), (1, 2, 10), (2, 1, 10)),
        name="2x2",
    )


def test_the_slow_link_between_two_nodes_binds():
    # S = node {0, 1}: 2 MiB must cross the 10 GB/s link: 2 * 976.5625 / 10 = 195.3125 us.
    # Every single-NPU cut is far looser (NPU 1: 3 MiB over 110 GB/s = 26.6 us).
    topo = two_nodes_of_two_gpus()
    found = tacos.lower_bounds(topo, spec(AG, topo))
    assert found.throughput_us == bound(topo, RS) == 195.3125
    assert found.ingress_us == 29.296875  # 3 MiB into NPU 0 over 100 GB/s
    # Chunk by chunk, the two cross that link one after the other, each 97.65625 us
    # plus its 0.5 us latency, and the second must then still go from GPU 1 to GPU 0
    # (9.765625 + 0.5 us): the latency-aware cut.
    assert found.best_us == found.latency_cut_us == pytest.approx(196.3125 + 10.265625)
    # All-Reduce: the whole 4 MiB crosses that link each way: 4 * 976.5625 / 10.
    assert bound(topo, AR) == 390.625


def asymmetric() -> Topology:
    """NPU 0 sends to 1 and 2 at 100 GB/s; they answer at 25 GB/s; 1 and 2 are not linked."""
    return Topology(3, links((0, 1, 100), (0, 2, 100), (1, 0, 25), (2, 0, 25)), name="asym")


def test_an_asymmetric_graph_differs_by_direction():
    topo = asymmetric()
    # All-Gather, links leaving S: {1} (or {2}) sends 1 MiB over 25 GB/s -> 1/25;
    # {1, 2}: 2 MiB over 50 -> 2/50; {0, 1}: 2 MiB over 100. 1 MiB / 25 GB/s = 39.0625 us.
    assert bound(topo, AG) == 39.0625
    # Reduce-Scatter, links entering S: {0, 1} takes 2 MiB over the 25 GB/s link
    # 2 -> 0: 2 * 976.5625 / 25 = 78.125 us.
    assert bound(topo, RS) == 78.125
    # Rooted kinds (root 0): Broadcast needs 100 GB/s from 0 to either rank
    # (9.765625 us), Reduce gets 25 GB/s back (39.0625 us); Gather: {1, 2} sends
    # 2 MiB over 50 GB/s; Scatter: 1 MiB into {1} over 100 GB/s.
    assert bound(topo, CollectiveKind.BROADCAST) == 9.765625
    assert bound(topo, CollectiveKind.REDUCE) == 39.0625
    assert bound(topo, CollectiveKind.GATHER) == 39.0625
    assert bound(topo, CollectiveKind.SCATTER) == 9.765625
    assert bound(topo, CollectiveKind.ALL_TO_ALL) == 0.0


def test_all_reduce_reports_reduce_scatter_plus_all_gather_beside_its_cut_bound():
    for topo in (tacos.from_spec("ring:4"), two_nodes_of_two_gpus(), asymmetric()):
        for chunks in (1, 3):
            found = tacos.lower_bounds(topo, spec(AR, topo, chunks))
            assert found.rs_plus_ag_us == bound(topo, RS, chunks) + bound(topo, AG, chunks)
            assert found.throughput_us <= found.rs_plus_ag_us
    assert "rs_plus_ag_us" not in tacos.lower_bounds(topo, spec(AG, topo)).as_dict()
    # ring:4: RS + AG = 2 * 29.296875; the cut bound: 4 MiB over 2 x 50 GB/s, below the
    # ports' bound: 2 x 3 x 4 MiB over 4 NPUs x 100 GB/s, which the ring algorithm meets.
    ring = tacos.from_spec("ring:4")
    found = tacos.lower_bounds(ring, spec(AR, ring))
    assert found.rs_plus_ag_us == found.throughput_us == 58.59375
    assert gossip_bound_us(ring, spec(AR, ring)) == 58.59375


def test_all_reduce_moves_two_buffers_through_every_npu_port_of_a_switched_cluster():
    # dgx:4x8: a GPU takes in 400 GB/s from its NVSwitch and, through its 64 GB/s
    # PCIe link, what its NIC gets from the leaf: 50 GB/s. 2 x 31 messages per chunk,
    # 32 chunks: 1984 MiB over 32 x 450 GB/s. The best cut (a server's 8 NICs) sees
    # only 32 MiB over 400 GB/s; the 4 servers as gossipers 2 x 3 x 32 MiB over
    # 4 x 400 GB/s.
    cluster = tacos.from_spec("dgx:4x8")
    single_gpus, num_groups = next(partitions(cluster))
    assert num_groups == 32
    assert single_gpus[:32] == list(range(32)) and set(single_gpus[32:]) == {OUTSIDE}
    for direction in ("in", "out"):
        assert port_capacity_GBps(cluster, single_gpus, direction) == 32 * 450
    collective = spec(AR, cluster)
    assert gossip_bound_us(cluster, collective) == 1984 * US_PER_MIB_PER_GBPS / 14400
    assert tacos.lower_bounds(cluster, collective).throughput_us == pytest.approx(
        1984 * US_PER_MIB_PER_GBPS / 14400
    )
    # A subset of ranks: the other GPUs could gather and redistribute, no count holds.
    subset = Collective(AR, tuple(cluster.npus)[:8], 1, 2**20)
    assert gossip_bound_us(cluster, subset) == 0.0


def test_all_reduce_moves_two_buffers_between_the_servers_of_a_large_cluster():
    # dgx:16x8: 16 servers gossip: 2 x 15 x 128 MiB through 16 x 8 NICs of 50 GB/s,
    # above the single GPUs' 2 x 127 x 128 MiB over 128 x 450 GB/s.
    cluster = tacos.from_spec("dgx:16x8")
    servers = [p for p, num_groups in partitions(cluster) if num_groups == 16]
    assert servers
    for direction in ("in", "out"):
        assert port_capacity_GBps(cluster, servers[0], direction) == 16 * 8 * 50
    found = tacos.lower_bounds(cluster, spec(AR, cluster))
    assert found.throughput_us == 2 * 15 * 128 * US_PER_MIB_PER_GBPS / 6400
    assert found.throughput_us > 2 * 127 * 128 * US_PER_MIB_PER_GBPS / (128 * 450)


def test_tacos_all_reduce_overlaps_its_halves_so_rs_plus_ag_is_no_bound_for_it():
    # Rank 0 hangs off rank 1 by 10 GB/s each way; 1 and 2 share 1000 GB/s. RS + AG
    # = 2 * (2 MiB over 10 GB/s); streaming rank 0's 3 MiB to rank 1 while the
    # sums come back takes about 3 MiB over 10 GB/s, and tacos finds about that.
    topo = Topology(
        3, tuple(Link(u, v, bw, 0.0) for u, v, bw in
                 ((0, 1, 10), (1, 0, 10), (1, 2, 1000), (2, 1, 1000))), name="spur",
    )  # fmt: skip
    collective = spec(AR, topo, chunks=4)
    schedule = tacos.synthesize(topo, collective, seed=0)
    assert tacos.verify(schedule).ok
    found = tacos.lower_bounds(topo, collective)
    assert found.rs_plus_ag_us == 2 * 8 * US_PER_MIB_PER_GBPS / 10
    assert schedule.collective_time_us < found.rs_plus_ag_us
    assert found.throughput_us == 12 * US_PER_MIB_PER_GBPS / 10  # 12 MiB over 10 GB/s
    assert found.best_us <= schedule.collective_time_us < 1.01 * found.throughput_us


def rail_cluster(servers: int = 64, gpus: int = 8, spines: int = 4) -> Topology:
    """GPUs on an NVSwitch per server (400 GB/s), each with a NIC (64 GB/s) into its
    rail's leaf (50 GB/s); every leaf joins every spine (200 GB/s). NICs and switches
    are forwarding nodes."""
    npus = servers * gpus
    nic, nvswitch = npus, 2 * npus
    leaf, spine = nvswitch + servers, nvswitch + servers + gpus
    cables = []
    for g in range(npus):
        server, rail = divmod(g, gpus)
        cables += [(g, nvswitch + server, 400), (g, nic + g, 64), (nic + g, leaf + rail, 50)]
    cables += [(leaf + r, spine + s, 200) for r in range(gpus) for s in range(spines)]
    rows = [(u, v, bw) for a, b, bw in cables for u, v in ((a, b), (b, a))]
    return Topology(npus, links(*rows), npus + servers + gpus + spines, name="rails")


def test_a_512_gpu_rail_cluster_is_bounded_exactly_in_well_under_a_second():
    topo = rail_cluster()
    assert (topo.num_nodes, len(topo.links)) == (1100, 3136)
    started = time.perf_counter()
    found = {kind: tacos.lower_bounds(topo, spec(kind, topo)) for kind in (AG, RS, AR)}
    elapsed = time.perf_counter() - started
    # One server's 8 GPUs take 504 MiB in through 8 NIC links of 50 GB/s:
    # x* = 400 / 504 GB/s per rank, 504 * 976.5625 / 400 = 1230.46875 us; a single
    # GPU's 400 + 64 GB/s (ingress, 1075.5 us) is looser.
    assert throughput.share_rate(topo, tuple(topo.npus), "out") == throughput.Rate(
        Fraction(400, 504), True
    )
    assert found[AG].throughput_us == found[RS].throughput_us == 1230.46875
    assert found[AG].ingress_us < found[AG].throughput_us <= found[AG].best_us
    # All-Reduce: the server cut (512 MiB over 400 GB/s) and the single GPUs' ports
    # (2 x 511 messages per chunk, 512 chunks, over 512 GPUs x (400 + 50) GB/s) are
    # looser than the 64 servers' NICs: 2 x 63 x 512 MiB over 64 x 400 GB/s, twice
    # the All-Gather's bound.
    assert found[AR].throughput_us > 2 * 511 * US_PER_MIB_PER_GBPS / 450
    assert found[AR].throughput_us == 2 * 63 * 8 * US_PER_MIB_PER_GBPS / 400
    assert found[AR].throughput_us == 2 * found[AG].throughput_us
    assert elapsed < 5  # measured: about 0.1 s, with the other bounds


def test_a_mesh_of_1024_is_fast_and_its_corner_binds():
    topo = tacos.from_spec("mesh2d:32x32")
    started = time.perf_counter()
    value = bound(topo, AG)
    assert time.perf_counter() - started < 2  # measured: a few ms
    assert value == 1023 * US_PER_MIB_PER_GBPS / 100  # 1023 MiB into a corner's 2 links


# ------------------------------------------------------------------------ errors
def test_a_disconnected_network_is_a_one_line_error_naming_the_pair():
    topo = Topology(4, links((0, 1, 50), (1, 0, 50), (2, 3, 50), (3, 2, 50)), name="split")
    with pytest.raises(TacosError, match=r"'split' is disconnected: NPU 2 cannot be reached "):
        tacos.lower_bounds(topo, spec(AG, topo))
    one_way = Topology(2, links((0, 1, 50)), name="one-way")
    with pytest.raises(TacosError) as err:
        throughput.throughput_bound_us(one_way, spec(CollectiveKind.BROADCAST, one_way))
    assert "'one-way'" in str(err.value) and "\n" not in str(err.value)


def test_a_rank_that_is_no_npu_is_an_error():
    topo = tacos.from_spec("switch:3")
    with pytest.raises(TacosError, match="rank 3 is not an NPU"):
        throughput.throughput_bound_us(topo, Collective(AG, (0, 3)))


def test_bandwidths_too_fine_for_64_bits_round_up_and_stay_a_bound():
    topo = Topology(3, links((0, 1, 0.1), (1, 2, 1 / 3), (2, 0, 300.0), (1, 0, 7.7)), name="odd")
    rate = throughput.share_rate(topo, (0, 1, 2), "out")
    exact = brute_force_rate(topo, (0, 1, 2), "out")
    assert rate.exact is False or rate.GBps == exact
    assert exact <= rate.GBps <= exact * (1 + Fraction(1, 10**9))


# ------------------------------------------------------------- brute force, random
def crossing_GBps(topo: Topology, inside: set[int], direction: str) -> Fraction:
    """Bandwidth of the links leaving (``out``) or entering (``in``) ``inside``, exactly."""
    total = Fraction(0)
    for link in topo.links:
        leaving = link.src in inside and link.dst not in inside
        entering = link.dst in inside and link.src not in inside
        if (leaving and direction == "out") or (entering and direction == "in"):
            total += Fraction(link.bandwidth_GBps)
    return total


def node_sets(topo: Topology, ranks: tuple[int, ...]):
    """Every node set with ranks on both sides, and how many ranks it holds."""
    for mask in range(1, 2**topo.num_nodes - 1):
        inside = {v for v in range(topo.num_nodes) if mask >> v & 1}
        count = len(inside.intersection(ranks))
        if 0 < count < len(ranks):
            yield inside, count


def brute_force_rate(
    topo: Topology, ranks: tuple[int, ...], direction: str, sink: int | None = None
) -> Fraction:
    return min(
        crossing_GBps(topo, inside, direction) / count
        for inside, count in node_sets(topo, ranks)
        if sink not in inside
    )


def brute_force_cut(
    topo: Topology, ranks: tuple[int, ...], root: int | None, direction: str
) -> Fraction:
    return min(
        crossing_GBps(topo, inside, direction)
        for inside, _ in node_sets(topo, ranks)
        if root is None or root in inside
    )


@st.composite
def networks(draw, max_npus: int = 7, bandwidths=(12.5, 25.0, 50.0, 100.0, 300.0, 0.75)):
    """Strongly connected (a directed cycle through every node, switches included)
    plus random links, heterogeneous, often asymmetric; NPUs first, switches after."""
    npus = draw(st.integers(2, max_npus))
    switches = draw(st.integers(0, 3))
    n = npus + switches
    order = draw(st.permutations(range(n)))
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    pairs |= {(u, v) for u, v in extra if u != v}
    rows = [(u, v, draw(st.sampled_from(bandwidths))) for u, v in sorted(pairs)]
    if draw(st.booleans()):
        rows.append(rows[0])  # a parallel cable
    latencies = st.sampled_from([0.0, 0.5, 2.0])
    return Topology(
        npus, tuple(Link(u, v, bw, draw(latencies)) for u, v, bw in rows), switches, "random"
    )


@st.composite
def small_problems(draw):
    topo = draw(networks(max_npus=5))  # at most 8 nodes: 256 node sets
    ranks = draw(st.lists(st.sampled_from(list(topo.npus)), min_size=2, unique=True))
    return topo, tuple(ranks)


@settings(deterministic, max_examples=300)
@given(small_problems())
def test_every_cut_quantity_equals_brute_force_over_all_node_sets(problem):
    topo, ranks = problem
    root = ranks[-1]
    for direction in ("out", "in"):
        assert throughput.share_rate(topo, ranks, direction) == throughput.Rate(
            brute_force_rate(topo, ranks, direction), True
        )
        assert throughput.share_rate(topo, ranks, direction, sink=root).GBps == (
            brute_force_rate(topo, ranks, direction, sink=root)
        )
        assert throughput.min_cut(topo, ranks, root, direction).GBps == (
            brute_force_cut(topo, ranks, root, direction)
        )
    assert throughput.min_cut(topo, ranks, None, "out").GBps == (
        brute_force_cut(topo, ranks, None, "out")
    )
    # And the times: All-Gather is the worst cut's share over its bandwidth.
    collective = Collective(AG, ranks, 2, 4096)
    worst = max(count / crossing_GBps(topo, s, "out") for s, count in node_sets(topo, ranks))
    assert throughput.throughput_bound_us(topo, collective) == float(
        2 * 4096 * 10**6 * worst / 2**30
    )


@settings(deterministic, max_examples=100)
@given(networks(max_npus=5, bandwidths=(0.1, 1 / 3, 7.7, 300.0, 1e-3)))
def test_bandwidths_that_do_not_fit_64_bits_give_a_valid_bound_within_1e9(topo):
    # 0.1 GB/s is 3602879701896397 / 2**55 exactly: scaled to integers, the flows
    # would overflow int64, so bandwidths are rounded up (never down) to multiples
    # of 2**-k GB/s, with k as large as fits (here about 2**-50 GB/s).
    ranks = tuple(topo.npus)
    for direction in ("out", "in"):
        rate = throughput.share_rate(topo, ranks, direction)
        exact = brute_force_rate(topo, ranks, direction)
        assert exact <= rate.GBps <= exact * (1 + Fraction(1, 10**9))
        assert rate.GBps == exact or not rate.exact


@settings(deterministic, max_examples=150)
@given(networks(), st.integers(1, 3), st.sampled_from([1, 4096, MIB]))
def test_no_verified_schedule_beats_the_bound(topo, chunks, size):
    for kind in (AG, RS, AR):
        collective = spec(kind, topo, chunks, size)
        schedule = tacos.synthesize(topo, collective, seed=0)
        assert tacos.verify(schedule).ok
        found = tacos.lower_bounds(topo, collective)
        assert found.best_us >= found.throughput_us > 0
        assert schedule.collective_time_us >= found.throughput_us * (1 - 1e-9)


@settings(deterministic, max_examples=100)
@given(networks(), st.sampled_from(list(CollectiveKind)), st.integers(1, 3))
def test_the_bound_is_at_least_the_ingress_bound(topo, kind, chunks):
    # Every per-node count behind ``ingress`` is one cut's demand: for All-Gather a
    # rank takes in (N - 1) shares (S = all other nodes) and sends its own (S =
    # the rank); likewise for the other kinds. All-to-All's cut demand is not
    # linear, so its throughput bound is 0 and only the others are compared.
    collective = spec(kind, topo, chunks, MIB)
    found = tacos.lower_bounds(topo, collective)
    if kind is CollectiveKind.ALL_TO_ALL:
        assert found.throughput_us == 0.0
    else:
        assert found.throughput_us >= found.ingress_us * (1 - 1e-12)


# ------------------------------------------------------------- an independent oracle
def networkx_share_rate_GBps(topo: Topology, direction: str) -> float:
    """x* by Dinkelbach over networkx min cuts: independent of tacos.throughput's flows.

    With a source feeding every rank at rate x, min over ranks c of the s-c min cut minus
    N x is min over S of B(S) - x |S & V|; a negative value names a cut with a smaller
    ratio. Floats are fine at these sizes (compared with a tolerance).
    """
    ranks = list(topo.npus)
    rows = [(lk.src, lk.dst, lk.bandwidth_GBps) for lk in topo.links]
    if direction == "in":
        rows = [(v, u, bw) for u, v, bw in rows]
    graph = nx.DiGraph()
    for u, v, bw in rows:
        previous = graph.get_edge_data(u, v, {"capacity": 0.0})["capacity"]
        graph.add_edge(u, v, capacity=previous + bw)
    rate = min(sum(bw for _, v, bw in rows if v == c) for c in ranks)  # every rank but one
    while True:
        for rank in ranks:
            graph.add_edge("s", rank, capacity=rate)
        value, (inside, _) = min(
            (nx.minimum_cut(graph, "s", c) for c in ranks), key=lambda cut: cut[0]
        )
        if value - len(ranks) * rate > -1e-9 * rate * len(ranks):
            return rate
        inside = set(inside) - {"s"}
        leaving = sum(bw for u, v, bw in rows if u in inside and v not in inside)
        rate = leaving / len(inside & set(ranks))


@pytest.mark.parametrize("spec_text", [
    "dgx:2x4", "dgx:3x2,nodes-per-leaf=2,oversubscription=2", "xgmi:2x4,nic=10",
    "fat-tree:4", "torus2d:3x4",
])  # fmt: skip
def test_it_agrees_with_networkx_min_cuts_on_cluster_sized_networks(spec_text):
    topo = tacos.from_spec(spec_text)
    for direction in ("out", "in"):
        ours = float(throughput.share_rate(topo, tuple(topo.npus), direction).GBps)
        assert ours == pytest.approx(networkx_share_rate_GBps(topo, direction), rel=1e-9)
