"""The verifier catches every kind of broken schedule and names the culprit."""

from dataclasses import replace

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Op, Schedule

AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE


def synthesized(kind, spec="ring:4", chunks=1):
    topo = tacos.from_spec(spec)
    return tacos.synthesize(topo, Collective(kind, tuple(topo.npus), chunks, 2**20), seed=1)


def with_transfers(schedule, transfers):
    return Schedule(schedule.topology, schedule.collective, transfers, schedule.meta)


@pytest.mark.parametrize("kind", [AG, RS, AR])
def test_synthesized_schedules_pass(kind):
    report = tacos.verify(synthesized(kind, "torus2d:3x3", chunks=2))
    assert report.ok, report.summary()


def test_a_missing_transfer_breaks_the_all_gather_postcondition():
    schedule = synthesized(AG)
    report = tacos.verify(with_transfers(schedule, list(schedule.transfers)[:-1]))
    assert not report.ok
    assert any("postcondition" in e for e in report.errors)


def test_a_missing_reduction_leaves_a_contribution_out():
    schedule = synthesized(RS)
    first_reduce = next(i for i, t in enumerate(schedule.transfers) if not t.deps)
    kept = [replace(t, deps=()) for i, t in enumerate(schedule.transfers) if i != first_reduce]
    report = tacos.verify(with_transfers(schedule, kept))
    assert not report.ok
    assert any("missing contributions" in e for e in report.errors)


def test_reducing_the_same_contribution_twice_is_caught():
    schedule = synthesized(RS)
    transfers = list(schedule.transfers)
    last = transfers[-1]
    repeat = replace(last, start=last.end + 1, end=last.end + 1 + (last.end - last.start), deps=())
    report = tacos.verify(with_transfers(schedule, [*transfers, repeat]))
    assert any("twice" in e for e in report.errors)


def test_sending_before_the_chunk_arrived_is_caught():
    schedule = synthesized(AG, "ring:8")
    transfers = list(schedule.transfers)
    index = next(i for i, t in enumerate(transfers) if t.deps)
    t = transfers[index]
    transfers[index] = replace(t, start=0.0, end=t.end - t.start)
    report = tacos.verify(with_transfers(schedule, transfers))
    assert not report.ok
    assert any(f"transfer {index}" in e for e in report.errors)


def test_two_transfers_on_one_link_at_once_are_caught():
    schedule = synthesized(AG, "ring:8")
    transfers = list(schedule.transfers)
    first = transfers[0]
    clash = replace(first, chunk=(first.chunk + 1) % 8, deps=())
    report = tacos.verify(with_transfers(schedule, [*transfers, clash]))
    assert any(f"link {first.link}" in e and "overlap" in e for e in report.errors)


def test_a_transfer_faster_than_its_link_is_caught():
    schedule = synthesized(AG)
    transfers = list(schedule.transfers)
    transfers[0] = replace(transfers[0], end=transfers[0].start + 1.0)
    report = tacos.verify(with_transfers(schedule, transfers))
    assert any("shorter than the link allows" in e for e in report.errors)


def test_a_transfer_on_a_link_between_other_nodes_is_caught():
    schedule = synthesized(AG)
    transfers = list(schedule.transfers)
    transfers[0] = replace(
        transfers[0], link=(transfers[0].link + 1) % len(schedule.topology.links)
    )
    report = tacos.verify(with_transfers(schedule, transfers))
    assert any("joins" in e for e in report.errors)


def test_copy_instead_of_reduce_loses_contributions():
    schedule = synthesized(AR)
    transfers = [replace(t, op=Op.COPY) for t in schedule.transfers]
    assert not tacos.verify(with_transfers(schedule, transfers)).ok


def test_report_summary_lists_problems():
    schedule = synthesized(AG)
    report = tacos.verify(with_transfers(schedule, []))
    assert not report.ok and report.error_count == 12
    assert report.summary().startswith("FAILED (12 problems)")
