"""The verifier's array path reports exactly what the replay reports, right or wrong."""

import importlib
import random
from dataclasses import replace

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule
from tacos.transfers import TransferTable

SPREADING = [CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST, CollectiveKind.GATHER,
             CollectiveKind.SCATTER, CollectiveKind.ALL_TO_ALL]  # fmt: skip


def mutations(transfers, num_chunks, num_links, rnd):
    """Broken variants: dropped, early, clashing, too short, misrouted, orphaned, dangling."""
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


def assert_same_report(schedule):
    replayed = tacos.verify(schedule, vectorised=False)
    vectorised = tacos.verify(schedule, vectorised=True)
    assert (vectorised.ok, vectorised.error_count, vectorised.errors) == (
        replayed.ok,
        replayed.error_count,
        replayed.errors,
    )
    return replayed


@pytest.mark.parametrize("name", ["ring:5", "mesh2d:3x4", "hypercube:3"])
@pytest.mark.parametrize("kind", SPREADING)
def test_both_paths_agree_on_valid_and_broken_schedules(name, kind):
    topo = tacos.from_spec(name)
    spec = Collective(kind, tuple(topo.npus), 2, 4096)
    schedule = tacos.synthesize(topo, spec, seed=2)
    assert assert_same_report(schedule).ok
    rnd = random.Random(name)
    for broken in mutations(schedule.transfers, spec.num_chunks, len(topo.links), rnd):
        assert_same_report(Schedule(topo, spec, broken, schedule.meta))


def test_both_paths_agree_when_transfers_are_shorter_than_the_rounding_slack():
    # 1 byte over a latency-free link takes under 1e-9 us: the replay applies such an
    # arrival before its departure, so the receiver gets nothing; the arrays must see that.
    topo = tacos.from_spec("ring:4", latency_us=0.0, bandwidth_GBps=1e6)
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 1)
    assert not assert_same_report(tacos.synthesize(topo, spec)).ok


def test_big_copy_only_schedules_take_the_array_path_automatically(monkeypatch):
    topo = tacos.from_spec("mesh2d:16x16")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus)))
    assert isinstance(schedule.transfers, TransferTable)
    verifier = importlib.import_module("tacos.verify")
    monkeypatch.setattr(verifier, "_check_data", None)  # the replay is not used
    assert tacos.verify(schedule).ok


def test_the_array_path_refuses_reductions():
    topo = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_REDUCE, (0, 1, 2, 3)))
    with pytest.raises(TacosError, match="does not apply: all-reduce reduces"):
        tacos.verify(schedule, vectorised=True)


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
