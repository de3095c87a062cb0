"""The simulator replays structure only and agrees with the synthesizer exactly."""

from dataclasses import replace

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule


@pytest.mark.parametrize("kind", list(CollectiveKind))
@pytest.mark.parametrize("spec", ["ring:5", "torus2d:3x4", "hypercube:3", "fully-connected:5"])
def test_replay_reproduces_every_synthesized_time(kind, spec):
    topo = tacos.from_spec(spec)
    schedule = tacos.synthesize(topo, Collective(kind, tuple(topo.npus), 2, 65536), seed=2)
    result = tacos.simulate(schedule)
    assert result.collective_time_us == schedule.collective_time_us
    assert result.start_us == tuple(t.start for t in schedule.transfers)
    assert result.end_us == tuple(t.end for t in schedule.transfers)


def test_recorded_times_are_ignored_only_structure_counts():
    topo = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    late = [replace(t, start=t.start + 100, end=t.end + 100) for t in schedule.transfers]
    moved = Schedule(schedule.topology, schedule.collective, late)
    assert tacos.simulate(moved).collective_time_us == schedule.collective_time_us


def test_link_utilisation_is_a_fraction():
    topo = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_REDUCE, (0, 1, 2, 3)))
    utilisation = tacos.simulate(schedule).link_utilisation()
    assert utilisation and all(0 < u <= 1 for u in utilisation.values())


def test_a_dependency_cycle_is_reported_as_a_deadlock():
    topo = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    transfers = list(schedule.transfers)
    dependant = next(i for i, t in enumerate(transfers) if t.deps)
    needed = transfers[dependant].deps[0]
    transfers[needed] = replace(transfers[needed], deps=(dependant,))
    with pytest.raises(TacosError, match="deadlocks"):
        tacos.simulate(Schedule(schedule.topology, schedule.collective, transfers))
