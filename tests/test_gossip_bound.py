"""The All-Reduce message-count (gossip) bound: no schedule beats it, whichever partition binds."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_networks import clusters, random_topologies

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.gossip_bound import OUTSIDE, gossip_bound_us, partitions

AR = CollectiveKind.ALL_REDUCE


def test_partitions_are_single_npus_then_each_bandwidth_levels_servers():
    topo = tacos.from_spec("dgx:3x2")
    groups = [{g for g in p[: topo.num_npus]} for p in partitions(topo)]
    assert groups[0] == set(range(6))
    assert {frozenset(g) for g in groups[1:]} >= {frozenset({0}), frozenset({0, 2, 4})}
    for p in partitions(topo):
        assert all(g == OUTSIDE or g in p[: topo.num_npus] for g in p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(clusters(max_servers=5), random_topologies(switch=True)),
    st.integers(1, 3),
    st.sampled_from([4096, 2**20]),
)
def test_no_all_reduce_beats_it(topo, chunks, size):
    # TACOS and every classic algorithm (``best`` builds them all when none meets the bound).
    spec = Collective(AR, tuple(topo.npus), chunks, size)
    bound = gossip_bound_us(topo, spec)
    schedule = tacos.synthesize(topo, spec, algorithm="best")
    times = [schedule.collective_time_us, *schedule.meta.get("candidates_us", {}).values()]
    assert min(times) >= bound * (1 - 1e-9)
