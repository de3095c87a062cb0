"""Classic collective algorithms (NCCL-style) as Schedules on any topology.

``ring``, ``hierarchical-ring``, ``tree`` (double binary tree),
``direct`` and ``halving-doubling`` are built in the same IR as TACOS
schedules: per-hop transfers over network paths (switch hops are unicast
chains), with causal dependencies, ordered by a first-come-first-served list
scheduler and timed by the replay engine, so they verify with
:func:`tacos.verify` and ``tacos.simulate`` reproduces their time exactly.
:mod:`.algorithms` says what each algorithm does and where it applies;
:mod:`.build` how plans become transfers; :mod:`.network` how paths, ring
orders and node groups are found.

Example:
    >>> import tacos
    >>> from tacos.classic import classic_schedule
    >>> topo = tacos.from_spec("ring:8")
    >>> spec = tacos.Collective(tacos.CollectiveKind.ALL_GATHER, tuple(topo.npus))
    >>> ring = classic_schedule(topo, spec, "ring", variant="unidirectional")
    >>> ring.collective_time_us == 7 * topo.links[0].transfer_time_us(spec.chunk_bytes)
    True
    >>> tacos.verify(ring).ok
    True

:func:`compete` builds every algorithm that applies and could beat a given
time; ``tacos.synthesize(..., algorithm="best")`` uses it against TACOS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tacos.bounds import lower_bounds
from tacos.classic.algorithms import ALGORITHMS, SUPPORTED, NotApplicable, Recipe, recipes
from tacos.classic.build import CLASSIC_SYNTHESIZER, Expansion, Nets, list_schedules, to_schedule
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule
from tacos.topology import Topology
from tacos.transfers import TransferTable

CLASSIC_ALGORITHMS = ALGORITHMS
"""The names ``tacos.synthesize(algorithm=...)`` accepts besides "tacos" and "best"."""
MAX_TRANSFERS = 1_000_000
"""``compete`` skips algorithms that need more transfers than this: building costs a few
microseconds per transfer (per candidate), in Python."""
NEXT_TO_FAST_ENGINE = 600_000
"""The limit ``tacos.synthesize(algorithm="best")`` uses when TACOS ran on its compiled
engine, which synthesizes such problems in a fraction of that time (compared, like
:data:`MAX_TRANSFERS`, with a lower estimate of an algorithm's transfers). It lets in the
classic algorithms that beat TACOS on 128-NPU clusters at 4 and 16 chunks per NPU (ring
on fat-tree:8 at 16 chunks: All-Gather 1.028 of the throughput bound against TACOS's
1.034, at least 260,096 transfers, All-Reduce 520,192; halving-doubling on dgx:16x8) and
on the 512-GPU DGX-like All-Gather at one chunk per GPU (523,264; halving-doubling,
reordered, 1.153 against 1.194). ``best`` then takes 5-16 s there, TACOS alone 2-5 s."""


def classic_schedule(
    topology: Topology,
    collective: Collective,
    algorithm: str,
    *,
    variant: str | None = None,
    sends_in_flight: int | None = None,
) -> Schedule:
    """``algorithm`` for ``collective`` on ``topology``: its fastest variant, or ``variant``.

    ``sends_in_flight`` times it for NPUs with that many send ports (as
    :func:`tacos.synthesize` does). Raises :class:`NotApplicable` (a TacosError)
    with a one-line reason when the algorithm does not apply (e.g.
    halving-doubling with 6 ranks).
    """
    topology.check_ranks(collective.ranks)
    nets = Nets(topology, collective.chunk_bytes)
    options = every = recipes(nets.forward, collective, algorithm)
    if variant is not None:
        options = [r for r in every if r.variant == variant]
        if not options:
            known = ", ".join(r.variant for r in every)
            raise TacosError(f"{algorithm} has no variant {variant!r}: use one of {known}")
    outcome = _race(collective, nets, options, None, sends_in_flight)
    assert outcome.best is not None
    if len(options) > 1:
        outcome.best.meta["variants_us"] = outcome.times_us
        if outcome.skipped:
            outcome.best.meta["variants_skipped"] = outcome.skipped
    return outcome.best


@dataclass
class Outcome:
    """What :func:`compete` built: the fastest schedule (if any beat the incumbent) and why
    each other candidate was or was not built."""

    best: Schedule | None = None
    times_us: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def compete(
    topology: Topology,
    collective: Collective,
    incumbent_us: float,
    *,
    algorithms: Sequence[str] = ALGORITHMS,
    max_transfers: int = MAX_TRANSFERS,
    sends_in_flight: int | None = None,
) -> Outcome:
    """Build every applicable algorithm that could finish before ``incumbent_us``.

    Nothing is built when the incumbent meets :func:`tacos.bounds.lower_bounds`.
    An algorithm is skipped (with the reason recorded) when it does not apply,
    when it needs more than ``max_transfers`` transfers, or when a lower
    estimate of its time (busiest link, longest dependency chain) shows it
    cannot beat the incumbent or a faster candidate built before it.
    ``best`` is the fastest built schedule that is strictly faster than the
    incumbent, else None.
    """
    topology.check_ranks(collective.ranks)
    outcome = Outcome()
    bound = lower_bounds(topology, collective).best_us
    if incumbent_us <= bound * (1 + 1e-9):
        outcome.skipped["classic"] = (
            f"cannot beat {incumbent_us:.6g} us, which meets the lower bound {bound:.6g} us"
        )
        return outcome
    nets = Nets(topology, collective.chunk_bytes)
    options: list[Recipe] = []
    needed = _least_transfers(topology, collective)
    for algorithm in algorithms:
        if needed > max_transfers and collective.kind in SUPPORTED[algorithm]:
            outcome.skipped[algorithm] = (
                f"needs at least {needed} transfers (more than {max_transfers})"
            )
            continue
        try:
            options.extend(recipes(nets.forward, collective, algorithm))
        except NotApplicable as why:
            outcome.skipped[algorithm] = str(why)
    if options:
        raced = _race(collective, nets, options, incumbent_us, sends_in_flight)
        outcome.best = raced.best
        outcome.times_us.update(raced.times_us)
        outcome.skipped.update(raced.skipped)
    return outcome


def _race(
    collective: Collective,
    nets: Nets,
    options: Sequence[Recipe],
    incumbent: float | None,
    sends_in_flight: int | None = None,
) -> Outcome:
    """Expand every option, then time them from the most promising on, pruning the hopeless;
    only the winner becomes a Schedule (re-timed by the replay)."""
    outcome = Outcome()
    exact = sends_in_flight is None and nets.topology.cost.is_default
    built: list[tuple[float, int, Recipe, Expansion]] = []
    for position, recipe in enumerate(options):
        expansion = Expansion(collective, recipe, nets)
        built.append((expansion.lower_estimate(), position, recipe, expansion))
    built.sort(key=lambda item: (item[0], item[1]))
    best_us = incumbent
    winner: tuple[str, Recipe, TransferTable, np.ndarray] | None = None
    for estimate, _, recipe, expansion in built:
        label = _label(recipe, options)
        if best_us is not None and estimate >= best_us:
            outcome.skipped[label] = (
                f"cannot beat {best_us:.6g} us (needs at least {estimate:.6g} us on its "
                "busiest link or longest chain)"
            )
            continue
        table = expansion.block().table(nets.topology)
        for listed in list_schedules(table, nets.topology, collective.chunk_bytes):
            elapsed = listed.finish_us
            if not exact:  # ports, or a link model the list schedule only estimates
                elapsed = to_schedule(
                    nets.topology, collective, table, listed.start, {}, sends_in_flight
                ).collective_time_us
            outcome.times_us[label] = min(elapsed, outcome.times_us.get(label, math.inf))
            if best_us is None or elapsed < best_us:
                best_us = elapsed
                winner = (label, recipe, table, listed.start)
    if winner is not None:
        label, recipe, table, start = winner
        meta: dict[str, object] = {"algorithm": recipe.algorithm, "variant": recipe.variant}
        meta.update(recipe.notes)
        schedule = to_schedule(nets.topology, collective, table, start, meta, sends_in_flight)
        outcome.times_us[label] = schedule.collective_time_us  # the replay's, to the last bit
        if incumbent is None or schedule.collective_time_us < incumbent:
            outcome.best = schedule
    return outcome


def _label(recipe: Recipe, options: Sequence[Recipe]) -> str:
    """``ring/bidirectional`` when the algorithm has several variants, else ``direct``."""
    variants = sum(1 for r in options if r.algorithm == recipe.algorithm)
    return f"{recipe.algorithm}/{recipe.variant}" if variants > 1 else recipe.algorithm


def _least_transfers(topology: Topology, collective: Collective) -> int:
    """A lower bound on the transfers of any classic algorithm for ``collective``."""
    kind, chunks, ranks = collective.kind, collective.num_chunks, collective.num_ranks
    if kind in (CollectiveKind.GATHER, CollectiveKind.SCATTER, CollectiveKind.ALL_TO_ALL):
        messages = chunks
    else:
        messages = chunks * (ranks - 1) * (2 if kind is CollectiveKind.ALL_REDUCE else 1)
    direct = any(not topology.is_switch(link.dst) for link in topology.links)
    return messages if direct else 2 * messages


__all__ = [
    "ALGORITHMS",
    "CLASSIC_ALGORITHMS",
    "CLASSIC_SYNTHESIZER",
    "MAX_TRANSFERS",
    "NEXT_TO_FAST_ENGINE",
    "SUPPORTED",
    "NotApplicable",
    "Outcome",
    "classic_schedule",
    "compete",
]
