"""Properties over random strongly connected, heterogeneous, asymmetric topologies.

For every collective: the schedule verifies, the independent replay gives the
same time, and no schedule beats the lower bound.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_networks import random_topologies

import tacos
from tacos.collective import Collective, CollectiveKind


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
