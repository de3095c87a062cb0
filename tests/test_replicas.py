"""One schedule run by several groups at once (:mod:`tacos.replicas`).

A single group on the schedule's own network, over the schedule's own routes, must
take exactly the schedule's time (whatever the link model); groups that share no
link take the slower one's time; groups that share links take longer. That the
times are ASTRA-sim's is checked on the binary in ``test_workload.py``.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_networks import random_topologies

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters.workload_groups import Router
from tacos.formats.astrasim import AnalyticalNetwork, ring_path
from tacos.linkmodel import CostModel
from tacos.replicas import replicated_time_us
from tacos.schedule import Schedule
from tacos.topology import Link, Topology

RING8 = [AnalyticalNetwork("Ring", 8, 50.0, 500.0)]


def own_routes(schedule: Schedule):
    """Each message's links as the schedule sent it (one route per NPU pair)."""
    routes = {}
    for chain in schedule.messages():
        first, last = schedule.transfers[chain[0]], schedule.transfers[chain[-1]]
        routes.setdefault((first.src, last.dst), [schedule.transfers[i].link for i in chain])
    return lambda src, dst: routes[(src, dst)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_topologies(),
    st.sampled_from([CollectiveKind.ALL_GATHER, CollectiveKind.ALL_REDUCE]),
    st.sampled_from(["paper", "pipelined"]),
    st.integers(1, 3),
)
def test_one_group_on_its_own_routes_takes_the_schedule_time(topology, kind, model, chunks):
    topology = topology.with_cost(CostModel(link_model=model))
    spec = Collective(kind, tuple(topology.npus), chunks, 2**20)
    schedule = tacos.synthesize(topology, spec, seed=0)
    everyone = [tuple(topology.npus)]
    assert replicated_time_us(schedule, topology, everyone, own_routes(schedule)) == (
        pytest.approx(schedule.collective_time_us, abs=1e-6)
    )


@pytest.mark.parametrize("model", ["paper", "pipelined"])
@pytest.mark.parametrize("spec", ["switch:8", "dgx:2x4", "xgmi:2x4"])
def test_one_group_through_switches_takes_the_schedule_time(spec, model):
    topology = tacos.from_spec(spec).with_cost(CostModel(link_model=model))
    collective = Collective(CollectiveKind.ALL_REDUCE, tuple(topology.npus), 2, 2**20)
    schedule = tacos.synthesize(topology, collective, seed=0, algorithm="tacos")
    everyone = [tuple(topology.npus)]
    assert replicated_time_us(schedule, topology, everyone, own_routes(schedule)) == (
        pytest.approx(schedule.collective_time_us, abs=1e-6)
    )


def group_schedule(topology, members, kind=CollectiveKind.ALL_REDUCE):
    collective = Collective(kind, tuple(range(len(members))), 2, 2**18)
    return tacos.synthesize(topology.members_only(members), collective, seed=0)


@pytest.mark.parametrize("model", ["paper", "pipelined"])
def test_groups_that_share_no_link_take_the_slower_ones_time(model):
    ring = tacos.from_spec("ring:8").with_cost(CostModel(link_model=model))
    first, second = (3, 1, 0, 2), (7, 5, 4, 6)  # halves of the ring, in one order
    schedule = group_schedule(ring, first)
    route = Router(ring, RING8)
    alone = replicated_time_us(schedule, ring, [first], route)
    assert alone == pytest.approx(schedule.collective_time_us, abs=1e-6)
    assert replicated_time_us(schedule, ring, [first, second], route) == alone


@pytest.mark.parametrize("second", [(1, 3, 5, 7), (1, 2, 5, 6)], ids=["interleaved", "diagonal"])
def test_groups_that_share_links_take_longer_than_either_alone(second):
    ring = tacos.from_spec("ring:8")
    first = (0, 2, 4, 6) if second == (1, 3, 5, 7) else (0, 3, 4, 7)
    schedule = group_schedule(ring, first, CollectiveKind.ALL_GATHER)
    route = Router(ring, RING8)
    together = replicated_time_us(schedule, ring, [first, second], route)
    for alone in ([first], [second]):
        assert together > replicated_time_us(schedule, ring, alone, route)


def test_a_group_of_another_size_is_refused():
    ring = tacos.from_spec("ring:8")
    schedule = group_schedule(ring, (0, 1, 2, 3))
    with pytest.raises(TacosError, match="group of 3 NPUs cannot run a schedule for 4"):
        replicated_time_us(schedule, ring, [(0, 1, 2, 3), (4, 5, 6)], Router(ring, RING8))


@pytest.mark.parametrize(
    ("src", "dst", "path"),
    [(0, 3, [0, 1, 2, 3]), (0, 4, [0, 1, 2, 3, 4]), (0, 5, [0, 7, 6, 5]), (6, 1, [6, 7, 0, 1])],
)
def test_a_ring_message_goes_clockwise_unless_anticlockwise_is_shorter(src, dst, path):
    assert ring_path(8, src, dst) == path


def test_without_a_routing_rule_a_message_goes_the_fastest_way():
    slow, fast = Link(0, 1, 10.0, 1.0), Link(0, 1, 100.0, 1.0)
    hops = (Link(0, 2, 100.0, 0.5), Link(2, 1, 100.0, 0.5))  # through a switch, no slower
    pair = Topology(2, (slow, fast, *hops, Link(1, 0, 50.0, 1.0)), num_switches=1)
    assert Router(pair, None)(0, 1) == [1]
    assert Router(pair, None)(1, 0) == [4]
