"""Classic algorithms (ring, hierarchical ring, double binary tree, direct, halving-doubling)
as Schedules: they verify, replay to their recorded time, meet their closed forms, and
``best`` is never slower than TACOS or any of them."""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_networks import random_topologies

import tacos
from tacos.classic import ALGORITHMS, NotApplicable, classic_schedule, compete
from tacos.classic.algorithms import double_binary_tree, recipes
from tacos.classic.build import Expansion, Nets, list_schedules, lower_estimate
from tacos.classic.network import (
    Network,
    _behind_one_switch,
    _cycle_cost,
    node_groups,
    ring_order,
)
from tacos.cli import export_main, main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule
from tacos.topology import Link, Topology, from_spec

K = CollectiveKind
MIB = 2**20


def asymmetric() -> Topology:
    """Five NPUs: a directed cycle of mixed speeds plus a few one-way shortcuts."""
    links = [
        Link(0, 1, 100.0, 0.5), Link(1, 2, 25.0, 1.0), Link(2, 3, 50.0, 0.25),
        Link(3, 4, 300.0, 0.0), Link(4, 0, 12.5, 3.0), Link(0, 3, 50.0, 0.5),
        Link(2, 0, 100.0, 0.5), Link(4, 2, 25.0, 1.0),
    ]  # fmt: skip
    return Topology(5, tuple(links), name="asymmetric")


def heterogeneous_mesh() -> Topology:
    """A 4x4 mesh whose dimension-0 links are four times faster (as in benchmarks/quality.py)."""
    base = from_spec("mesh2d:4x4")
    links = tuple(
        Link(lk.src, lk.dst, 200.0 if abs(lk.src - lk.dst) == 1 else 50.0, lk.latency_us)
        for lk in base.links
    )
    return Topology(16, links, name="hetero-mesh2d:4x4")


SPECS = ["ring:8", "mesh2d:4x4", "torus2d:4x4", "fully-connected:6", "switch:8", "hypercube:3",
         "dgx:2x4", "xgmi:2x4", "fat-tree:4"]  # fmt: skip
TOPOLOGIES = {spec: from_spec(spec) for spec in SPECS}
TOPOLOGIES["asymmetric"] = asymmetric()
TOPOLOGIES["hetero-mesh"] = heterogeneous_mesh()


def variants(topo: Topology, spec: Collective) -> list[tuple[str, str]]:
    out = []
    for algorithm in ALGORITHMS:
        with contextlib.suppress(NotApplicable):
            out += [(algorithm, r.variant) for r in recipes(Network(topo, 1), spec, algorithm)]
    return out


def assert_sound(schedule: Schedule) -> None:
    report = tacos.verify(schedule)
    assert report.ok, report.summary()
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us


# ------------------------------------------------------------------ every algorithm is sound
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_every_classic_algorithm_verifies_and_replays_to_its_recorded_time(name):
    topo = TOPOLOGIES[name]
    built = 0
    for kind in (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE):
        for chunks in (1, 3):
            spec = Collective(kind, tuple(topo.npus), chunks, MIB)
            for algorithm, variant in variants(topo, spec):
                schedule = classic_schedule(topo, spec, algorithm, variant=variant)
                assert_sound(schedule)
                assert schedule.meta["algorithm"] == algorithm
                assert schedule.meta["variant"] == variant
                built += 1
    assert built >= 3 * 2 * 3  # ring (two variants) and direct everywhere, at least


@pytest.mark.parametrize("name", ["switch:8", "mesh2d:4x4", "dgx:2x4", "asymmetric"])
@pytest.mark.parametrize(
    "kind", [K.BROADCAST, K.REDUCE, K.GATHER, K.SCATTER, K.ALL_TO_ALL], ids=lambda k: k.value
)
def test_rooted_collectives_and_all_to_all_are_sound(name, kind):
    topo = TOPOLOGIES[name]
    root = 1 if kind.rooted else None
    spec = Collective(kind, tuple(topo.npus), 2, 4096, root)
    found = variants(topo, spec)
    assert ("direct", "direct") in found
    for algorithm, variant in found:
        assert_sound(classic_schedule(topo, spec, algorithm, variant=variant))


def test_a_subset_of_ranks_relays_through_npus_that_take_no_part():
    topo = from_spec("mesh2d:3x3")
    for kind in (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE, K.REDUCE):
        spec = Collective(kind, (0, 2, 6, 8), 2, MIB)
        for algorithm, variant in variants(topo, spec):
            assert_sound(classic_schedule(topo, spec, algorithm, variant=variant))


@st.composite
def problems(draw):
    """A random strongly connected graph, sometimes with switches, and a collective on it."""
    topo = draw(random_topologies(extra_links_per_npu=2, switch=True))
    n = topo.num_npus
    kind = draw(st.sampled_from(list(CollectiveKind)))
    ranks = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=2))))
    spec = Collective(kind, ranks, draw(st.integers(1, 3)), draw(st.sampled_from([1, 4096, MIB])))
    return topo, spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_on_random_graphs_every_applicable_algorithm_is_sound(problem):
    topo, spec = problem
    for algorithm, variant in variants(topo, spec):
        schedule = classic_schedule(topo, spec, algorithm, variant=variant)
        assert_sound(schedule)
        assert schedule.collective_time_us >= tacos.lower_bounds(topo, spec).best_us * (1 - 1e-9)


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("n", [3, 5, 8])
@pytest.mark.parametrize("chunks", [1, 4])
def test_a_unidirectional_ring_all_gather_takes_n_minus_1_link_times_per_chunk(n, chunks):
    topo = from_spec(f"ring:{n}")
    link = topo.links[0].transfer_time_us(MIB)
    spec = Collective(K.ALL_GATHER, tuple(topo.npus), chunks, MIB)
    ring = classic_schedule(topo, spec, "ring", variant="unidirectional")
    assert ring.collective_time_us == pytest.approx((n - 1) * chunks * link, rel=1e-12)
    spec = Collective(K.ALL_REDUCE, tuple(topo.npus), chunks, MIB)
    all_reduce = classic_schedule(topo, spec, "ring", variant="unidirectional")
    # Reduce-Scatter then All-Gather, 2 (N-1) steps per chunk; the Reduce-Scatter runs the
    # other way round the ring (the mirror of an All-Gather), so with several chunks the
    # phases overlap on opposite links and finish a little earlier.
    expected = 2 * (n - 1) * chunks * link
    if chunks == 1:
        assert all_reduce.collective_time_us == pytest.approx(expected, rel=1e-12)
    else:
        assert (n - 1) * chunks * link < all_reduce.collective_time_us <= expected


def test_a_bidirectional_ring_halves_the_pipeline():
    topo = from_spec("ring:8")
    link = topo.links[0].transfer_time_us(MIB)
    spec = Collective(K.ALL_GATHER, tuple(topo.npus), 1, MIB)
    assert classic_schedule(topo, spec, "ring", variant="bidirectional").collective_time_us == (
        pytest.approx(4 * link, rel=1e-12)
    )
    assert classic_schedule(topo, spec, "ring").meta["variant"] == "bidirectional"


def test_direct_on_a_fully_connected_network_sends_every_chunk_once_per_link():
    topo = from_spec("fully-connected:6")
    link = topo.links[0].transfer_time_us(MIB)
    for chunks in (1, 3):
        spec = Collective(K.ALL_GATHER, tuple(topo.npus), chunks, MIB)
        assert classic_schedule(topo, spec, "direct").collective_time_us == pytest.approx(
            chunks * link, rel=1e-12
        )


def test_halving_doubling_on_a_hypercube_exchanges_with_neighbours_only():
    topo = from_spec("hypercube:4")
    spec = Collective(K.ALL_GATHER, tuple(topo.npus), 1, MIB)
    schedule = classic_schedule(topo, spec, "halving-doubling")
    assert len(schedule.transfers) == 16 * 15  # each NPU receives each chunk once, directly
    link = topo.links[0].transfer_time_us(MIB)
    # The last step sends half of everything over one link; chunks go on as soon as they
    # arrive (no barrier between steps), so the other steps hide behind it.
    assert schedule.collective_time_us == pytest.approx(8 * link, rel=1e-12)


def test_the_hierarchical_ring_crosses_nodes_on_every_rail_at_once():
    topo = from_spec("dgx:2x4")
    spec = Collective(K.ALL_REDUCE, tuple(topo.npus), 4, MIB)
    hierarchical = classic_schedule(topo, spec, "hierarchical-ring")
    flat = classic_schedule(topo, spec, "ring")
    assert hierarchical.meta["nodes"] == 2 and hierarchical.meta["npus_per_node"] == 4
    assert hierarchical.collective_time_us < flat.collective_time_us / 2


# ------------------------------------------------------------------ the internals agree
@pytest.mark.parametrize("name", ["switch:8", "torus2d:4x4", "fat-tree:4", "asymmetric"])
def test_templates_estimate_and_list_schedule_agree_with_the_full_build_and_the_replay(name):
    topo = TOPOLOGIES[name]
    for kind in (K.REDUCE_SCATTER, K.ALL_REDUCE):
        spec = Collective(kind, tuple(topo.npus), 3, MIB)
        nets = Nets(topo, MIB)
        for recipe in [r for a in ALGORITHMS for r in _maybe(recipes, nets.forward, spec, a)]:
            expansion = Expansion(spec, recipe, nets)
            block = expansion.block()
            assert len(expansion) == len(block)
            times = nets.forward.times
            assert expansion.lower_estimate() == pytest.approx(lower_estimate(block, times))
            (schedule,) = list_schedules(block.table(topo), topo, MIB)  # the paper's model
            listed = schedule.finish_us
            built = classic_schedule(topo, spec, recipe.algorithm, variant=recipe.variant)
            assert listed == built.collective_time_us
            assert listed >= expansion.lower_estimate() * (1 - 1e-12)


def _maybe(function, *args):
    try:
        return function(*args)
    except NotApplicable:
        return []


def test_ring_orders_follow_the_topology():
    for spec in ("mesh2d:4x4", "mesh2d:4x6", "torus2d:4x4", "mesh3d:2x3x4", "hypercube:4"):
        topo = from_spec(spec)
        net = Network(topo, MIB)
        order = ring_order(net, list(topo.npus))
        assert sorted(order) == list(topo.npus)
        assert all(net.direct(a, b) for a, b in zip(order, order[1:] + order[:1], strict=True))
    topo = from_spec("dgx:4x8")
    order = ring_order(Network(topo, MIB), list(topo.npus))
    crossings = sum(a // 8 != b // 8 for a, b in zip(order, order[1:] + order[:1], strict=True))
    assert crossings == 4  # one per node boundary


def test_node_groups_are_inferred_from_link_speeds_or_first_hop_switches():
    assert node_groups(from_spec("dgx:2x4"), range(8)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert node_groups(from_spec("xgmi:2x4"), range(8)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert node_groups(from_spec("fat-tree:4"), range(16)) == [[2 * i, 2 * i + 1] for i in range(8)]
    assert node_groups(heterogeneous_mesh(), range(16)) == [list(range(4 * r, 4 * r + 4))
                                                            for r in range(4)]  # fmt: skip
    for spec in ("ring:8", "switch:8", "torus2d:4x4"):
        assert node_groups(from_spec(spec), range(from_spec(spec).num_npus)) is None


@pytest.mark.parametrize("n", [2, 3, 6, 7, 8, 13, 16])
def test_the_double_binary_tree_is_two_spanning_trees(n):
    for children in double_binary_tree(n):
        parents = [p for p, kids in enumerate(children) for _ in kids]
        reached = [c for kids in children for c in kids]
        assert sorted(reached + [next(r for r in range(n) if r not in reached)]) == list(range(n))
        assert len(parents) == n - 1


# ------------------------------------------------------------------ best
@pytest.mark.parametrize("name", ["ring:8", "switch:8", "dgx:2x4", "xgmi:2x4", "hetero-mesh"])
@pytest.mark.parametrize("kind", [K.ALL_GATHER, K.ALL_REDUCE], ids=lambda k: k.value)
def test_best_is_never_slower_than_tacos_or_any_classic_algorithm(name, kind):
    topo = TOPOLOGIES[name]
    spec = Collective(kind, tuple(topo.npus), 2, MIB)
    best = tacos.synthesize(topo, spec, algorithm="best")
    assert_sound(best)
    candidates = best.meta["candidates_us"]
    assert best.collective_time_us == min(candidates.values())
    assert best.collective_time_us <= tacos.synthesize(topo, spec).collective_time_us
    assert best.meta["algorithm"] in ("tacos", *ALGORITHMS)
    for algorithm, _ in variants(topo, spec):
        classic = classic_schedule(topo, spec, algorithm)
        assert best.collective_time_us <= classic.collective_time_us


def test_best_keeps_tacos_on_ties_and_records_why_others_were_not_built():
    topo = from_spec("ring:8")
    spec = Collective(K.ALL_GATHER, tuple(topo.npus), 1, MIB)
    best = tacos.synthesize(topo, spec, algorithm="best")
    assert best.meta["algorithm"] == "tacos" and best.meta["synthesizer"] == "tacos-greedy"
    assert "lower bound" in best.meta["candidates_skipped"]["classic"]
    switched = from_spec("switch:8")
    spec = Collective(K.ALL_GATHER, tuple(switched.npus), 1, MIB)
    outcome = compete(switched, spec, incumbent_us=1e9)
    assert "hierarchical-ring" in outcome.skipped and "tree" in outcome.skipped
    assert set(outcome.times_us) | set(outcome.skipped) >= {"direct", "halving-doubling"}


def test_best_is_deterministic_and_the_library_default_is_still_tacos():
    topo = from_spec("switch:8")
    spec = Collective(K.ALL_REDUCE, tuple(topo.npus), 2, MIB)
    assert "algorithm" not in tacos.synthesize(topo, spec).meta
    first = tacos.synthesize(topo, spec, algorithm="best").to_json()
    assert tacos.synthesize(topo, spec, algorithm="best").to_json() == first


def test_tenants_race_the_classics_apart_and_one_port_npus_are_honoured():
    topo = from_spec("switch:8")
    groups = [Collective(K.ALL_GATHER, (0, 1, 2, 3)), Collective(K.ALL_GATHER, (4, 5, 6, 7))]
    for schedule in tacos.synthesizer.synthesize_tenants(topo, groups, algorithm="best"):
        assert schedule.meta["algorithm"] == "tacos"
        assert schedule.meta["tenants_synthesized"] in ("together", "apart")
        assert_sound(schedule)
    with pytest.raises(TacosError, match="tenants"):
        tacos.synthesizer.synthesize_tenants(topo, groups, algorithm="ring")
    spec = Collective(K.ALL_GATHER, tuple(topo.npus), 2, MIB)
    one_port = tacos.synthesize(topo, spec, algorithm="best", sends_in_flight=1)
    assert one_port.sends_in_flight == 1
    assert_sound(one_port)
    ring = tacos.synthesize(topo, spec, algorithm="ring", sends_in_flight=1)
    assert ring.sends_in_flight == 1
    assert_sound(ring)


def test_big_problems_skip_classic_algorithms_by_their_transfer_count():
    topo = from_spec("switch:16")
    spec = Collective(K.ALL_REDUCE, tuple(topo.npus), 4, MIB)
    outcome = compete(topo, spec, incumbent_us=1e9, max_transfers=1000)
    assert outcome.best is None and not outcome.times_us
    assert "transfers" in outcome.skipped["ring"]


# ------------------------------------------------------------------ refusals and the CLI
@pytest.mark.parametrize(
    ("spec", "collective", "algorithm", "message"),
    [
        ("ring:6", "all-reduce", "halving-doubling", "power-of-two"),
        ("ring:8", "all-reduce", "hierarchical-ring", "two or more equal nodes"),
        ("ring:8", "all-gather", "tree", "implements all-reduce"),
        ("ring:8", "gather", "ring", "implements"),
    ],
)
def test_an_algorithm_that_does_not_apply_is_a_one_line_error(
    capsys, spec, collective, algorithm, message
):
    topo = from_spec(spec)
    with pytest.raises(NotApplicable, match=message):
        tacos.synthesize(
            topo, Collective(CollectiveKind.parse(collective), tuple(topo.npus)),
            algorithm=algorithm,
        )  # fmt: skip
    argv = ["synthesize", "--topology", spec, "--collective", collective, "--algorithm", algorithm]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


@pytest.mark.parametrize(  # TACOS is not at the bound there, so the classics are built
    "network", ["dgx:4x4,rails=2,nodes-per-leaf=2,spines=2,oversubscription=2", "fat-tree:4"]
)
def test_cli_best_is_the_default_and_reports_every_candidate(capsys, tmp_path, network):
    target = tmp_path / "s.json"
    argv = ["synthesize", "--topology", network, "--collective", "all-gather", "--json"]
    assert main([*argv, "-o", str(target)]) == 0
    data = json.loads(capsys.readouterr().out)
    times = data["candidates_us"]
    assert "tacos" in times and len(times) > 1
    winner = data["algorithm"]
    if winner not in times:  # one of several variants: "ring/bidirectional"
        winner += "/" + data["variant"]
    assert data["collective_time_us"] == times[winner] == min(times.values())
    if winner != "tacos":
        assert times[winner] < times["tacos"]  # ties go to TACOS
    saved = Schedule.load(target)
    assert saved.meta["algorithm"] == data["algorithm"]
    assert_sound(saved)
    assert main([*argv, "--algorithm", "tacos"]) == 0
    assert json.loads(capsys.readouterr().out)["algorithm"] == "tacos"


def test_best_builds_no_classic_algorithm_when_tacos_meets_the_bound(capsys):
    # switch:8, one chunk each: every NPU takes 7 chunks over its one switch link, one
    # after the other after the first hop (the latency-aware cut), and TACOS does that.
    argv = ["synthesize", "--topology", "switch:8", "--collective", "all-gather", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["algorithm"] == "tacos" and data["candidates_us"] == {"tacos": 160.25}
    assert data["bounds"]["latency_cut_us"] == data["lower_bound_us"] == 160.25


def test_tacos_export_takes_the_algorithm_too(capsys, tmp_path):
    target = tmp_path / "ring.json"
    argv = ["--format", "json", "--topology", "torus2d:4x4", "--collective", "all-reduce",
            "--algorithm", "ring", "-o", str(target)]  # fmt: skip
    assert export_main(argv) == 0
    capsys.readouterr()
    schedule = Schedule.load(target if target.is_file() else next(target.glob("*.json")))
    assert schedule.meta["algorithm"] == "ring"
    assert_sound(schedule)


def test_ranks_behind_one_switch_keep_their_order_every_cycle_costs_the_same():
    # Each hop is the sender's link up and the receiver's link down, whatever the speeds.
    topo = Topology(
        5,
        tuple(
            link
            for npu, bandwidth in enumerate([50.0, 100.0, 25.0, 400.0, 12.5])
            for link in (Link(npu, 5, bandwidth, 1.0), Link(5, npu, 2 * bandwidth, 0.5))
        ),
        1,
    )
    net = Network(topo, MIB)
    ranks = [4, 0, 3, 1, 2]
    assert ring_order(net, ranks) == sorted(ranks)
    costs = {_cycle_cost(net, list(order)) for order in itertools.permutations(range(5))}
    assert len({round(cost, 9) for cost in costs}) == 1
    star_with_a_direct_link = Topology(5, (*topo.links, Link(0, 1, 50.0, 1.0)), 1)
    assert not _behind_one_switch(star_with_a_direct_link, range(5))
