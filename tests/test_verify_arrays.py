"""The verifier's array path reports exactly what the replay reports, right or wrong."""

import importlib
import math
import random
from dataclasses import replace

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.linkmodel import CostModel
from tacos.schedule import Op, Schedule
from tacos.transfers import TransferTable

SPREADING = [CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST, CollectiveKind.GATHER,
             CollectiveKind.SCATTER, CollectiveKind.ALL_TO_ALL]  # fmt: skip
REDUCING = [CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE]
SWITCHED = ["switch:8", "dgx:2x4", "fat-tree:4", "xgmi:2x4"]


def mutations(transfers, num_chunks, num_links, rnd):
    """Broken variants: dropped, early, clashing, too short, misrouted, orphaned, dangling,
    never ending."""
    t = list(transfers)
    i = rnd.randrange(len(t))
    early = replace(t[i], start=0.0, end=t[i].end - t[i].start)
    yield t[:-1]
    yield t[1:]
    yield [*t[:i], early, *t[i + 1 :]]
    yield [*t, replace(t[0], chunk=(t[0].chunk + 1) % num_chunks, deps=())]
    yield [replace(t[0], end=t[0].start + 0.001), *t[1:]]
    yield [replace(t[0], link=(t[0].link + 1) % num_links), *t[1:]]
    yield [replace(x, deps=()) for x in t]
    yield [replace(x, chunk=x.chunk + 1000) if j % 3 == 0 else x for j, x in enumerate(t)]
    yield [replace(x, start=x.start / 2, end=x.start / 2 + x.end - x.start) for x in t]
    yield []
    yield [replace(x, deps=(len(t) + 5,)) if j == 2 else x for j, x in enumerate(t)]
    yield [*t[:-1], replace(t[-1], end=math.inf)]


def switch_mutations(transfers, topo, num_chunks, rnd):
    """Broken forwarding: a hop dropped, a forward repeated, with no or two sources, of
    another chunk, leaving with or before its source; an NPU relaying before it holds."""
    t = list(transfers)
    j = rnd.choice([i for i, x in enumerate(t) if topo.is_switch(x.src)])
    forward, (source,) = t[j], t[j].deps
    lasts = forward.end - forward.start

    def at(i, changed):
        return [*t[:i], changed, *t[i + 1 :]]

    yield [*t[:j], *t[j + 1 :]]
    yield [*t[:source], *t[source + 1 :]]
    yield at(j, replace(forward, deps=()))
    yield at(j, replace(forward, deps=(source, source)))
    yield at(j, replace(forward, deps=(source, rnd.randrange(len(t)))))
    yield [*t, replace(forward, start=forward.end + 1, end=forward.end + 1 + lasts)]
    yield at(j, replace(forward, chunk=(forward.chunk + 1) % num_chunks))
    for start in (t[source].start, max(0.0, t[source].start - 1)):
        yield at(j, replace(forward, start=start, end=start + lasts))
    relays = [i for i, x in enumerate(t) if not topo.is_switch(x.src) and x.deps]
    for relay in rnd.sample(relays, min(1, len(relays))):  # none in a one-switch All-to-All
        yield at(relay, replace(t[relay], start=0.0, end=t[relay].end - t[relay].start))


def reduce_mutations(transfers, topo, rnd):
    """Broken reductions: one made a copy, a copy made one, one repeated, one into a switch;
    a partial sum copied to land with a full one, listed after it (so it wins)."""
    t = list(transfers)
    reduces = [i for i, x in enumerate(t) if x.op is Op.REDUCE]
    copies = [
        i
        for i, x in enumerate(t)
        if x.op is Op.COPY and not topo.is_switch(x.src) and not topo.is_switch(x.dst)
    ]
    into_switch = [i for i, x in enumerate(t) if topo.is_switch(x.dst)]
    i = rnd.choice(reduces)
    yield [replace(x, op=Op.COPY) if j == i else x for j, x in enumerate(t)]
    for k in rnd.sample(copies, min(1, len(copies))):  # a Reduce-Scatter may only reduce
        yield [replace(x, op=Op.REDUCE) if j == k else x for j, x in enumerate(t)]
        yield [*t, replace(t[k], start=0.0, deps=())]  # the sender's own part only
    later = t[i].end + 1
    yield [*t, replace(t[i], start=later, end=later + t[i].end - t[i].start)]
    for k in rnd.sample(into_switch, min(1, len(into_switch))):
        yield [replace(x, op=Op.REDUCE) if j == k else x for j, x in enumerate(t)]


def assert_same_report(schedule):
    replayed = tacos.verify(schedule, vectorised=False)
    vectorised = tacos.verify(schedule, vectorised=True)
    assert (vectorised.ok, vectorised.error_count, vectorised.errors) == (
        replayed.ok,
        replayed.error_count,
        replayed.errors,
    )
    return replayed


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the replay's floats never warn
@pytest.mark.parametrize("name", ["ring:5", "mesh2d:3x4", "hypercube:3", *SWITCHED])
@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_both_paths_agree_on_valid_and_broken_schedules(name, kind):
    topo = tacos.from_spec(name)
    spec = Collective(kind, tuple(topo.npus), 2, 4096)
    schedule = tacos.synthesize(topo, spec, seed=2)
    assert assert_same_report(schedule).ok
    rnd = random.Random(name)
    for broken in mutations(schedule.transfers, spec.num_chunks, len(topo.links), rnd):
        assert_same_report(Schedule(topo, spec, broken, schedule.meta))


def assert_both_paths_catch(name, kind, seed, mutate):
    """Three rounds of ``mutate(transfers, topology, num_chunks, rnd)``: each broken
    schedule fails, with the same report on both paths."""
    topo = tacos.from_spec(name)
    spec = Collective(kind, tuple(topo.npus), 2, 4096)
    schedule = tacos.synthesize(topo, spec, seed=seed)
    rnd = random.Random(name)
    for _ in range(3):
        for broken in mutate(schedule.transfers, topo, spec.num_chunks, rnd):
            assert not assert_same_report(Schedule(topo, spec, broken, schedule.meta)).ok


@pytest.mark.parametrize("name", ["ring:5", "hypercube:3", *SWITCHED])
@pytest.mark.parametrize("kind", REDUCING)
def test_both_paths_agree_on_every_broken_reduction_and_catch_it(name, kind):
    assert_both_paths_catch(
        name, kind, 5, lambda transfers, topo, _, rnd: reduce_mutations(transfers, topo, rnd)
    )


@pytest.mark.parametrize("name", SWITCHED)
@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.ALL_TO_ALL, *REDUCING])
def test_both_paths_agree_on_every_broken_forward_and_catch_it(name, kind):
    assert_both_paths_catch(name, kind, 3, switch_mutations)


@pytest.mark.parametrize("name", ["ring:5", "dgx:2x4", "switch:70"])
@pytest.mark.parametrize("kind", REDUCING)
def test_reductions_replayed_a_few_chunks_at_a_time_pass_and_fail_alike(name, kind, monkeypatch):
    # Three chunks' slots at a time (switch:70: two words a slot), as a big All-Reduce is.
    topo = tacos.from_spec(name)
    verifier = importlib.import_module("tacos.verify")
    words = (topo.num_npus + 63) // 64
    monkeypatch.setattr(verifier, "VALUE_BYTES_AT_ONCE", 3 * topo.num_npus * words * 8)
    assert_both_paths_catch(
        name, kind, 5, lambda transfers, topo, _, rnd: reduce_mutations(transfers, topo, rnd)
    )
    schedule = tacos.synthesize(topo, Collective(kind, tuple(topo.npus), 2, 4096), seed=5)
    monkeypatch.setattr(verifier, "_check_data", None)  # right, so the replay is not needed
    assert tacos.verify(schedule, vectorised=True).ok


@pytest.mark.parametrize("name", ["torus2d:3x3", *SWITCHED])
@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_schedules_that_are_right_need_no_replay(name, kind, monkeypatch):
    topo = tacos.from_spec(name)
    schedule = tacos.synthesize(topo, Collective(kind, tuple(topo.npus), 2, 4096), seed=4)
    table = Schedule(topo, schedule.collective, TransferTable.from_transfers(schedule.transfers))
    verifier = importlib.import_module("tacos.verify")
    monkeypatch.setattr(verifier, "_check_data", None)  # the array path, replay-free
    assert tacos.verify(table).ok


@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_both_paths_agree_when_an_npu_outside_the_collective_sends_before_it_holds(kind):
    # Only NPUs outside the ranks start with nothing; a reduction of nothing changes no
    # slot, so for reducing kinds the early send is all that is wrong with the data.
    topo = tacos.from_spec("ring:6")
    spec = Collective(kind, (0, 2, 4), 1, 4096)
    schedule = tacos.synthesize(topo, spec, seed=1)
    relayed = [t for t in schedule.transfers if t.src not in spec.ranks]
    early = replace(relayed[0], start=0.0, end=relayed[0].end - relayed[0].start, deps=())
    report = assert_same_report(Schedule(topo, spec, [*schedule.transfers, early]))
    sends = f"transfer {len(schedule.transfers)}: node {early.src} sends chunk {early.chunk}"
    assert any(e.startswith(sends) for e in report.errors)


def test_both_paths_agree_on_transfers_near_the_rounding_slack():
    # 1 byte over a latency-free link takes about 1e-9 us, a thousand times the slack by
    # which the replay applies an arrival early: both paths see every chunk arrive.
    topo = tacos.from_spec("ring:4", latency_us=0.0, bandwidth_GBps=1e6)
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 1)
    assert assert_same_report(tacos.synthesize(topo, spec)).ok


def test_big_copy_only_schedules_take_the_array_path_automatically(monkeypatch):
    topo = tacos.from_spec("mesh2d:16x16")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus)))
    assert isinstance(schedule.transfers, TransferTable)
    verifier = importlib.import_module("tacos.verify")
    monkeypatch.setattr(verifier, "_check_data", None)  # the replay is not used
    assert tacos.verify(schedule).ok


def test_the_array_path_refuses_reductions_in_spreading_collectives_and_other_cost_models():
    topo = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    reducing = [replace(t, op=Op.REDUCE) for t in schedule.transfers]
    with pytest.raises(TacosError, match="does not apply: some transfers reduce"):
        tacos.verify(Schedule(topo, schedule.collective, reducing), vectorised=True)
    pipelined = replace(topo, cost=CostModel("pipelined"))
    with pytest.raises(TacosError, match="does not apply: it checks the paper's link model"):
        tacos.verify(Schedule(pipelined, schedule.collective, schedule.transfers), vectorised=True)


def test_spread_arrays_are_the_placements():
    for kind in SPREADING:
        for ranks in ((0, 1, 2), (3, 1, 4, 0)):
            spec = Collective(kind, ranks, 2, 16, root=ranks[-1] if kind.rooted else None)
            for final, placements in ((False, spec.initial_data()), (True, spec.final_data())):
                node, chunk, position = spec.spread_arrays(final=final)
                got = [
                    (int(n), int(c), 1 << int(p))
                    for n, c, p in zip(node, chunk, position, strict=True)
                ]
                assert got == placements, (kind, ranks, final)
