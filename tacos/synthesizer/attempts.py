"""Several valid ways to synthesize one collective: build each, keep the fastest.

Some choices of the greedy win on some networks and lose on others, by a few
percent either way, and no rule read off the topology picks the winner
reliably: which NPU owns each All-Reduce chunk (:mod:`.ownership`), and whether
a host with one uplink sends its own chunks first (a fat tree's hosts:
Reduce-Scatter at 16 chunks per NPU went from 1.160 to 1.087 of the
throughput bound on htsim's 8-host tree, but All-Gather on ns-3's
oversubscribed 128-host tree from 1.129 to 1.162, where a host's uplink then
serves its own chunks before relaying the ones that crossed the spine). Every
attempt gives a valid schedule, so the engines build each one and keep the
first of the fastest; a seed still gives one schedule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from tacos.schedule import Transfer
from tacos.transfers import TransferTable

Choice = TypeVar("Choice")
Built = TypeVar("Built")
"""What an engine builds for one choice (a transfer list or a transfer table)."""


def fastest_attempt(
    choices: Sequence[Choice],
    rng: random.Random,
    build: Callable[[Choice, bool], Built],
    finish_us: Callable[[Built], float],
) -> Built:
    """``build(choice, reports_progress)`` for every choice, each from the same random
    state and only the first reporting progress; the first of the fastest."""
    state = rng.getstate()
    best: Built | None = None
    best_us = math.inf
    for attempt, choice in enumerate(choices):
        rng.setstate(state)
        built = build(choice, attempt == 0)
        if finish_us(built) < best_us:
            best, best_us = built, finish_us(built)
    assert best is not None, "there is at least one choice"
    return best


def finish_us(transfers: Sequence[Transfer]) -> float:
    """When the last of ``transfers`` (a list, or an engine's table) ends: what
    :func:`fastest_attempt` compares."""
    if isinstance(transfers, TransferTable):
        return float(transfers.end.max(initial=0.0))
    return max((t.end for t in transfers), default=0.0)
