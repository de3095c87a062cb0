"""Shortening a schedule's tail by swapping two chunks on one link (``timing.shorten_tail``).

A swap is safe when the sender held the relayed chunk at the earlier send, and
it never makes anything later: checked on a hand-made relay, on random graphs
(valid schedules, each finish no later than without the pass, each engine the
reference's) and on the random graph where the greedy alone ended one hop late.
"""

import random

import pytest
from test_fast import random_topology

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Transfer
from tacos.synthesizer import attempts, list_scheduling, timing
from tacos.synthesizer.timing import retime_asap, shorten_tail
from tacos.topology import Link, Topology
from tacos.transfers import TransferTable

AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE
SLOT_US = 20.03125  # 1 MiB over a 50 GB/s link with 0.5 us latency


def retimed_on(topology):
    """The reference's re-timing of 1 MiB transfers on ``topology``, table to table."""
    return lambda table: TransferTable.from_transfers(retime_asap(list(table), topology, 2**20))


def test_the_relayed_chunk_moves_to_the_earlier_send_and_the_relay_follows_it():
    # 0 -> 1 -> 2: node 1 keeps chunk 0 and relays chunk 1, which came second.
    line = Topology(3, (Link(0, 1, 50.0, 0.5), Link(1, 2, 50.0, 0.5)), name="line")
    sends = [
        Transfer(0, 0, 1, 0, 0.0, SLOT_US),
        Transfer(1, 0, 1, 0, SLOT_US, 2 * SLOT_US),
        Transfer(1, 1, 2, 1, 2 * SLOT_US, 3 * SLOT_US, deps=(1,)),
    ]
    shortened = shorten_tail(TransferTable.from_transfers(sends), line, retimed_on(line))
    assert [(t.chunk, t.link, t.deps) for t in shortened] == [(1, 0, ()), (0, 0, ()), (1, 1, (0,))]
    assert max(t.end for t in shortened) == 2 * SLOT_US


def test_a_chunk_the_sender_did_not_hold_at_the_earlier_send_is_not_moved_there():
    # Node 0 gets chunk 1 from node 3 only after its first send to node 1.
    links = (Link(3, 0, 25.0, 0.5), Link(0, 1, 50.0, 0.5), Link(1, 2, 50.0, 0.5))
    topo = Topology(4, links, name="late")
    sends = [
        Transfer(0, 0, 1, 1, 0.0, SLOT_US),  # kept by node 1
        Transfer(1, 3, 0, 0, 0.0, 2 * SLOT_US),
        Transfer(1, 0, 1, 1, 2 * SLOT_US, 3 * SLOT_US, deps=(1,)),
        Transfer(1, 1, 2, 2, 3 * SLOT_US, 4 * SLOT_US, deps=(2,)),
    ]
    assert list(shorten_tail(TransferTable.from_transfers(sends), topo, retimed_on(topo))) == sends


@pytest.mark.parametrize("kind", [AG, RS, AR])
@pytest.mark.parametrize("topology_seed", range(6))
def test_the_pass_keeps_schedules_valid_and_never_later(monkeypatch, kind, topology_seed):
    rnd = random.Random(topology_seed)
    topo = random_topology(rnd, rnd.randint(5, 12))
    spec = Collective(kind, tuple(topo.npus), 2, 2**20)
    with_pass = {
        engine: tacos.synthesize(topo, spec, seed=topology_seed, engine=engine)
        for engine in ("reference", "fast")
    }
    monkeypatch.setattr(timing, "MAX_TAIL_ROUNDS", 0)
    without = tacos.synthesize(topo, spec, seed=topology_seed, engine="reference")
    reference = with_pass["reference"]
    assert tacos.verify(reference).ok
    assert reference.collective_time_us <= without.collective_time_us
    assert list(with_pass["fast"].transfers) == list(reference.transfers)


def test_a_streamed_all_gather_is_the_synthesized_one_when_the_pass_shortens_it(
    tmp_path, monkeypatch
):
    from tacos.stream import stream_all_gather, to_table

    rnd = random.Random(145)  # of 200 such graphs, one where the pass gains (20 us)
    topo = random_topology(rnd, rnd.randint(5, 12))
    spec = Collective(AG, tuple(topo.npus), 2, 2**20)
    synthesized = tacos.synthesize(topo, spec, seed=0, engine="fast")
    stream_all_gather(topo, spec, tmp_path / "ag.tacos", seed=0)
    assert list(to_table(tmp_path / "ag.tacos").transfers) == list(synthesized.transfers)
    monkeypatch.setattr(timing, "MAX_TAIL_ROUNDS", 0)
    monkeypatch.setattr(list_scheduling, "MAX_REORDERED_TRANSFERS", 0)  # the greedy alone,
    monkeypatch.setattr(attempts, "MAX_GREEDY_RESTARTS", 1)  # run once
    without = tacos.synthesize(topo, spec, seed=0, engine="fast")
    assert synthesized.collective_time_us < without.collective_time_us
