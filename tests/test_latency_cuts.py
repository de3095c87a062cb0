"""The latency-aware cut bound: hand-checked values, its counting, and that no schedule beats it."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import REFERENCE_DIR
from random_networks import clusters, random_topologies

import tacos
from tacos import latency_cuts
from tacos.collective import Collective, CollectiveKind
from tacos.latency_cuts import earliest_to_move, latency_cut_bound_us, soonest_arrivals
from tacos.shortest_paths import LinkTimes

AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE


def test_one_chunk_per_gpu_on_a_dgx_cluster_waits_for_the_far_servers():
    # dgx:4x8, 1 MiB per GPU: the 24 chunks of the other servers' GPUs must all enter GPU 0.
    # One leaving a far GPU at 0 crosses its PCIe link (15.26 us + 0.25), its NIC link
    # to the leaf and the leaf's link to a NIC of GPU 0's server (19.53 + 1 each); from
    # GPU 0's own NIC it arrives over PCIe at 72.08 us, one more every 15.51 us; through
    # another GPU of the server it reaches the NVSwitch at 74.77 us and arrives at
    # 77.46, one more every 2.69 us. The 24th is in at 77.46 + 19 x 2.69 = 128.60 us
    # (4 over PCIe, 20 over NVLink). Counting the 7 near GPUs' chunks too, from the
    # nearest GPU's start (the bound before), gave 113.14 us; the farthest pair alone
    # gives 77.46 us.
    topo = tacos.load_topology("dgx:4x8")
    bounds = tacos.lower_bounds(topo, Collective(AG, tuple(topo.npus), 1, 2**20))
    pcie = 2**20 / (64 * 2**30) * 1e6 + 0.25
    nic = 2**20 / (50 * 2**30) * 1e6 + 1
    nvlink = 2**20 / (400 * 2**30) * 1e6 + 0.25
    assert bounds.latency_cut_us == pytest.approx(2 * pcie + 2 * nic + 21 * nvlink)
    assert bounds.best_us == bounds.latency_cut_us
    assert bounds.diameter_us == pytest.approx(77.46, abs=0.01)


HTSIM_TREE = REFERENCE_DIR / "astra-sim" / "network" / "htsim" / "8nodes.topo"


@pytest.mark.skipif(not HTSIM_TREE.is_file(), reason="reference files absent")
def test_an_all_gather_waits_for_the_far_pod_on_a_host_tree():
    # htsim's 8-host tree (hosts on 200 Gb/s links, 100 Gb/s core links): a chunk from the
    # other pod reaches host 0's switch after 7 store-and-forward link times (43 us on
    # host and pod links, twice that on core links), and the 4 of them then take that
    # switch's one link to host 0 one after another: 470.37 us, where counting all 7
    # chunks from the nearest host gives 343.54 us.
    topo = tacos.load_topology(str(HTSIM_TREE))
    bounds = tacos.lower_bounds(topo, Collective(AG, tuple(topo.npus), 1, 2**20))
    host_link_us = 2**20 / (200e9 / 8) * 1e6 + 1
    core_link_us = 2**20 / (100e9 / 8) * 1e6 + 1
    assert bounds.latency_cut_us == pytest.approx(7 * host_link_us + 2 * core_link_us)


def test_the_last_chunks_into_a_server_must_still_spread_in_it(monkeypatch):
    # xgmi:2x8 (MI250-like, 25 GB/s NICs, 50 GB/s xGMI), 16 chunks per GCD: the 128 chunks
    # of the other server come in over 8 NICs, and those in last reach one GCD each
    # (switches do not replicate): one xGMI hop (20.03 us) more to the others. TACOS
    # takes exactly that long, so it is optimal there, at 1.171 of the throughput bound.
    topo = tacos.load_topology("xgmi:2x8,xgmi=50,nic=25")
    spec = Collective(AG, tuple(topo.npus), 16, 2**20)
    xgmi_us = 2**20 / (50 * 2**30) * 1e6 + 0.5
    spread = latency_cut_bound_us(topo, spec)
    assert tacos.synthesize(topo, spec).collective_time_us == pytest.approx(spread)
    monkeypatch.setattr(latency_cuts, "MAX_SPREAD_RANKS", 0)
    assert spread == pytest.approx(latency_cut_bound_us(topo, spec) + xgmi_us)


def test_an_all_reduce_must_spread_the_last_results_into_a_server_too(monkeypatch):
    # The same MI250-like pair, All-Reduce: every chunk needs the far server's data at
    # each GCD, and what comes in over a NIC reaches one GCD; the last of it needs one
    # xGMI hop more. TACOS takes exactly that long at 1, 4 and 16 chunks per GCD.
    topo = tacos.load_topology("xgmi:2x8,xgmi=50,nic=25")
    xgmi_us = 2**20 / (50 * 2**30) * 1e6 + 0.5
    for chunks in (1, 4, 16):
        spec = Collective(AR, tuple(topo.npus), chunks, 2**20)
        spread = latency_cut_bound_us(topo, spec)
        assert tacos.synthesize(topo, spec).collective_time_us == pytest.approx(spread)
        with monkeypatch.context() as patched:
            patched.setattr(latency_cuts, "MAX_SPREAD_RANKS", 0)
            assert spread == pytest.approx(latency_cut_bound_us(topo, spec) + xgmi_us)


def test_an_all_reduce_waits_for_the_farthest_data_at_every_rank():
    # mesh2d:8x8, one chunk per NPU: a corner needs, for each of the 64 chunks, a
    # transfer carrying the opposite corner's part, which is 13 links away from the
    # corner's neighbours: the first can arrive after 14 chunk times, then each of the
    # corner's two in-links brings one per chunk time: 14 + 31 = 45 chunk times. The
    # links' capacity alone gives 36 (the old best bound).
    topo = tacos.load_topology("mesh2d:8x8")
    bounds = tacos.lower_bounds(topo, Collective(AR, tuple(topo.npus), 1, 2**20))
    chunk_us = topo.links[0].transfer_time_us(2**20)
    assert bounds.latency_cut_us == pytest.approx(45 * chunk_us)
    assert bounds.link_capacity_us == pytest.approx(36 * chunk_us)


def test_reduce_scatter_is_all_gather_on_the_transposed_network():
    topo = tacos.Topology(
        3, (tacos.Link(0, 1, 100, 1), tacos.Link(1, 2, 25, 1), tacos.Link(2, 0, 50, 3)), name="tri"
    )
    rs = latency_cut_bound_us(topo, Collective(RS, (0, 1, 2), 3, 2**20))
    ag = latency_cut_bound_us(topo.transposed(), Collective(AG, (0, 1, 2), 3, 2**20))
    assert rs == ag > 0


def test_rooted_collectives_and_all_to_all_get_no_such_bound():
    topo = tacos.from_spec("ring:4")
    for kind in (CollectiveKind.BROADCAST, CollectiveKind.ALL_TO_ALL):
        assert latency_cut_bound_us(topo, Collective(kind, (0, 1, 2, 3))) == 0.0


def test_earliest_to_move_matches_counting_every_arrival():
    first, step = [5.0, 1.0, 2.5, math.inf], [2.0, 3.0, 0.7, 1.0]
    finite = zip(first[:3], step[:3], strict=True)
    arrivals = sorted(a + k * b for a, b in finite for k in range(60))
    soonest = soonest_arrivals(np.array(first), np.array(step), 59)
    for count in range(1, 60):
        assert earliest_to_move(first, step, count) == pytest.approx(arrivals[count - 1])
        assert soonest[count - 1] == pytest.approx(arrivals[count - 1])
    assert earliest_to_move(first, step, 0) == 0.0
    assert earliest_to_move([math.inf], [1.0], 1) == math.inf


def test_shortest_times_from_several_nodes_are_the_least_over_each():
    topo = tacos.load_topology("dgx:2x4")
    graph = LinkTimes(topo, topo.link_times_us(2**20))
    together = graph.from_nodes([0, 5, 6])
    apart = np.minimum.reduce([graph.from_nodes([s]) for s in (0, 5, 6)])
    assert np.array_equal(together, apart)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(clusters(), random_topologies(switch=True)),
    st.sampled_from([AG, RS, AR]),
    st.integers(1, 3),
    st.sampled_from([4096, 2**20]),
)
def test_no_schedule_beats_it(topo, kind, chunks, size):
    # TACOS and every classic algorithm (``best`` builds them all when none meets the bound).
    spec = Collective(kind, tuple(topo.npus), chunks, size)
    bound = latency_cut_bound_us(topo, spec)
    schedule = tacos.synthesize(topo, spec, algorithm="best")
    times = [schedule.collective_time_us, *schedule.meta.get("candidates_us", {}).values()]
    assert min(times) >= bound * (1 - 1e-9)
