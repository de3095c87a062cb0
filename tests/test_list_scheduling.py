"""List scheduling of fixed transfers (tacos.synthesizer.list_scheduling)."""

from __future__ import annotations

import numpy as np

import tacos
from tacos.schedule import Transfer
from tacos.synthesizer.list_scheduling import Timeline

# Two links in a row, 0 -> 1 -> 2; on the first, two transfers are ready at once, and the
# one on the second link waits for the first of them (its chunk).
TOPOLOGY = tacos.Topology(3, (tacos.Link(0, 1, 50.0, 0.5), tacos.Link(1, 2, 25.0, 0.5)))
TRANSFERS = [
    Transfer(0, 0, 1, 0, 0.0, 0.0),
    Transfer(1, 0, 1, 0, 0.0, 0.0),
    Transfer(0, 1, 2, 1, 0.0, 0.0, deps=(0,)),
]
FAST, SLOW = (TOPOLOGY.links[i].transfer_time_us(2**20) for i in (0, 1))


def test_a_free_link_starts_its_ready_transfer_of_lowest_priority_first():
    times = Timeline(TOPOLOGY, TRANSFERS, 2**20).forward([1, 0, 2])
    assert times.start.tolist() == [FAST, 0.0, 2 * FAST]  # the dependant after its input
    assert times.end.tolist() == [2 * FAST, FAST, 2 * FAST + SLOW]
    assert times.finish_us == 2 * FAST + SLOW


def test_backwards_a_transfer_waits_for_what_depended_on_it():
    """On the reversed graph the last hop goes first, then the transfer it waited for."""
    times = Timeline(TOPOLOGY, TRANSFERS, 2**20).backward(np.array([0.0, 1.0, 2.0]))
    assert times.start.tolist() == [SLOW, 0.0, 0.0]
    assert times.end.tolist() == [SLOW + FAST, FAST, SLOW]
