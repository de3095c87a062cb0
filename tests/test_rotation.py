"""The rotation: an All-Gather straight from each owner, every host sending one message in
every slot, as fast as list scheduling where the hosts' links are alike."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.synthesizer.rotation import rotation, slots_line_up
from tacos.synthesizer.trees import TreeLayout, tree_collective
from tacos.topology import from_spec

AG = CollectiveKind.ALL_GATHER


def _checked_time_us(topology, spec, table) -> float:
    schedule = tacos.Schedule(topology, spec, table)
    assert tacos.verify(schedule).ok
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    return schedule.collective_time_us


@pytest.mark.parametrize("chunks", [1, 3])
def test_on_one_switch_every_host_link_is_busy_from_start_to_end(chunks):
    """One switch: each slot every host sends a chunk and receives one, so the All-Gather
    takes its bound, (hosts - 1) x chunks messages back to back, plus the switch's hop."""
    topology = from_spec("switch:8")
    spec = Collective(AG, tuple(topology.npus), chunks, 2**20)
    time_us = _checked_time_us(topology, spec, rotation(topology, spec))
    assert time_us == pytest.approx(tacos.lower_bounds(topology, spec).best_us)


def test_every_ordered_pair_of_hosts_exchanges_each_chunk_once_in_slot_order():
    topology = from_spec("fat-tree:4")
    spec = Collective(AG, tuple(topology.npus), 2, 2**20)
    table = rotation(topology, spec)
    first_hops = [t for t in table if not t.deps]
    assert Counter(t.chunk for t in first_hops) == dict.fromkeys(range(spec.num_chunks), 15)
    for host in topology.npus:
        sent = sorted((t.start, t.chunk) for t in first_hops if t.src == host)
        assert [chunk for _, chunk in sent] == [2 * host] * 15 + [2 * host + 1] * 15


@pytest.mark.parametrize(("spec_text", "chunks"), [("fat-tree:4", 4), ("fat-tree:6", 1)])
def test_on_a_fat_tree_the_rotation_ties_the_list_scheduler_and_the_ring(spec_text, chunks):
    topology = from_spec(spec_text)
    spec = Collective(AG, tuple(topology.npus), chunks, 2**20)
    rotated_us = _checked_time_us(topology, spec, rotation(topology, spec))
    listed = TreeLayout(tuple((host,) for host in topology.npus))
    scheduled = tree_collective(topology, spec, listed, random.Random(0))
    assert rotated_us == _checked_time_us(topology, spec, scheduled)
    ring = tacos.synthesize(topology, spec, algorithm="ring")
    assert rotated_us <= ring.collective_time_us


def test_a_rotation_whose_busiest_link_outlasts_the_time_to_beat_is_not_built():
    topology = from_spec("fat-tree:4")
    spec = Collective(AG, tuple(topology.npus), 1, 2**20)
    host_link_us = topology.link_busy_times_us(2**20)[topology.out_links[0][0]]
    assert rotation(topology, spec, 15 * host_link_us) is None  # each host sends 15
    assert rotation(topology, spec, 15.001 * host_link_us) is not None


def test_slots_line_up_only_where_every_host_link_is_alike():
    fat_tree = from_spec("fat-tree:4")
    assert slots_line_up(fat_tree, list(fat_tree.npus))
    slower = [
        replace(link, bandwidth_GBps=link.bandwidth_GBps / 2) if 0 in (link.src, link.dst) else link
        for link in fat_tree.links
    ]
    uneven = replace(fat_tree, links=tuple(slower))
    assert not slots_line_up(uneven, list(uneven.npus))
    assert slots_line_up(uneven, [1, 2, 3])  # the slow host is not a rank
