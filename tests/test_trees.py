"""Collectives on reduction and broadcast trees (tacos.synthesizer.trees): All-Reduce on both,
overlapped; All-Gather on broadcast trees and Reduce-Scatter as its mirror."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from paths import REFERENCE_DIR
from random_networks import clusters, host_fabrics, random_topologies

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.linkmodel import CostModel
from tacos.schedule import Op, Schedule
from tacos.synthesizer import trees as trees_module
from tacos.synthesizer.list_scheduling import Timeline, perturbed
from tacos.synthesizer.message_routes import MessageRoutes
from tacos.synthesizer.ownership import collective_owners
from tacos.synthesizer.roots import central_roots, crossing_roots, split_in_halves
from tacos.synthesizer.trees import (
    TreeLayout,
    _Plan,
    tree_collective,
    tree_layouts,
)
from tacos.topology import from_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from quality import heterogeneous_mesh  # noqa: E402

AR = CollectiveKind.ALL_REDUCE
AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


def _all_reduce(topology, chunks=1):
    return Collective(AR, tuple(topology.npus), chunks, 2**20)


def _all_gather(topology, chunks=1):
    return Collective(AG, tuple(topology.npus), chunks, 2**20)


def replace_kind(spec, kind):
    return Collective(kind, spec.ranks, spec.chunks_per_rank, spec.chunk_bytes)


def _checked(topology, spec, transfers):
    schedule = Schedule(topology, spec, transfers, {})
    report = tacos.verify(schedule)
    assert report.ok, report.summary()
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    return schedule


def _synthesized_on_trees(topology, spec):
    """What ``tacos.synthesize`` makes, checked to come from the trees and to verify."""
    schedule = tacos.synthesize(topology, spec, seed=0)
    assert schedule.meta["construction"] == "trees"
    assert tacos.verify(schedule).ok
    return schedule


def _whole(topology, spanning=False, central=False):
    return TreeLayout((tuple(topology.npus),), spanning, central=central)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_topologies(),
    st.integers(1, 3),
    st.sampled_from(["paper", "pipelined"]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_on_any_network_of_direct_links_the_trees_make_a_valid_all_reduce(
    topology, chunks, link_model, spanning, central, seed
):
    """Asymmetric links, mixed speeds, either link model, either way of growing trees, roots
    at the owners or central: it verifies and replays exactly."""
    topology = topology.with_cost(CostModel(link_model))
    spec = _all_reduce(topology, chunks)
    layout = _whole(topology, spanning, central)
    transfers = tree_collective(topology, spec, layout, random.Random(seed))
    schedule = _checked(topology, spec, transfers)
    assert schedule.collective_time_us >= tacos.lower_bounds(topology, spec).best_us * (1 - 1e-9)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(random_topologies(), st.integers(4, 5), st.integers(0, 2**16))
def test_halves_swapping_sums_across_their_cut_make_a_valid_all_reduce(topology, chunks, seed):
    """Wherever halves are offered (slow links between them, every half joined by its own
    links), the All-Reduce verifies and replays exactly, or is dropped (a root whose sum
    went out after the other half's had been added in)."""
    spec = _all_reduce(topology, chunks)
    offered = [layout for layout in tree_layouts(topology, [spec], None) if len(layout.groups) == 2]
    assume(offered)
    built = tree_collective(topology, spec, offered[0], random.Random(seed))
    if built is not None:
        _checked(topology, spec, built)


@pytest.mark.parametrize("spanning", [False, True])
def test_every_npu_sends_one_partial_sum_and_receives_one_result_per_chunk_it_does_not_own(
    spanning,
):
    """One reduction tree and one broadcast tree per chunk: nothing is sent twice."""
    topology = from_spec("mesh2d:4x4")
    spec = _all_reduce(topology, 2)
    built = tree_collective(topology, spec, _whole(topology, spanning), random.Random(0))
    transfers = _checked(topology, spec, built)
    for chunk in range(spec.num_chunks):
        owner = spec.owner(chunk)
        mine = [t for t in transfers.transfers if t.chunk == chunk]
        senders = sorted(t.src for t in mine if t.op is Op.REDUCE)
        receivers = sorted(t.dst for t in mine if t.op is Op.COPY)
        others = [npu for npu in topology.npus if npu != owner]
        assert senders == others and receivers == others


def test_the_same_seed_gives_the_same_schedule():
    topology = heterogeneous_mesh(4, 4)
    spec = _all_reduce(topology, 3)
    for layout in (_whole(topology), _whole(topology, spanning=True)):
        first = tree_collective(topology, spec, layout, random.Random(5))
        assert list(first) == list(tree_collective(topology, spec, layout, random.Random(5)))


def test_it_is_tried_for_uneven_direct_links_and_for_two_to_four_servers():
    mesh, torus = from_spec("mesh2d:4x4"), from_spec("torus2d:4x4")
    both = [_whole(mesh), _whole(mesh, spanning=True)]
    assert tree_layouts(mesh, [_all_reduce(mesh)], None) == both
    central = [_whole(mesh, spanning=True, central=True)]
    assert tree_layouts(mesh, [_all_reduce(mesh, 4)], None) == both + central
    halves = TreeLayout((tuple(range(8)), tuple(range(8, 16))), central=True)  # slow between
    assert tree_layouts(heterogeneous_mesh(4, 4), [_all_reduce(mesh, 4)], None) == [
        *both,
        *central,
        halves,
    ]
    assert tree_layouts(heterogeneous_mesh(4, 4), [_all_reduce(mesh)], None) == both
    assert tree_layouts(torus, [_all_reduce(torus)], None) == []  # at its bound
    assert tree_layouts(mesh, [_all_reduce(mesh)], 1) == []  # one-port NPUs
    gather = Collective(CollectiveKind.ALL_GATHER, tuple(mesh.npus))
    assert tree_layouts(mesh, [gather], None) == []
    row = (0, 1, 2, 3)  # a subset of ranks joined by its own links: trees of its own
    assert tree_layouts(mesh, [Collective(AR, row)], None) == [
        TreeLayout((row,)),
        TreeLayout((row,), spanning=True),
    ]
    diagonal = (0, 5, 10, 15)  # joined only through other NPUs: no trees
    assert tree_layouts(mesh, [Collective(AR, diagonal)], None) == []
    two = from_spec("dgx:2x4")
    servers = TreeLayout(((0, 1, 2, 3), (4, 5, 6, 7)))
    joined = servers._replace(joined=True)  # and their Reduce-Scatter then All-Gather
    assert tree_layouts(two, [_all_reduce(two)], None) == [servers, joined]
    four = from_spec("dgx:4x4")  # recursive doubling: two sums per root and chunk
    assert len(tree_layouts(four, [_all_reduce(four)], None)[0].groups) == 4
    three = from_spec("dgx:3x4")  # every root sends its sum to both others
    assert len(tree_layouts(three, [_all_reduce(three)], None)[0].groups) == 3
    eight = from_spec("dgx:8x2")  # through each chunk's owner's server, at few chunks
    hub, joined = tree_layouts(eight, [_all_reduce(eight)], None)
    assert hub.hub and len(hub.groups) == 8 and joined == hub._replace(hub=False, joined=True)
    assert tree_layouts(eight, [_all_reduce(eight, 4)], None) == [joined]


def test_central_roots_are_the_middle_rows_of_a_heterogeneous_mesh():
    # Fast rows, slow columns: the two middle rows reach every NPU within two slow hops,
    # the outer rows need three. Each outer NPU's chunks go to the NPU one slow hop in.
    mesh = heterogeneous_mesh(4, 4)
    routes = MessageRoutes(mesh, 2**20)
    roots = central_roots(routes, tuple(mesh.npus))
    assert roots == {npu: npu + 4 if npu < 4 else npu - 4 if npu >= 12 else npu
                     for npu in mesh.npus}  # fmt: skip


def test_halves_joined_by_slow_links_reduce_on_the_cut_and_swap_across_it():
    # hetero 4x4: rows 0-1 and rows 2-3 are joined by four slow links only. Each rank's
    # chunks are reduced at the NPU of its half on the cut nearest it, which swaps sums
    # with its neighbour across.
    mesh = heterogeneous_mesh(4, 4)
    halves = split_in_halves(mesh, tuple(mesh.npus))
    assert halves == (tuple(range(8)), tuple(range(8, 16)))
    assert split_in_halves(from_spec("mesh2d:4x4"), tuple(range(16))) is None  # one speed
    root_of, partners = crossing_roots(MessageRoutes(mesh, 2**20), halves)
    assert root_of == {npu: npu + 4 if npu < 4 else npu - 4 if npu >= 12 else npu
                       for npu in mesh.npus}  # fmt: skip
    assert partners == {root: (root, root + 4) if root < 8 else (root - 4, root)
                        for root in range(4, 12)}  # fmt: skip


def test_a_heterogeneous_mesh_all_reduce_within_the_issue_target_at_sixteen_chunks():
    """hetero 4x4 at 16 chunks per NPU (issue 15 asks 1.15x the throughput bound): one tree
    over the whole mesh, rooted at the owners, 1.167x; at central NPUs 1.155x; each half
    reduced on the slow cut and the sums swapped across it, 1.149x."""
    topology = heterogeneous_mesh(4, 4)
    spec = _all_reduce(topology, 16)
    schedule = _synthesized_on_trees(topology, spec)
    assert schedule.collective_time_us <= 1.15 * tacos.lower_bounds(topology, spec).throughput_us


def test_central_roots_fill_and_drain_a_mesh_pipeline_sooner():
    # mesh2d:4x4 at 16 chunks per NPU: a corner's chunk waits for the far corner's data
    # before its broadcast starts; a central root waits half as long (1.031 -> 1.025 of
    # the best bound).
    mesh = from_spec("mesh2d:4x4")
    spec = _all_reduce(mesh, 16)
    times = []
    for central in (False, True):
        layout = _whole(mesh, spanning=True, central=central)
        built = tree_collective(mesh, spec, layout, random.Random(0))
        times.append(_checked(mesh, spec, built).collective_time_us)
    assert times[1] < times[0]


def test_bigger_gather_trees_where_the_greedy_is_far_from_the_bound(monkeypatch):
    """Past MAX_GATHER_TREE_TRANSFERS, All-Gather trees are laid out only when the greedy is
    far from the bound (asked only then): with two servers per leaf and half the spine
    bandwidth, sixteen chunks per GPU, the leaves' trees beat the greedy by 6%."""
    oversubscribed = from_spec("dgx:4x8,oversubscription=2,nodes-per-leaf=2")
    spec = Collective(AG, tuple(oversubscribed.npus), 16, 2**20)
    asked = []

    def far() -> bool:
        asked.append(True)
        return True

    assert tree_layouts(oversubscribed, [spec], None) == []  # near, by default
    assert len(tree_layouts(oversubscribed, [spec], None, far)) == 2  # servers, leaves
    asked.clear()
    tree_layouts(oversubscribed, [Collective(AG, spec.ranks, 1, 2**20)], None, far)
    assert not asked  # every plan fits: the bound is not computed
    ours = tacos.synthesize(oversubscribed, spec)
    assert ours.meta["construction"] == "trees" and tacos.verify(ours).ok
    monkeypatch.setattr(trees_module, "MAX_FAR_GATHER_TREE_TRANSFERS", 0)
    greedy = tacos.synthesize(oversubscribed, spec)
    assert greedy.meta["construction"] == "greedy"
    assert ours.collective_time_us < 0.95 * greedy.collective_time_us


def test_hosts_behind_one_link_exchange_straight_from_each_owner_as_fast_as_the_rings():
    """On a fat tree every host's one link decides: the All-Gather straight from each owner
    ties the ring, the Reduce-Scatter sends its very messages (so ties it too), and the
    All-Reduce sends them twice without a pause between, faster than either ring."""
    fat_tree = from_spec("fat-tree:4")
    spec = Collective(AG, tuple(fat_tree.npus), 4, 2**20)
    direct = TreeLayout(tuple((host,) for host in fat_tree.npus), rotating=True)
    for kind in (AG, RS):
        assert direct in tree_layouts(fat_tree, [replace_kind(spec, kind)], None)
    assert direct._replace(joined=True) in tree_layouts(fat_tree, [replace_kind(spec, AR)], None)
    dgx = from_spec("dgx:2x4")  # GPUs with NVLink and a NIC: they relay
    assert all(
        len(g) > 1 for lay in tree_layouts(dgx, [_all_gather(dgx)], None) for g in lay.groups
    )
    times_us = {}
    for kind in (AG, RS, AR):
        ours = tacos.synthesize(fat_tree, replace_kind(spec, kind))
        assert ours.meta["construction"] == "trees"
        assert tacos.verify(ours).ok
        assert tacos.simulate(ours).collective_time_us == ours.collective_time_us
        times_us[kind] = ours.collective_time_us
    assert times_us[RS] == times_us[AG]
    for kind, ring in ((AG, "ring"), (RS, "ring"), (AR, "ring"), (AR, "hierarchical-ring")):
        classic = tacos.synthesize(fat_tree, replace_kind(spec, kind), algorithm=ring)
        assert times_us[kind] <= classic.collective_time_us
    assert times_us[AR] < 2 * times_us[AG]


@pytest.mark.parametrize("npus", [5, 8, 16])
def test_a_fully_connected_network_sends_straight_from_each_owner_at_its_bound(npus):
    """Every NPU has a link to every other: each link carries its sender's chunks only.
    The greedy alone took 1.5x the bound at two chunks per NPU on 8 and 16 NPUs."""
    network = from_spec(f"fully-connected:{npus}")
    straight = TreeLayout(tuple((npu,) for npu in network.npus))
    for kind in (AG, RS, AR):
        for chunks in (2, 3):
            spec = Collective(kind, tuple(network.npus), chunks, 2**20)
            assert straight._replace(joined=kind is AR) in tree_layouts(network, [spec], None)
            ours = tacos.synthesize(network, spec)
            assert tacos.verify(ours).ok
            assert tacos.simulate(ours).collective_time_us == ours.collective_time_us
            assert ours.collective_time_us == pytest.approx(
                tacos.lower_bounds(network, spec).best_us
            )
    ring = from_spec("ring:6")  # a neighbour's link only: not straight
    assert all(len(layout.groups) < 6 for layout in tree_layouts(ring, [_all_gather(ring)], None))


@pytest.mark.parametrize("rotating", [False, True])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host_fabrics(), st.integers(1, 3), st.integers(0, 2**16))
def test_straight_from_each_owner_all_three_verify_and_reduce_scatter_sends_the_same_messages(
    rotating, topology, chunks, seed
):
    """Hosts behind one cable each into any fabric: the All-Gather (list-scheduled, or as a
    rotation), the Reduce-Scatter that sends its messages with the chunks renamed, and the
    All-Reduce that sends both."""
    direct = TreeLayout(tuple((host,) for host in topology.npus), rotating=rotating)
    built = {}
    for kind in (AG, RS, AR):
        spec = Collective(kind, tuple(topology.npus), chunks, 2**20)
        layout = direct._replace(joined=kind is AR)
        built[kind] = _checked(
            topology, spec, tree_collective(topology, spec, layout, random.Random(seed))
        )

    def hops(kind):
        return sorted((t.src, t.dst, t.link) for t in built[kind].transfers)

    assert hops(RS) == hops(AG)
    assert sorted(hops(RS) * 2) == hops(AR)


def test_a_plan_whose_busiest_link_outlasts_the_time_to_beat_is_not_scheduled():
    topology = from_spec("fat-tree:4")
    spec = Collective(AG, tuple(topology.npus), 1, 2**20)
    direct = TreeLayout(tuple((host,) for host in topology.npus))
    built = tree_collective(topology, spec, direct, random.Random(0))
    busiest_us = max(  # each host's link takes in every other host's chunk
        sum(1 for t in built if t.link == link) * topology.link_busy_times_us(2**20)[link]
        for link in range(len(topology.links))
    )
    assert tree_collective(topology, spec, direct, random.Random(0), busiest_us) is None
    rs = replace_kind(spec, RS)
    assert tree_collective(topology, rs, direct, random.Random(0), busiest_us) is None
    ar, twice = replace_kind(spec, AR), direct._replace(joined=True)  # every message twice
    assert tree_collective(topology, ar, twice, random.Random(0), 2 * busiest_us) is None
    assert tree_collective(topology, ar, twice, random.Random(0), 2.002 * busiest_us)
    again = tree_collective(topology, spec, direct, random.Random(0), busiest_us * 1.001)
    assert list(again) == list(built)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_servers=4), st.integers(1, 3), st.integers(0, 2**16))
def test_servers_reduce_apart_exchange_their_sums_and_the_result_verifies(topology, chunks, seed):
    """Each server reduces a chunk into one GPU; the GPUs swap partial sums by recursive
    doubling (each sends before the round's sum arrives in it, or the attempt is
    dropped)."""
    spec = _all_reduce(topology, chunks)
    for layout in tree_layouts(topology, [spec], None):  # none if speeds hide them
        transfers = tree_collective(topology, spec, layout, random.Random(seed))
        if transfers is not None:
            _checked(topology, spec, transfers)


def test_servers_under_one_leaf_reduce_together_and_the_leaves_swap_sums():
    """Rails over two leaves: eight servers would exchange their sums in three rounds, so
    the servers under each leaf (reached without a spine) make one group, and the two
    groups swap sums over the spine once per chunk."""
    topology = from_spec("dgx:8x2,nodes-per-leaf=4")
    spec = _all_reduce(topology)
    exchanging = [lay for lay in tree_layouts(topology, [spec], None) if not lay.joined]
    servers, leaves = exchanging  # the eight through a hub
    assert servers.hub and not leaves.hub
    assert leaves.groups == (tuple(range(8)), tuple(range(8, 16)))
    _checked(topology, spec, tree_collective(topology, spec, leaves, random.Random(0)))
    two_tiers = from_spec("dgx:4x4,rails=2,nodes-per-leaf=2,spines=2")
    servers_and_leaves = tree_layouts(two_tiers, [_all_reduce(two_tiers)], None)
    assert [len(layout.groups) for layout in servers_and_leaves if not layout.joined] == [4, 2]


def test_two_servers_cross_once_at_one_chunk_per_npu():
    """a100-like pair of servers: Reduce-Scatter then All-Gather crosses the network twice
    (1.87x the best bound); reducing in each server and swapping the sums crosses once.
    Inside a server the GPUs take turns at each root, as a crossbar scheduler would (in
    chunk order: 1.39x)."""
    assert _times_the_bound_on_trees(from_spec("dgx:2x8,nvlink=300,pcie=32,nic=25"), 1) <= 1.32


def test_three_servers_send_their_sums_to_both_others_at_once():
    """dgx:3x8 at one chunk per GPU: Reduce-Scatter then All-Gather ends 1.80x the best
    bound; reducing in each server and sending each sum to the two other servers'
    roots, 1.63x."""
    assert _times_the_bound_on_trees(from_spec("dgx:3x8"), 1) <= 1.7


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_servers=7), st.integers(1, 2), st.integers(0, 2**16))
def test_through_a_hub_the_result_verifies(topology, chunks, seed):
    """Five or more servers: each sends its sum into the owner's server and gets the result
    back the same way; valid and replaying exactly, whatever the sizes and speeds."""
    spec = _all_reduce(topology, chunks)
    for layout in tree_layouts(topology, [spec], None):
        if layout.hub:
            _checked(topology, spec, tree_collective(topology, spec, layout, random.Random(seed)))


def test_eight_servers_on_two_rails_cross_into_the_owners_server_over_both_at_once():
    """dgx:8x4 with two rails over two leaves, one chunk per GPU: Reduce-Scatter then
    All-Gather ends 1.47x the best bound; through each chunk's owner's server, the other
    servers' sums crossing over the least-loaded rail, 1.25x."""
    topology = from_spec("dgx:8x4,rails=2,nodes-per-leaf=4")
    assert _times_the_bound_on_trees(topology, 1) <= 1.3


def test_all_reduce_on_a_mesh_overlaps_reduction_and_broadcast():
    """mesh2d:8x8 at 4 chunks per NPU: Reduce-Scatter then All-Gather cannot go below
    1.33x the best bound (the corners' links); the overlapped trees reach 1.19-1.23x."""
    assert _times_the_bound_on_trees(from_spec("mesh2d:8x8"), 4) <= 1.25


def test_spanning_trees_load_a_heterogeneous_mesh_as_evenly_as_the_bound_allows():
    """hetero 4x4 (rows of fast links, slow links between rows) at 16 chunks per NPU:
    trees of nearer parents send a partial sum down every column, so the busiest link
    carries 1.16x the link-capacity bound; spanning trees cross the slow cuts about
    once per chunk (1.01x)."""
    topology = heterogeneous_mesh(4, 4)
    spec = _all_reduce(topology, 16)
    bounds = tacos.lower_bounds(topology, spec)
    built = tree_collective(topology, spec, _whole(topology, spanning=True), random.Random(0))
    busy_us = [0.0] * len(topology.links)
    for link, start, end in zip(built.link, built.start, built.end, strict=True):
        busy_us[link] += end - start
    assert max(busy_us) <= 1.02 * bounds.link_capacity_us


def test_regrown_trees_lighten_the_busiest_link_of_a_heterogeneous_mesh():
    """hetero 4x4 at 16 chunks per NPU: trees of nearer parents grown chunk after chunk
    load the busiest link 1.27x the throughput bound (the first chunks chose before
    anything was booked); regrown among the others', 1.09x."""
    topology = heterogeneous_mesh(4, 4)
    spec = _all_reduce(topology, 16)
    routes = MessageRoutes(topology, spec.chunk_bytes)
    plan = _Plan(routes, (tuple(topology.npus),), collective_owners(spec).tolist(), False)
    first, regrown = plan.rounds
    assert regrown.busiest_us <= 0.9 * first.busiest_us
    for trees in plan.rounds:  # the same messages: one up and one down per NPU and chunk
        assert len(trees.transfers) == 2 * spec.num_chunks * (topology.num_npus - 1)


def test_polishing_takes_a_heterogeneous_mesh_within_the_issue_target():
    """hetero 8x4 at 16 chunks per NPU: the first passes' forward-backward rounds settle at
    1.153x the throughput bound; 40 more rounds, which do not improve steadily, reach
    1.144x (issue 15 asks 1.15x)."""
    topology = heterogeneous_mesh(8, 4)
    spec = _all_reduce(topology, 16)
    schedule = _synthesized_on_trees(topology, spec)
    assert schedule.collective_time_us <= 1.15 * tacos.lower_bounds(topology, spec).throughput_us


def test_perturbed_restarts_leave_the_local_optimum_the_rounds_settle_in(monkeypatch):
    """hetero 4x4 at four chunks per NPU: forward-backward rounds settle at 1.174x the best
    bound; restarts from their order with noise reach 1.135x."""
    topology = heterogeneous_mesh(4, 4)
    spec = _all_reduce(topology, 4)
    best_us = tacos.lower_bounds(topology, spec).best_us
    nearer = TreeLayout((tuple(topology.npus),))
    searched = tree_collective(topology, spec, nearer, random.Random(0))
    monkeypatch.setattr(trees_module, "PERTURBED_RESTARTS", 0)
    settled = tree_collective(topology, spec, nearer, random.Random(0))
    searched_us, settled_us = (
        _checked(topology, spec, built).collective_time_us for built in (searched, settled)
    )
    assert searched_us <= 1.14 * best_us
    assert searched_us < settled_us


def test_a_plan_whose_first_passes_end_far_behind_the_time_to_beat_is_not_polished(monkeypatch):
    """A plan whose first passes end more than 10% behind the time to beat is dropped
    before polishing, which never gained that much; one just inside is polished, and
    gains (hetero 4x4 at four chunks per NPU)."""
    topology = heterogeneous_mesh(4, 4)
    spec = _all_reduce(topology, 4)
    nearer = _whole(topology)
    with monkeypatch.context() as unpolished:
        unpolished.setattr(trees_module, "POLISHING_ROUNDS", 0)
        unpolished.setattr(trees_module, "PERTURBED_RESTARTS", 0)
        first = tree_collective(topology, spec, nearer, random.Random(0))
    first_us = _checked(topology, spec, first).collective_time_us
    at_most_us = first_us / trees_module.DROPPED_BEHIND
    behind = tree_collective(
        topology, spec, nearer, random.Random(0), to_beat_us=0.999 * at_most_us
    )
    assert behind is None
    polished = tree_collective(
        topology, spec, nearer, random.Random(0), to_beat_us=1.001 * at_most_us
    )
    assert _checked(topology, spec, polished).collective_time_us < first_us


def test_a_perturbed_search_never_returns_a_slower_order():
    topology = from_spec("mesh2d:3x3")
    spec = _all_reduce(topology, 2)
    plan = tree_collective(topology, spec, TreeLayout((tuple(topology.npus),)), random.Random(0))
    timeline = Timeline(topology, plan, spec.chunk_bytes)
    start = timeline.forward(np.arange(len(plan)))  # a poor order: as listed
    for restarts in (0, 1, 5):
        found = perturbed(timeline, start, restarts, 10.0, np.random.default_rng(restarts))
        assert found.finish_us <= start.finish_us
        assert (found.end >= found.start).all()


HTSIM = REFERENCE_DIR / "astra-sim/network/htsim/8nodes.topo"


@pytest.mark.skipif(not HTSIM.exists(), reason=f"{HTSIM} is not there")
@pytest.mark.parametrize("chunks", [1, 2])
def test_messages_share_parallel_links_and_the_planes_of_a_fat_tree(chunks):
    """htsim's 8-host fat tree (two pods, two aggregation switches each, doubled core
    links): every rack's uplinks carry as many messages, and so does every core link,
    where one aggregation switch per pod used to carry them all."""
    topology = tacos.load_topology(HTSIM)
    spec = _all_reduce(topology, chunks)
    pods, *others = tree_layouts(topology, [spec], None)  # and flat trees, RS-then-gathers
    assert not pods.joined and not pods.flat
    assert all(layout.joined or layout.flat for layout in others)
    built = tree_collective(topology, spec, pods, random.Random(0))
    _checked(topology, spec, built)
    carried = [0] * len(topology.links)
    for link in built.link:
        carried[link] += 1
    for low, high in [(8, 12), (12, 16)]:  # racks' switches, then the aggregation ones
        uplinks = [carried[i] for i, link in enumerate(topology.links)
                   if low <= link.src < high and link.dst >= high]  # fmt: skip
        assert len(set(uplinks)) == 1 and uplinks[0] > 0


@pytest.mark.skipif(not HTSIM.exists(), reason=f"{HTSIM} is not there")
def test_hosts_behind_one_link_reduce_straight_into_their_pods_root():
    """htsim's 8 hosts at one chunk per host: in flat trees every host sends its data
    straight to its pod's root and takes the result straight from it, one message out
    and one in per chunk, where a nearer parent relays and its one link carries both
    (1071.6 us). Taken root by root (:func:`_root_turns`), each root's first chunk is
    summed and exchanged while its second is still being gathered: 985.7 us, within 1.3
    of the best bound (771.0)."""
    topology = tacos.load_topology(HTSIM)
    spec = _all_reduce(topology, 1)
    nearer, flat = tree_layouts(topology, [spec], None)[:2]
    assert flat.flat and flat.groups == nearer.groups
    built = {
        layout.flat: _checked(
            topology, spec, tree_collective(topology, spec, layout, random.Random(0))
        )
        for layout in (nearer, flat)
    }

    def summing(schedule):  # per chunk and pod (hosts 0-3, 4-7), the hosts that add sums in
        found = {}
        for transfer in schedule.transfers:
            if transfer.op is Op.REDUCE and not topology.is_switch(transfer.dst):
                found.setdefault((transfer.chunk, transfer.dst // 4), set()).add(transfer.dst)
        return found.values()

    assert all(len(hosts) == 1 for hosts in summing(built[True]))
    assert any(len(hosts) > 1 for hosts in summing(built[False]))
    assert built[True].collective_time_us < built[False].collective_time_us
    bound_us = tacos.lower_bounds(topology, spec).best_us
    assert built[True].collective_time_us <= 1.3 * bound_us


def _times_the_bound_on_trees(topology, chunks):
    """The synthesized All-Reduce's time over the best lower bound, once it is checked to
    come from the trees and to verify."""
    spec = _all_reduce(topology, chunks)
    schedule = _synthesized_on_trees(topology, spec)
    return schedule.collective_time_us / tacos.lower_bounds(topology, spec).best_us


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_servers=4), st.integers(1, 3), st.sampled_from([AG, RS]), st.integers(0, 99))
def test_all_gather_and_reduce_scatter_on_trees_verify_on_small_clusters(
    topology, chunks, kind, seed
):
    """Any sizes, speeds and link model: every layout offered makes a valid schedule
    that replays exactly."""
    spec = Collective(kind, tuple(topology.npus), chunks, 2**20)
    for layout in tree_layouts(topology, [spec], None):  # none if speeds hide the servers
        _checked(topology, spec, tree_collective(topology, spec, layout, random.Random(seed)))


def test_an_all_gather_enters_every_other_server_once_per_chunk():
    """dgx:4x4: the owner sends each chunk to its place-mate in every other server, which
    passes it on over the NVSwitch; mirrored, each chunk's partial sum leaves every
    other server once, from the owner's place-mate."""
    topology = from_spec("dgx:4x4")
    for kind, end in ((AG, "dst"), (RS, "src")):
        spec = Collective(kind, tuple(topology.npus), 2, 2**20)
        (servers,) = tree_layouts(topology, [spec], None)
        assert servers.groups == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15))
        built = tree_collective(topology, spec, servers, random.Random(0))
        schedule = _checked(topology, spec, built)
        crossing = {}  # chunk -> NPUs a chunk enters (or leaves) a server at, over a NIC
        for t in schedule.transfers:
            npu = getattr(t, end)
            if topology.links[t.link].bandwidth_GBps == 64.0 and not topology.is_switch(npu):
                crossing.setdefault(t.chunk, []).append(npu)  # over a GPU's link to its NIC
        assert len(crossing) == spec.num_chunks
        for chunk, npus in crossing.items():
            owner = spec.owner(chunk)
            mates = [npu for npu in topology.npus if npu % 4 == owner % 4 and npu != owner]
            assert sorted(npus) == mates


def test_rails_gather_and_scatter_within_the_issue_target_at_one_chunk_per_gpu():
    """Rails over two leaves (64 GPUs) at one chunk per GPU: the greedy's All-Gather ends
    1.343x the best bound, its Reduce-Scatter 1.370x (issue 15 asks 1.3x); each chunk
    sent straight from its owner to its place-mate in every server, 1.281x both."""
    topology = from_spec("dgx:8x8,nodes-per-leaf=4")
    for kind in (AG, RS):
        spec = Collective(kind, tuple(topology.npus), 1, 2**20)
        schedule = _synthesized_on_trees(topology, spec)
        assert schedule.collective_time_us <= 1.3 * tacos.lower_bounds(topology, spec).best_us


def test_plain_tacos_stays_the_greedy():
    """``--policy random`` is the paper's algorithm, for comparison: no trees."""
    topology = from_spec("mesh2d:4x4")
    spec = _all_reduce(topology, 4)
    assert tacos.synthesize(topology, spec, policy="random").meta["construction"] == "greedy"
