"""Properties over random strongly connected, heterogeneous, asymmetric topologies.

For every collective: the schedule verifies, the independent replay gives the
same time, and no schedule beats the lower bound.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_networks import random_topologies

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.topology import Link, Topology


@st.composite
def problems(draw):
    topo = draw(random_topologies())
    kind = draw(st.sampled_from(list(CollectiveKind)))
    chunks = draw(st.integers(1, 3))
    size = draw(st.sampled_from([1, 4096, 2**20]))
    spec = Collective(kind, tuple(topo.npus), chunks, size)
    return topo, spec, draw(st.integers(0, 2**16)), draw(st.sampled_from(["rarest", "random"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_every_synthesized_collective_verifies_replays_exactly_and_respects_the_bound(problem):
    topo, spec, seed, policy = problem
    schedule = tacos.synthesize(topo, spec, seed=seed, policy=policy)

    report = tacos.verify(schedule)
    assert report.ok, report.summary()

    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us

    bound = tacos.lower_bounds(topo, spec).best_us
    assert schedule.collective_time_us >= bound * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_schedules_survive_a_json_round_trip(problem):
    topo, spec, seed, policy = problem
    schedule = tacos.synthesize(topo, spec, seed=seed, policy=policy)
    again = tacos.Schedule.from_json(schedule.to_json())
    assert list(again.transfers) == list(schedule.transfers)
    assert tacos.verify(again).ok


@st.composite
def symmetric_problems(draw):
    """Networks of cables (a link each way, as fast): the transposed network is the
    network itself."""
    topo = draw(random_topologies())
    cables = {tuple(sorted((link.src, link.dst))): link for link in topo.links}
    links = tuple(
        Link(a, b, link.bandwidth_GBps, link.latency_us)
        for (u, v), link in sorted(cables.items())
        for a, b in ((u, v), (v, u))
    )
    return (
        Topology(topo.num_npus, links, name="cables"),
        draw(st.integers(1, 3)),
        draw(st.integers(0, 2**16)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_problems())
def test_a_reduce_scatter_is_never_slower_than_its_all_gather_on_a_symmetric_network(problem):
    """A Reduce-Scatter is an All-Gather played backwards on the transposed network, which
    here is the network itself: the mirror of the very All-Gather takes no longer."""
    topo, chunks, seed = problem
    gather, scatter = (
        tacos.synthesize(topo, Collective(kind, tuple(topo.npus), chunks, 2**20), seed=seed)
        for kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
    )
    assert tacos.verify(scatter).ok
    assert scatter.collective_time_us <= gather.collective_time_us * (1 + 1e-9)
