"""Lower bounds: hand-checked values and their relations."""

import pytest

import tacos
from tacos.bounds import min_time_to_move
from tacos.collective import Collective, CollectiveKind


def test_min_time_to_move_counts_whole_chunks_per_link():
    assert min_time_to_move([2.0, 3.0], 4) == 6.0
    assert min_time_to_move([1.0], 5) == 5.0
    assert min_time_to_move([2.0, 2.0, 2.0], 7) == 6.0
    assert min_time_to_move([5.0], 0) == 0.0


def test_min_time_to_move_matches_brute_force_on_awkward_times():
    times = [0.7, 1.1, 2.9, 2.9]
    for count in range(1, 40):
        brute = min(
            k * t
            for t in times
            for k in range(1, count + 1)
            if sum(int(k * t / s + 1e-12) for s in times) >= count
        )
        assert min_time_to_move(times, count) == pytest.approx(brute)


def test_ring_all_gather_bound_is_half_the_ring_in_chunk_times():
    topo = tacos.from_spec("ring:8")
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 2**20)
    bounds = tacos.lower_bounds(topo, spec)
    step = topo.links[0].transfer_time_us(2**20)
    assert bounds.chunk_ingress_us == pytest.approx(4 * step)
    assert bounds.diameter_us == pytest.approx(4 * step)
    assert bounds.ingress_us == pytest.approx(7 * 2**20 / (100 * 2**30) * 1e6)
    assert bounds.best_us == max(bounds.as_dict().values())


def test_all_reduce_needs_twice_the_messages_of_all_gather_in_total():
    topo = tacos.from_spec("torus2d:4x4")
    ag = tacos.lower_bounds(topo, Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus)))
    ar = tacos.lower_bounds(topo, Collective(CollectiveKind.ALL_REDUCE, tuple(topo.npus)))
    assert ar.link_capacity_us == pytest.approx(2 * ag.link_capacity_us, rel=0.07)
    assert ar.best_us > ag.best_us


def test_reduce_scatter_bound_uses_out_links():
    # NPU 0 has one fast way out and a slow way in: RS is limited by its egress.
    links = (tacos.Link(0, 1, 100, 0), tacos.Link(1, 0, 1, 0))
    topo = tacos.Topology(2, links)
    rs = tacos.lower_bounds(topo, Collective(CollectiveKind.REDUCE_SCATTER, (0, 1), 4, 2**20))
    ag = tacos.lower_bounds(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1), 4, 2**20))
    assert rs.chunk_ingress_us == ag.chunk_ingress_us  # both bottlenecked by the slow link
    assert rs.best_us == pytest.approx(4 * links[1].transfer_time_us(2**20))
