"""Several valid ways to synthesize one collective: build each, keep the fastest.

Some choices of the greedy win on some networks and lose on others, by a few
percent either way, and no rule read off the topology picks the winner
reliably: which NPU owns each All-Reduce chunk (:mod:`.ownership`); whether
a host with one uplink sends its own chunks first (a fat tree's hosts:
Reduce-Scatter at 16 chunks per NPU went from 1.160 to 1.087 of the
throughput bound on htsim's 8-host tree, but All-Gather on ns-3's
oversubscribed 128-host tree from 1.129 to 1.162, where a host's uplink then
serves its own chunks before relaying the ones that crossed the spine); and
which nodes count as nearer to a receiver than a path through switches (a
chunk crosses such a path only when none of them has it). All nodes nearer
make a chunk enter each server or pod once; only those nearer than half the
path let an idle NIC send straight to a far server rather than wait for a
nearer server to relay (at one chunk per NPU, All-Gather on htsim's tree 1.278
-> 1.096 of the best bound, on rails over two leaves 1.512 -> 1.343; at four
chunks both lose 3-6%). Every attempt gives a valid schedule, so the engines
build each one and keep the first of the fastest; a seed still gives one
schedule.

The greedy's random tie-breaks matter too, most on small networks of direct
links (a heterogeneous 4x4 mesh's All-Gather at four chunks per NPU took 260.41
to 271.17 us over 20 seeds, 1.008 to 1.050 of its bound, where the
hierarchical ring meets it), and there a whole greedy takes milliseconds. So
on networks without switches the greedy runs again from further seeds drawn
from the first (:func:`greedy_restarts`, :func:`fastest_restart`), the first
run being the one a single run gives, until one meets the collective's lower
bound. The first two runs then go again matching free links fewest sendable
chunks first instead of in the shuffled order (:func:`restart_runs`,
:mod:`.greedy`): torus2d:3x3 at one chunk per NPU, 1.500 of the bound at every
seed for All-Gather and Reduce-Scatter and 1.250-1.500 for All-Reduce, then
meets it; as the rule for every run it lost elsewhere (the heterogeneous 4x4
mesh's All-Gather at one chunk per NPU 1.081 -> 1.145 of its bound).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Transfer
from tacos.synthesizer.routes import one_uplink_hosts
from tacos.topology import Topology
from tacos.transfers import TransferTable

NEAR_FRACTIONS = (1.0, 0.5)
"""Of a path's time, how near a node must be to its receiver to keep the path from
carrying a chunk the node has (module docs)."""
MAX_NEAR_ATTEMPT_DELIVERIES = 200_000
"""Larger problems try all nearer nodes only: each near fraction is a whole synthesis
and a reorder (at 4 chunks per NPU and more, half the path never won in the cluster
suite; a 512-GPU All-Gather at one chunk per GPU, 261,632 deliveries, stays near
4 s)."""

GREEDY_RESTART_DELIVERIES = 20_000
"""Deliveries all the greedy's restarts may make together (:func:`greedy_restarts`): on
the quality suite's meshes, tori and hypercubes at one and four chunks per NPU this
found every gain that a budget ten times larger found (torus2d:4x4 All-Gather at one
chunk 1.083 -> 1.000 of the bound; fully-connected:8 at four 1.083 -> 1.000; the
heterogeneous 4x4 mesh 1.081 -> 1.000 at one and 1.029 -> 1.008 at four)."""
MAX_GREEDY_RESTARTS = 8
"""Runs of the greedy at most, the first included: every gain above came within four
(seed 0) or eight (seeds 1, 2); sixteen doubled the test suite's small syntheses
(mesh2d:4x4 All-Reduce at two chunks per NPU: 0.24 s once, 1.9 s sixteen times)."""
FEWEST_FIRST_RUNS = 2
"""Restarts run again matching free links fewest first (:func:`restart_runs`)."""
_FEWEST_FIRST_KINDS = (
    CollectiveKind.ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER,
    CollectiveKind.ALL_REDUCE,
)


class Attempt(NamedTuple):
    """One way to run the greedy (module docs)."""

    own_first: bool
    near_fraction: float
    fewest_first: bool = False


def own_first_choices(topology: Topology) -> tuple[bool, ...]:
    """Whether hosts with one uplink send their own chunks first: both, where there are
    such hosts."""
    return (True, False) if any(one_uplink_hosts(topology)) else (True,)


def near_fractions(topology: Topology, deliveries: int) -> tuple[float, ...]:
    """The near fractions worth trying for a greedy of ``deliveries`` on ``topology``.

    Not on a view of a network (a subset's, or the survivors' of failures, which
    record ``original_ids``): there the "switches" may be NPUs a simulator routes
    through by a shorter way than the view's (ring:8 seen by NPUs 0-3: 0 -> 3 is
    three hops in ASTRA-sim, five through 4-7 here), and the far sends half the
    path allows would not replay at the time predicted."""
    switched = topology.num_switches > 0 and not topology.original_ids
    if switched and deliveries <= MAX_NEAR_ATTEMPT_DELIVERIES:
        return NEAR_FRACTIONS
    return NEAR_FRACTIONS[:1]


Choice = TypeVar("Choice")
Built = TypeVar("Built")
"""What an engine builds for one choice (a transfer list or a transfer table)."""


def fastest_attempt(
    choices: Sequence[Choice],
    rng: random.Random,
    build: Callable[[Choice, bool], Built],
    finish_us: Callable[[Built], float],
    bound_us: float = 0.0,
) -> Built:
    """``build(choice, reports_progress)`` for every choice, each from the same random
    state and only the first reporting progress, stopping once one finishes within
    ``bound_us`` (a lower bound: nothing can be faster); the first of the fastest."""
    state = rng.getstate()
    best: Built | None = None
    best_us = math.inf
    for attempt, choice in enumerate(choices):
        rng.setstate(state)
        built = build(choice, attempt == 0)
        if finish_us(built) < best_us:
            best, best_us = built, finish_us(built)
        if best_us <= bound_us * (1 + 1e-9):
            break
    assert best is not None, "there is at least one choice"
    return best


def greedy_restarts(topology: Topology, deliveries: int) -> int:
    """How many times to run the greedy, from different seeds (module docs): on networks
    without switches as many as :data:`GREEDY_RESTART_DELIVERIES` allows, up to
    :data:`MAX_GREEDY_RESTARTS`; once on switched ones (where the cluster suite gained
    0.2% at one point for ten times the synthesis time, the trees deciding elsewhere)."""
    if topology.num_switches:
        return 1
    return max(1, min(MAX_GREEDY_RESTARTS, GREEDY_RESTART_DELIVERIES // max(deliveries, 1)))


def restart_runs(
    topology: Topology, specs: Sequence[Collective], restarts: int
) -> list[tuple[int, bool]]:
    """The greedy's runs as (restart, whether it matches free links fewest sendable
    chunks first, :mod:`.greedy`): every restart in the shuffled order, then, where
    there are restarts at all, the first :data:`FEWEST_FIRST_RUNS` of them (fewer than
    ``restarts``) again fewest first where that may run: networks without switches,
    one All-Gather, Reduce-Scatter or All-Reduce over every NPU, which every engine
    spreads with every NPU wanting every chunk."""
    runs = [(restart, False) for restart in range(restarts)]
    (spec, *others) = specs
    every_npu = len(spec.ranks) == topology.num_npus
    if topology.num_switches or others or not every_npu or spec.kind not in _FEWEST_FIRST_KINDS:
        return runs
    return runs + [(restart, True) for restart in range(min(restarts - 1, FEWEST_FIRST_RUNS))]


def fastest_restart(
    runs: Sequence[tuple[int, Choice]],
    rng: random.Random,
    build: Callable[[Choice, bool], Built],
    finish_us: Callable[[Built], float],
    bound_us: float = 0.0,
) -> Built:
    """:func:`fastest_attempt` over ``runs`` of ``build(choice, reports_progress)``, each
    ``(restart, choice)``: restart 0 from ``rng`` as it is, each other from ``rng``
    reseeded by a number drawn from that same state plus the restart's index."""
    drawn = random.Random()
    drawn.setstate(rng.getstate())
    first_seed = drawn.getrandbits(64)

    def run(restart_and_choice: tuple[int, Choice], reports: bool) -> Built:
        restart, choice = restart_and_choice
        if restart:
            rng.seed(first_seed + restart)
        return build(choice, reports)

    return fastest_attempt(runs, rng, run, finish_us, bound_us)


def finish_us(transfers: Sequence[Transfer]) -> float:
    """When the last of ``transfers`` (a list, or an engine's table) ends: what
    :func:`fastest_attempt` compares."""
    if isinstance(transfers, TransferTable):
        return float(transfers.end.max(initial=0.0))
    return max((t.end for t in transfers), default=0.0)
