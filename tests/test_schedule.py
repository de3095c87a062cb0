"""The schedule IR: JSON round trip, versioning, the shared per-rank view."""

import json

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule, StepKind


@pytest.fixture
def all_reduce_schedule():
    topo = tacos.from_spec("torus2d:3x3", bandwidth_GBps=37.5, latency_us=0.3)
    spec = Collective(CollectiveKind.ALL_REDUCE, tuple(topo.npus), 2, 3000)
    return tacos.synthesize(topo, spec, seed=7)


def test_json_round_trip_is_lossless(all_reduce_schedule, tmp_path):
    path = tmp_path / "s.json"
    all_reduce_schedule.save(path)
    again = Schedule.load(path)
    assert list(again.transfers) == list(all_reduce_schedule.transfers)
    assert again.collective == all_reduce_schedule.collective
    assert again.topology.links == all_reduce_schedule.topology.links
    assert again.meta == all_reduce_schedule.meta
    assert again.to_json() == all_reduce_schedule.to_json()


def test_json_carries_format_and_version(all_reduce_schedule):
    data = json.loads(all_reduce_schedule.to_json())
    assert (data["format"], data["version"]) == ("tacos-schedule", 1)


def test_unknown_version_is_rejected_with_a_clear_message(all_reduce_schedule):
    data = json.loads(all_reduce_schedule.to_json()) | {"version": 2}
    with pytest.raises(TacosError, match="x.json: schedule version 2 is not supported"):
        Schedule.from_dict(data, "x.json")


def test_a_file_that_is_not_a_schedule_is_rejected():
    with pytest.raises(TacosError, match="not a TACOS schedule"):
        Schedule.from_json('{"hello": 1}', "x.json")


def test_transfer_columns_must_agree_in_length(all_reduce_schedule):
    data = json.loads(all_reduce_schedule.to_json())
    data["transfers"]["start"].pop()
    with pytest.raises(TacosError, match="column 'start' must be a list"):
        Schedule.from_dict(data, "x.json")


def test_transfers_are_in_start_order_and_depend_only_on_earlier_transfers(all_reduce_schedule):
    transfers = all_reduce_schedule.transfers
    assert [t.start for t in transfers] == sorted(t.start for t in transfers)
    assert all(d < i for i, t in enumerate(transfers) for d in t.deps)


def test_per_rank_view_has_one_send_and_one_receive_per_transfer(all_reduce_schedule):
    programs = all_reduce_schedule.per_rank()
    sends = sorted(s.transfer for p in programs.values() for s in p.sends)
    recvs = sorted(s.transfer for p in programs.values() for s in p.recvs)
    assert sends == recvs == list(range(len(all_reduce_schedule.transfers)))


def test_per_rank_steps_are_time_ordered_and_sends_wait_for_local_receives(all_reduce_schedule):
    transfers = all_reduce_schedule.transfers
    for node, program in all_reduce_schedule.per_rank().items():
        times = [step.time for step in program.steps]
        assert times == sorted(times)
        received = set()
        for step in program.steps:
            if step.kind is StepKind.RECV:
                assert transfers[step.transfer].dst == node
                received.add(step.transfer)
            else:
                assert transfers[step.transfer].src == node
                assert set(step.waits_for) <= received
