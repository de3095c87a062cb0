"""The All-Reduce message-count (gossip) bounds, without and with latency: hand-checked values,
and no schedule beats them, whichever partition binds."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_networks import clusters, random_topologies

import tacos
from tacos import latency_cuts
from tacos.collective import Collective, CollectiveKind
from tacos.gossip_bound import OUTSIDE, gossip_bound_us, partitions
from tacos.latency_cuts import gossip_latency_bound_us, knowing_us

AR = CollectiveKind.ALL_REDUCE


def test_partitions_are_single_npus_then_each_bandwidth_levels_servers():
    # dgx:3x2: single GPUs, then the servers (GPUs 0-1, 2-3, 4-5, each named by its
    # least node); the slowest level joins everything into one group, which counts nothing.
    topo = tacos.from_spec("dgx:3x2")
    found = list(partitions(topo))
    groups = [{g for g in p[: topo.num_npus]} for p, _ in found]
    assert groups[0] == set(range(6))
    assert {0, 2, 4} in groups[1:]
    for p, num_groups in found:
        assert num_groups == len({g for g in p if g != OUTSIDE}) >= 2
        assert all(g == OUTSIDE or g in p[: topo.num_npus] for g in p)


def test_one_chunk_per_gpu_on_sixteen_servers_waits_for_thirty_messages_per_nic():
    # dgx:16x8, 1 MiB per GPU: 2 x 15 messages per chunk enter the 16 servers over
    # their 128 NIC links, 30 each. The first can leave a GPU at 0 and cross PCIe
    # (15.26 us + 0.25), its NIC link (19.53 + 1), the leaf -> NIC link (20.53) and
    # the NIC -> GPU link: 72.08 us; each NIC link then takes 20.53 us per message.
    # What the last message brings must then reach the seven other GPUs of its server
    # over the NVSwitch (2.69 us a hop, one message out of a GPU at a time): two more
    # know after 2 hops, 3 and 4 after 3 hops, all eight after 5 hops; or it comes in
    # again, and the 3841st message lands 20.53 us later still.
    topo = tacos.load_topology("dgx:16x8")
    spec = Collective(AR, tuple(topo.npus), 1, 2**20)
    pcie = 2**20 / (64 * 2**30) * 1e6 + 0.25
    nic = 2**20 / (50 * 2**30) * 1e6 + 1
    nvlink = 2**20 / (400 * 2**30) * 1e6 + 0.25
    assert gossip_latency_bound_us(topo, spec) == pytest.approx(
        2 * pcie + 2 * nic + 29 * nic + 5 * nvlink
    )
    assert tacos.lower_bounds(topo, spec).best_us == gossip_latency_bound_us(topo, spec)
    assert gossip_latency_bound_us(topo, spec) > 1.1 * gossip_bound_us(topo, spec)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(clusters(max_servers=5), random_topologies(switch=True)),
    st.integers(1, 3),
    st.sampled_from([4096, 2**20]),
)
def test_no_all_reduce_beats_it(topo, chunks, size):
    # TACOS and every classic algorithm (``best`` builds them all when none meets the bound).
    spec = Collective(AR, tuple(topo.npus), chunks, size)
    bound = max(gossip_bound_us(topo, spec), gossip_latency_bound_us(topo, spec))
    schedule = tacos.synthesize(topo, spec, algorithm="best")
    times = [schedule.collective_time_us, *schedule.meta.get("candidates_us", {}).values()]
    assert min(times) >= bound * (1 - 1e-9)


def test_the_last_news_into_a_server_comes_in_again_when_that_is_sooner_than_telling(
    monkeypatch,
):
    # Sixteen servers of two GPUs on a 60 GB/s NVSwitch: telling the other GPU takes two
    # hops of 16.53 us, so one more message into the servers (the 961st, 20.53 us after
    # the 960th) binds.
    topo = tacos.load_topology("dgx:16x2,nvlink=60")
    spec = Collective(AR, tuple(topo.npus), 1, 2**20)
    nic = 2**20 / (50 * 2**30) * 1e6 + 1
    told = gossip_latency_bound_us(topo, spec)
    monkeypatch.setattr(latency_cuts, "MAX_SPREAD_RANKS", 0)  # no group is searched
    assert told == pytest.approx(gossip_latency_bound_us(topo, spec) + nic)


def test_a_group_of_one_npu_has_no_one_to_tell(monkeypatch):
    # Single GPUs as groups (one GPU per server): what lands at a GPU is known to its group.
    topo = tacos.load_topology("dgx:8x1")
    spec = Collective(AR, tuple(topo.npus), 2, 2**20)
    told = gossip_latency_bound_us(topo, spec)
    monkeypatch.setattr(latency_cuts, "MAX_SPREAD_RANKS", 0)
    assert told == gossip_latency_bound_us(topo, spec)


@given(st.integers(1, 40), st.floats(0.1, 50), st.floats(0.1, 50), st.integers(1, 8))
def test_knowing_grows_by_one_npu_at_a_time_and_in_one_message_time_with_a_link_to_each(
    npus, reach_us, busy_us, links
):
    told = knowing_us(npus, reach_us, busy_us, links)
    assert told[0] == 0.0 and (np.diff(told) >= 0).all()
    assert (knowing_us(npus + 1, reach_us, busy_us, links)[:npus] == told).all()
    assert (told >= knowing_us(npus, reach_us, busy_us, links + 1)).all()
    assert (told[1 : links + 1] == reach_us).all()
