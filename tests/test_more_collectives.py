"""Switches, failures, tenants and the rooted / all-to-all collectives (issue 7)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.failures import parse_groups, parse_ids, parse_links, without_failures
from tacos.schedule import Op, Schedule, merge_tenants
from tacos.synthesizer import synthesize_tenants
from tacos.topology import Link, Topology, from_spec

ALL_KINDS = list(CollectiveKind)


def check(schedule: Schedule) -> None:
    """The three promises every synthesized schedule keeps."""
    report = tacos.verify(schedule)
    assert report.ok, report.summary()
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    bound = tacos.lower_bounds(schedule.topology, schedule.collective).best_us
    assert schedule.collective_time_us >= bound * (1 - 1e-9)


# --------------------------------------------------------------- properties
@st.composite
def topologies_with_switches(draw):
    """NPUs and switches on one directed cycle (so all connected), plus random links."""
    npus = draw(st.integers(2, 6))
    switches = draw(st.integers(0, 2))
    nodes = npus + switches
    order = draw(st.permutations(range(nodes)))
    pairs = {(order[i], order[(i + 1) % nodes]) for i in range(nodes)}
    extra = draw(st.lists(st.tuples(st.integers(0, nodes - 1), st.integers(0, nodes - 1)),
                          max_size=2 * nodes))  # fmt: skip
    pairs |= {(u, v) for u, v in extra if u != v}
    speeds = st.sampled_from([(25.0, 0.5), (50.0, 0.5), (100.0, 1.0), (400.0, 0.25)])
    links = tuple(Link(u, v, *draw(speeds)) for u, v in sorted(pairs))
    return Topology(npus, links, switches, name="random-with-switches")


@st.composite
def failed_tori(draw):
    """A small torus or mesh with a few NPUs and links failed; the survivors stay connected."""
    spec = draw(st.sampled_from(["torus2d:3x3", "torus2d:4x3", "mesh2d:3x3", "ring:7"]))
    topo = from_spec(spec)
    npus = draw(st.lists(st.integers(0, topo.num_npus - 1), max_size=2, unique=True))
    cables = draw(st.lists(st.sampled_from(list(topo.links)), max_size=2))
    broken = [p for lk in cables for p in ((lk.src, lk.dst), (lk.dst, lk.src))
              if lk.src not in npus and lk.dst not in npus]  # fmt: skip
    survivors = without_failures(topo, npus, broken)
    try:
        survivors.check_connected()
    except TacosError:
        assume(False)
    return survivors


def problems(topologies):
    @st.composite
    def build(draw):
        topo = draw(topologies)
        kind = draw(st.sampled_from(ALL_KINDS))
        chunks = draw(st.integers(1, 2))
        ranks = tuple(topo.npus)
        root = draw(st.sampled_from(ranks)) if kind.rooted else None
        return topo, Collective(kind, ranks, chunks, 2**20, root), draw(st.integers(0, 999))

    return build()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(topologies_with_switches()))
def test_every_collective_on_random_topologies_with_switches_is_correct(problem):
    topo, spec, seed = problem
    check(tacos.synthesize(topo, spec, seed=seed))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(failed_tori()))
def test_every_collective_on_topologies_with_failures_is_correct(problem):
    topo, spec, seed = problem
    check(tacos.synthesize(topo, spec, seed=seed))


# ----------------------------------------------------------------- switches
def test_switch_generator_puts_every_npu_on_one_switch():
    topo = from_spec("switch:8")
    assert (topo.num_npus, topo.num_switches, len(topo.links)) == (8, 1, 16)
    assert all(8 in (lk.src, lk.dst) for lk in topo.links)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_switches_only_forward(kind):
    topo = from_spec("switch:6")
    spec = Collective(kind, tuple(topo.npus), 2, 4096)
    schedule = tacos.synthesize(topo, spec, seed=3)
    check(schedule)
    for t in schedule.transfers:
        if topo.is_switch(t.src):
            assert len(t.deps) == 1  # forwards exactly the one transfer that came in
        if topo.is_switch(t.dst):
            assert t.op is Op.COPY
    forwarded = [d for t in schedule.transfers if topo.is_switch(t.src) for d in t.deps]
    assert len(forwarded) == len(set(forwarded))  # no replication


def test_switch_paths_become_single_npu_to_npu_messages():
    topo = from_spec("switch:4")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    messages = schedule.messages()
    assert len(messages) == 12 and all(len(hops) == 2 for hops in messages)
    for program in schedule.per_rank().values():
        assert all(step.peer < 4 for step in program.steps)


def test_the_verifier_rejects_a_switch_that_replicates_or_reduces():
    topo = from_spec("switch:3")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2)))
    out_of_switch = next(t for t in schedule.transfers if topo.is_switch(t.src))
    other_link = next(
        i for i, lk in enumerate(topo.links) if lk.src == 3 and lk.dst != out_of_switch.dst
    )
    late = out_of_switch.end + 50
    copy = replace(
        out_of_switch,
        link=other_link,
        dst=topo.links[other_link].dst,
        start=late,
        end=late + (out_of_switch.end - out_of_switch.start),
    )
    replicated = Schedule(topo, schedule.collective, [*schedule.transfers, copy])
    assert any("replicate" in e for e in tacos.verify(replicated).errors)
    into_switch = [
        replace(t, op=Op.REDUCE) if topo.is_switch(t.dst) else t for t in schedule.transfers
    ]
    reducing = Schedule(topo, schedule.collective, into_switch)
    assert any("cannot reduce" in e for e in tacos.verify(reducing).errors)


# ---------------------------------------------------------------- failures
def test_failed_npus_are_removed_and_survivors_renumbered_with_the_mapping_kept():
    topo = without_failures(from_spec("torus2d:4x4"), [3, 7], parse_links("0-1"))
    assert topo.num_npus == 14
    assert topo.original_ids == (0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15)
    assert (0, 1) not in {(topo.label(lk.src), topo.label(lk.dst)) for lk in topo.links}
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_REDUCE, tuple(topo.npus)))
    check(schedule)
    again = Schedule.from_json(schedule.to_json())
    assert again.topology.original_ids == topo.original_ids


def test_failures_that_split_the_network_are_reported_with_original_ids():
    topo = without_failures(from_spec("ring:6"), [0, 3])
    with pytest.raises(TacosError, match="NPU 4 cannot be reached from NPU 1"):
        topo.check_connected()


@pytest.mark.parametrize(
    ("npus", "links", "message"),
    [([9], [], "failed NPU 9 does not exist"), ([], [(0, 2)], "failed link 0->2 does not exist")],
)
def test_failing_something_that_does_not_exist_is_an_error(npus, links, message):
    with pytest.raises(TacosError, match=message):
        without_failures(from_spec("ring:6"), npus, links)


def test_id_lists_links_and_groups_parse():
    assert parse_ids("3,7,0-2") == [0, 1, 2, 3, 7]
    assert parse_links("0-1,4>5") == [(0, 1), (1, 0), (4, 5)]
    assert parse_groups("0-3;4,5,6") == [[0, 1, 2, 3], [4, 5, 6]]
    with pytest.raises(TacosError, match="runs backwards"):
        parse_ids("5-2")


# ------------------------------------------------------------------ tenants
def test_tenants_share_links_and_each_verifies_on_its_own():
    topo = from_spec("torus2d:4x4")
    groups = [(0, 2, 5, 7, 8, 10, 13, 15), (1, 3, 4, 6, 9, 11, 12, 14)]
    specs = [Collective(CollectiveKind.ALL_GATHER, g, 2, 2**20) for g in groups]
    together = synthesize_tenants(topo, specs, seed=1)
    for schedule in together:
        assert tacos.verify(schedule).ok
    joint = merge_tenants(together)
    assert tacos.simulate(joint).collective_time_us == max(s.collective_time_us for s in together)
    alone = [tacos.synthesize(topo, spec, seed=1).collective_time_us for spec in specs]
    assert sum(s.collective_time_us for s in together) > sum(alone)  # they contend


@pytest.mark.parametrize(
    ("spec", "groups", "meet_at_spine_only"),
    [
        ("dgx:4x4", [range(8), range(8, 16)], True),  # two servers each
        ("dgx:4x4", [range(0, 16, 2), range(1, 16, 2)], False),  # every server shared
        ("mesh2d:4x4", [range(8), range(8, 16)], False),
    ],
)
def test_tenants_are_built_together_and_apart_and_the_sooner_kept(spec, groups, meet_at_spine_only):
    topo = from_spec(spec)
    specs = [Collective(CollectiveKind.ALL_REDUCE, tuple(g), 1, 2**20) for g in groups]
    reports: list[tuple[int, int]] = []
    chosen = synthesize_tenants(
        topo, specs, algorithm="best", progress=lambda *report: reports.append(report)
    )
    done = [d for d, _ in reports]  # one report over both ways, each tenant alone after
    assert done == sorted(done) and reports[-1][0] == reports[-1][1] == reports[0][1]
    times = chosen[0].meta["tenants_us"]
    last_us = max(s.collective_time_us for s in chosen)
    assert last_us == min(t for t in times.values() if t is not None)
    for schedule in chosen:
        check(schedule)
        assert schedule.meta["tenants_synthesized"] in times
    assert tacos.simulate(merge_tenants(chosen)).collective_time_us == last_us
    if meet_at_spine_only:  # each as fast as on its own
        alone = synthesize_tenants(topo, specs[:1], algorithm="best")[0]
        assert chosen[0].meta["tenants_synthesized"] == "apart"
        assert last_us == alone.collective_time_us


def test_tenants_too_large_to_build_twice_are_built_together(monkeypatch):
    monkeypatch.setattr(tacos.synthesizer, "APART_MAX_DELIVERIES", 15)
    topo = from_spec("dgx:2x4")
    specs = [Collective(CollectiveKind.ALL_GATHER, g, 2) for g in ((0, 1, 2, 3), (4, 5, 6, 7))]
    reports: list[tuple[int, int]] = []
    chosen = synthesize_tenants(topo, specs, progress=lambda *report: reports.append(report))
    assert [s.meta["tenants_synthesized"] for s in chosen] == ["together", "together"]
    assert chosen[0].meta["tenants_us"] == {"together": max(s.collective_time_us for s in chosen)}
    assert reports[-1][0] == reports[-1][1] == reports[0][1]  # one way only, reported whole
    monkeypatch.undo()
    both: list[tuple[int, int]] = []
    synthesize_tenants(topo, specs, progress=lambda *report: both.append(report))
    assert both[-1][1] == 2 * reports[-1][1]


def test_tenants_must_not_overlap():
    topo = from_spec("ring:8")
    specs = [Collective(CollectiveKind.ALL_GATHER, r) for r in ((0, 1, 2), (2, 3))]
    with pytest.raises(TacosError, match="overlap on NPU"):
        synthesize_tenants(topo, specs)


# -------------------------------------------------------- collective specs
def test_rooted_collectives_default_to_the_first_rank_and_check_the_root():
    assert Collective(CollectiveKind.BROADCAST, (4, 5, 6)).root == 4
    with pytest.raises(TacosError, match="root 9 is not one of the ranks"):
        Collective(CollectiveKind.SCATTER, (0, 1), root=9)
    with pytest.raises(TacosError, match="has no root"):
        Collective(CollectiveKind.ALL_GATHER, (0, 1), root=0)


@pytest.mark.parametrize(
    ("kind", "per_rank", "chunks", "final"),
    [
        (CollectiveKind.BROADCAST, 2, 2, {(0, 0, 0b010), (2, 1, 0b010)}),
        (CollectiveKind.REDUCE, 2, 2, {(1, 0, 0b111), (1, 1, 0b111)}),
        (CollectiveKind.GATHER, 1, 3, {(1, 0, 0b001), (1, 2, 0b100)}),
        (CollectiveKind.SCATTER, 1, 3, {(0, 0, 0b010), (2, 2, 0b010)}),
        (CollectiveKind.ALL_TO_ALL, 1, 9, {(1, 1, 0b001), (0, 3, 0b010), (2, 5, 0b010)}),
    ],
)
def test_postconditions_of_the_new_collectives(kind, per_rank, chunks, final):
    spec = Collective(kind, (0, 1, 2), per_rank, 64, root=1 if kind.rooted else None)
    assert spec.num_chunks == chunks
    assert final <= set(spec.final_data())


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("spec", ["ring:6", "torus2d:3x3", "switch:5", "hypercube:3"])
def test_every_kind_on_the_standard_topologies(kind, spec):
    topo = from_spec(spec)
    root = topo.num_npus - 1 if kind.rooted else None
    check(tacos.synthesize(topo, Collective(kind, tuple(topo.npus), 2, 65536, root), seed=2))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spec", ["switch:4", "switch:8"])
def test_switch_queues_replay_the_same_whatever_the_order_of_simultaneous_arrivals(spec, seed):
    topo = from_spec(spec)
    for kind in (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE):
        schedule = tacos.synthesize(topo, Collective(kind, tuple(topo.npus), 2), seed=seed)
        assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
