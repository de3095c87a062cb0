"""Properties over random strongly connected, heterogeneous, asymmetric topologies.

For every collective: the schedule verifies, the independent replay gives the
same time, and no schedule beats the lower bound.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.topology import Link, Topology

bandwidths = st.sampled_from([12.5, 25.0, 50.0, 100.0, 300.0])
latencies = st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0])


@st.composite
def random_topologies(draw):
    """A directed cycle through a random permutation (strong connectivity) plus random links."""
    n = draw(st.integers(2, 7))
    order = draw(st.permutations(range(n)))
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    pairs |= {(u, v) for u, v in extra if u != v}
    links = tuple(Link(u, v, draw(bandwidths), draw(latencies)) for u, v in sorted(pairs))
    return Topology(n, links, name="random")


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
