"""How TACOS uses switched networks: multipath through the fabric, scarce links crossed once."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.synthesizer import fastest_greedy
from tacos.synthesizer.attempts import finish_us
from tacos.synthesizer.collectives import Settings, Tenants, synthesize_transfers
from tacos.synthesizer.greedy import match_destinations
from tacos.synthesizer.routes import Fabric, matching_groups, one_uplink_hosts
from tacos.topology import Topology, from_spec


def all_gather(topology: Topology, chunks: int) -> tacos.Schedule:
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topology.npus), chunks, 2**20)
    schedule = tacos.synthesize(topology, spec, seed=0, engine="reference")
    tacos.verify(schedule)
    return schedule


def test_the_fabric_takes_the_free_one_of_equal_cost_paths():
    topology = from_spec("fat-tree:4")
    fabric = Fabric(topology, topology.link_times_us(2**20))
    uplink = topology.out_links[0][0]
    free_at = [0.0] * len(topology.links)
    far_npu = topology.num_npus - 1
    first = fabric.earliest(uplink, 0.0, free_at)[far_npu]
    for link_id in first[2][1:-1]:  # book the switch-to-switch links of that path
        free_at[link_id] = 1e6
    second = fabric.earliest(uplink, 0.0, free_at)[far_npu]
    assert second[0] == first[0], "an equal-cost path is free, so it arrives as early"
    assert second[1] == pytest.approx(first[1]), "and it is as long"
    assert set(second[2][1:-1]).isdisjoint(first[2][1:-1])


@pytest.mark.parametrize("spec", ["dgx:3x4", "dgx:4x2,rails=1", "xgmi:3x4"])
def test_all_gather_brings_each_chunk_into_each_server_once_at_one_chunk_per_npu(spec):
    """A chunk crosses the NICs into a server once and spreads inside it over local links."""
    topology = from_spec(spec)
    npus = topology.num_npus
    gpus = {"dgx:3x4": 4, "dgx:4x2,rails=1": 2, "xgmi:3x4": 4}[spec]
    schedule = all_gather(topology, 1)
    server_of = {gpu: gpu // gpus for gpu in range(npus)}
    into_server = Counter(
        (t.chunk, server_of[t.dst])
        for t in schedule.transfers
        if t.dst < npus and not t.src < npus and t.src < 2 * npus  # NIC -> GPU
    )
    servers = npus // gpus
    expected = {
        (chunk, server)
        for chunk, server in itertools.product(range(npus), range(servers))
        if server_of[chunk] != server
    }
    assert set(into_server) == expected
    assert set(into_server.values()) == {1}


def test_switched_all_gather_is_near_the_throughput_bound_with_enough_chunks():
    """Regression guard for the switch-aware matching (it was 3x the bound before)."""
    topology = from_spec("fat-tree:4")
    schedule = all_gather(topology, 8)
    bound = tacos.lower_bounds(topology, schedule.collective).throughput_us
    assert schedule.collective_time_us <= 1.3 * bound


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 7), max_size=5).map(lambda d: sorted(set(d))), max_size=9),
    st.integers(0, 2**16),
)
def test_the_uplinks_into_a_crossbar_get_a_maximum_matching_to_their_destinations(tight, seed):
    matched = match_destinations(tight, random.Random(seed))
    assert all(dst in tight[uplink] for uplink, dst in matched.items())
    assert len(set(matched.values())) == len(matched), "one uplink per destination"
    graph = nx.Graph()
    uplinks = [("uplink", i) for i in range(len(tight))]
    graph.add_nodes_from(uplinks)
    graph.add_edges_from((("uplink", i), ("npu", d)) for i, dsts in enumerate(tight) for d in dsts)
    maximum = nx.bipartite.maximum_matching(graph, top_nodes=uplinks)
    assert len(matched) == len(maximum) // 2


@pytest.mark.parametrize("npus", [3, 5, 8, 12])
@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER])
@pytest.mark.parametrize("chunks", [1, 4])
def test_on_a_crossbar_all_gather_and_reduce_scatter_reach_the_lower_bound(npus, kind, chunks):
    """The uplinks into one switch are matched with distinct receivers every instant, so no
    receiver's link idles while a sender queues a chunk for another (before: switch:8's
    All-Gather with one chunk per NPU took 1.083x the bound)."""
    topology = from_spec(f"switch:{npus}")
    spec = Collective(kind, tuple(topology.npus), chunks, 2**20)
    bound_us = tacos.lower_bounds(topology, spec).best_us
    for seed in range(3):
        schedule = tacos.synthesize(topology, spec, seed=seed, engine="reference")
        assert tacos.verify(schedule).ok
        assert schedule.collective_time_us == pytest.approx(bound_us, rel=1e-9)


def test_the_nics_of_one_leaf_are_matched_together_and_each_nvswitch_alone():
    topology = from_spec("dgx:4x4,rails=2,nodes-per-leaf=2,spines=2")
    groups = matching_groups(topology)
    links = topology.links
    for node in range(topology.num_npus, topology.num_nodes):
        neighbours = {links[i].dst for i in topology.out_links[node]}
        switches = [n for n in neighbours if topology.is_switch(n)]
        if not switches:  # an NVSwitch
            assert groups[node] == node
        elif len(neighbours) == 2:  # a NIC: its GPU and its leaf
            assert groups[node] == switches[0]
        else:  # a leaf or a spine
            assert groups[node] == -1
    nics_per_group = Counter(g for g in groups[topology.num_npus :] if g >= 0)
    assert sorted(nics_per_group.values()) == [1] * 4 + [4] * 4  # 4 NVSwitches, 4 leaves


@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER])
def test_a_rail_sends_to_distinct_peers_each_round(kind):
    """The NIC uplinks of a leaf are matched with distinct receivers, so no GPU's NIC
    serialises two peers' chunks while another idles (before: dgx:4x8 with one
    chunk per GPU took 1.47x its lower bound; its NICs' 3 rounds bound it)."""
    topology = from_spec("dgx:4x8")
    spec = Collective(kind, tuple(topology.npus), 1, 2**20)
    bound_us = tacos.lower_bounds(topology, spec).best_us
    for seed in range(3):
        schedule = tacos.synthesize(topology, spec, seed=seed, engine="reference")
        assert tacos.verify(schedule).ok
        assert schedule.collective_time_us <= 1.2 * bound_us


@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER])
def test_a_host_with_one_uplink_sends_its_own_chunks_first(kind):
    """A fat tree's hosts have one link each: a host that relays others' chunks over
    it holds its own back, and nobody else can spread those. Sending its own first,
    fat-tree:4 at 16 chunks per host is within 1.10 of the throughput bound (before:
    1.10 to 1.15 by seed)."""
    topology = from_spec("fat-tree:4")
    spec = Collective(kind, tuple(topology.npus), 16, 2**20)
    bound_us = tacos.lower_bounds(topology, spec).throughput_us
    for seed in range(3):
        schedule = tacos.synthesize(topology, spec, seed=seed)
        assert tacos.verify(schedule).ok
        assert schedule.collective_time_us <= 1.10 * bound_us


def test_the_hosts_that_may_send_their_own_chunks_first_have_one_link_into_a_switch():
    fat_tree, dgx, ring = from_spec("fat-tree:4"), from_spec("dgx:2x4"), from_spec("ring:4")
    assert one_uplink_hosts(fat_tree) == [
        node in fat_tree.npus for node in range(fat_tree.num_nodes)
    ]
    assert not any(one_uplink_hosts(dgx))  # a GPU also has NVLink into its NVSwitch
    assert not any(one_uplink_hosts(ring))


@pytest.mark.parametrize(
    ("kind", "chunks", "seed", "faster"),
    [
        (CollectiveKind.ALL_GATHER, 1, 2, "without"),
        (CollectiveKind.REDUCE_SCATTER, 1, 2, "without"),
        (CollectiveKind.ALL_GATHER, 4, 7, "with"),
        (CollectiveKind.REDUCE_SCATTER, 4, 7, "with"),
    ],
)
def test_synthesis_keeps_the_faster_of_own_chunks_first_and_not(kind, chunks, seed, faster):
    """Either can win on fat-tree:4 (here at these seeds, by 5 to 15%), so both are
    built from the same random state and the faster kept, by either engine (then its
    links reordered when that is faster still). (Synthesis may then take trees where
    they are faster: tests/test_trees.py.)"""
    topology = from_spec("fat-tree:4")
    spec = Collective(kind, tuple(topology.npus), chunks, 2**20)
    alone_us = {}
    for own_first, label in ((True, "with"), (False, "without")):
        settings = Settings(random.Random(seed), own_first=own_first)
        transfers = synthesize_transfers(topology, Tenants((spec,)), settings)
        alone_us[label] = max(t.end for t in transfers)
    assert min(alone_us, key=alone_us.__getitem__) == faster
    for engine in ("reference", "fast"):
        rng = random.Random(seed)
        kept, reordered = fastest_greedy(topology, Tenants((spec,)), rng, "rarest", None, engine)
        if reordered:
            assert finish_us(kept) < alone_us[faster]
        else:
            assert finish_us(kept) == alone_us[faster]


def test_at_one_chunk_per_gpu_an_idle_nic_sends_far_rather_than_wait_for_a_relay():
    """Four servers of four GPUs, two rails over two leaves joined by two spines. Left to
    every nearer node, a chunk waits for a server on the receiver's leaf to relay it
    while the owner's NIC sits idle; left only to nodes nearer than half the path, the
    NIC sends it across the spine itself. Synthesis keeps the faster attempt (here by
    13%, as measured once built alone), on either engine."""
    topology = from_spec("dgx:4x4,rails=2,nodes-per-leaf=2,spines=2")
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topology.npus), 1, 2**20)
    alone_us = {}
    for near in (1.0, 0.5):
        settings = Settings(random.Random(0), near_fraction=near)
        transfers = synthesize_transfers(topology, Tenants((spec,)), settings)
        alone_us[near] = max(t.end for t in transfers)
    assert alone_us[0.5] < 0.9 * alone_us[1.0]
    for engine in ("reference", "fast"):
        schedule = tacos.synthesize(topology, spec, seed=0, engine=engine)
        assert tacos.verify(schedule).ok
        assert schedule.collective_time_us <= alone_us[0.5]
