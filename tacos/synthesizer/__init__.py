"""Synthesize a collective algorithm for a topology: the TACOS entry point.

Example:
    >>> from tacos.topology import Topology
    >>> from tacos.collective import Collective, CollectiveKind
    >>> topo = Topology.ring(4)
    >>> spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 2**20)
    >>> schedule = synthesize(topo, spec, seed=0)
    >>> len(schedule.transfers), schedule.collective_time_us
    (12, 40.0625)

Two engines make the same schedules: ``"reference"`` (:mod:`.greedy`, the
readable oracle) and ``"fast"`` (:mod:`.fast`, compiled, for thousands of
NPUs, with or without switches; every collective, for several tenants or a
subset of ranks too, in the default cost model). ``engine="auto"`` takes the
fast one for problems above :data:`AUTO_FAST_ABOVE` NPUs or chunks, where it
pays for loading the compiled code. ``tries=K`` synthesizes seeds
``seed .. seed+K-1`` (in parallel processes) and keeps the fastest schedule,
the lowest seed on ties.

With the ``"rarest"`` policy (``"random"`` stays the paper's greedy), two
steps follow the greedy:

* The greedy decides each link's next transfer when the link frees, so a
  link may send a chunk its receiver could have taken later while a chunk
  on the longest path waits. The greedy's transfers (which chunk crosses
  which link, after what) are kept and each NPU's links reordered by
  forward-backward list scheduling (:func:`.list_scheduling.improved`),
  kept when strictly faster; ``meta["reordered"]`` says so. On the rails
  cluster over two leaves at 16 chunks per GPU this takes All-Gather from
  1.091 to 1.033 of its bound, and htsim's 8-host tree at one chunk per NPU
  from 1.548 to 1.278. One tenant, no ``sends_in_flight``, at most
  :data:`.list_scheduling.MAX_REORDERED_TRANSFERS` transfers.
* An All-Reduce may instead come from :mod:`.trees` (meshes, clusters of two
  to four servers or leaves, more servers through each chunk's owner's
  server), and an All-Gather or Reduce-Scatter on a cluster's servers or
  leaves, when that is faster still;
  ``meta["construction"]`` says which (``"greedy"`` or ``"trees"``).

``algorithm`` picks what is built: ``"tacos"`` (the default of this function),
one of the classic algorithms of :mod:`tacos.classic` (``"ring"``,
``"hierarchical-ring"``, ``"tree"``, ``"direct"``, ``"halving-doubling"``), or
``"best"`` (the default of the command line): TACOS and every classic
algorithm that applies and could beat it, keeping the fastest (TACOS on ties).
A classic winner then has its NPUs' links reordered as TACOS's are, when that
is faster and verifies (``meta["reordered"]``; ``--algorithm <name>`` stays
the plain algorithm). A best schedule's ``meta`` names the winner
(``algorithm``) and the time of every candidate as built (``candidates_us``)
or why one was not (``candidates_skipped``).

Several tenants (collectives on disjoint ranks sharing the links) are built two
ways, and the one whose last tenant finishes first is kept
(``meta["tenants_synthesized"]``): together on one greedy timeline, and apart,
each by everything above (trees, and the classic algorithms for ``best``), then
replayed together (:mod:`.apart`), up to :data:`APART_MAX_DELIVERIES`.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from typing import Any, Literal

import numpy as np

from tacos.bounds import lower_bounds
from tacos.classic import ALGORITHMS as CLASSIC_ALGORITHMS
from tacos.classic import MAX_TRANSFERS, NEXT_TO_FAST_ENGINE, classic_schedule, compete
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.limits import MAX_TRIES
from tacos.schedule import Schedule, Transfer
from tacos.synthesizer.apart import replayed_together
from tacos.synthesizer.attempts import (
    Attempt,
    fastest_attempt,
    fastest_restart,
    finish_us,
    greedy_restarts,
    near_fractions,
    own_first_choices,
    restart_runs,
)
from tacos.synthesizer.collectives import Settings, Tenants, synthesize_transfers
from tacos.synthesizer.fast import FastSettings, fast_transfers, fast_unsupported
from tacos.synthesizer.greedy import CHUNK_POLICIES, ChunkPolicy
from tacos.synthesizer.list_scheduling import improved
from tacos.synthesizer.timing import as_transposed, played_backwards
from tacos.synthesizer.trees import FAR_FROM_BOUND, tree_collective, tree_layouts
from tacos.topology import Topology
from tacos.transfers import TransferTable
from tacos.verify import verify

SYNTHESIZER_NAME = "tacos-greedy"
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` with counts of (node, chunk) deliveries."""
Engine = Literal["auto", "reference", "fast"]
ENGINES: tuple[Engine, ...] = ("auto", "reference", "fast")
AUTO_FAST_ABOVE = 64
"""``engine="auto"`` uses the fast engine above this many NPUs or chunks."""
APART_MAX_DELIVERIES = 2_000_000
"""Tenants of more (rank, chunk) deliveries than this (:func:`_deliveries_at_most`) are built
together only: apart costs a second synthesis as long as the first, and at that size no
tenant gets trees or a classic algorithm, so the greedy apart gains next to nothing (two
1024-GPU halves of dgx:256x8 All-Reduce, 4.2 million: 158 s and 4.9 GB instead of 82 s
and 3.3 GB, for 6091.72 us instead of 6091.95). Two 512-host halves of fat-tree:16
All-Reduce (1.0 million) still gain 2% (21273.19 -> 20852.53 us; 31 -> 61 s)."""
MIRRORED_GATHER_MAX_DELIVERIES = 20_000
"""A Reduce-Scatter of more (rank, chunk) deliveries than this is not also built as the
mirror of an All-Gather on the network itself (:func:`_mirror_of_own_gather`): a second
greedy, mirrored and reordered in Python, costs more than the first (dgx:64x8 at one
chunk per GPU, 261,632: 3.5 -> 20.9 s for the same 1459.70 us; dgx:16x8 at one chunk,
16,256, 0.7 -> 2.0 s, the same time too)."""
ALGORITHM_CHOICES = ("tacos", *CLASSIC_ALGORITHMS, "best")
"""What ``algorithm=`` accepts: TACOS, a classic algorithm, or the fastest of them all."""


def synthesize(
    topology: Topology,
    collective: Collective,
    *,
    seed: int = 0,
    policy: ChunkPolicy = "rarest",
    sends_in_flight: int | None = None,
    progress: ProgressCallback | None = None,
    engine: Engine = "auto",
    tries: int = 1,
    algorithm: str = "tacos",
) -> Schedule:
    """Run TACOS greedy link-chunk matching for ``collective`` on ``topology``.

    The same ``seed`` (and ``policy``, see :mod:`tacos.synthesizer.greedy`)
    always yields the same schedule, whichever ``engine`` makes it.
    ``sends_in_flight=1`` makes every NPU send one message at a time (a
    one-port NPU, like ASTRA-sim's standalone workload route); the schedule
    records it and replays with it. ``tries`` > 1 keeps the best of that many
    seeds (see the module docs). ``algorithm`` builds a classic algorithm
    instead, or ``"best"`` the fastest of TACOS and the classic ones (see the
    module docs). Raises :class:`~tacos.errors.TacosError` when a rank is not an
    NPU of the topology or the ranks cannot all reach each other, when
    ``engine="fast"`` is asked for a problem it does not cover, or when a
    classic algorithm asked for does not apply.
    """
    (schedule,) = synthesize_tenants(
        topology,
        [collective],
        seed=seed,
        policy=policy,
        sends_in_flight=sends_in_flight,
        progress=progress,
        engine=engine,
        tries=tries,
        algorithm=algorithm,
    )
    return schedule


def synthesize_tenants(
    topology: Topology,
    collectives: Sequence[Collective],
    *,
    seed: int = 0,
    policy: ChunkPolicy = "rarest",
    sends_in_flight: int | None = None,
    progress: ProgressCallback | None = None,
    engine: Engine = "auto",
    tries: int = 1,
    algorithm: str = "tacos",
) -> list[Schedule]:
    """Synthesize several collectives of one kind on disjoint ranks, sharing the links.

    Returns one Schedule per collective; their times come from the joint
    timeline, so each shows what its tenant gets while the others run too.
    :func:`tacos.schedule.merge_tenants` joins them for a joint replay. A classic ``algorithm``
    takes one collective; with several, ``"best"`` races the classic algorithms for each
    tenant built apart (module docs).
    """
    if algorithm not in ALGORITHM_CHOICES:
        raise TacosError(
            f"unknown algorithm {algorithm!r}: use one of {', '.join(ALGORITHM_CHOICES)}"
        )
    if sends_in_flight is not None and sends_in_flight < 1:
        raise TacosError(f"sends in flight must be at least 1, got {sends_in_flight}")
    if algorithm in CLASSIC_ALGORITHMS:
        return [_classic(topology, collectives, algorithm, sends_in_flight)]
    apart = len(collectives) > 1 and _deliveries_at_most(collectives) <= APART_MAX_DELIVERIES
    both = _BothWays(progress) if apart and progress is not None else None
    schedules = _synthesize_tacos(
        topology, collectives, seed, policy, sends_in_flight,
        both.together if both else progress, engine, tries,
    )  # fmt: skip
    if len(schedules) > 1:
        if apart:
            args = (seed, policy, engine, tries, algorithm, sends_in_flight, both)
            return _sooner_apart(schedules, *args)
        return _built(schedules, "together", {"together": _last_end_us(schedules)}, algorithm)
    if algorithm == "best":
        _take_the_best(schedules, sends_in_flight)
    return schedules


def _sooner_apart(
    together: list[Schedule],
    seed: int,
    policy: ChunkPolicy,
    engine: Engine,
    tries: int,
    algorithm: str,
    sends_in_flight: int | None,
    progress: _BothWays | None,
) -> list[Schedule]:
    """The tenants synthesized one at a time and replayed together (:mod:`.apart`; each with
    its own trees and, for ``best``, classic algorithms) when that finishes sooner than
    the shared timeline ``together``. ``meta["tenants_synthesized"]`` says which, and
    ``meta["tenants_us"]`` the time of both (the last tenant's end; ``None`` where the
    tenants apart no longer verified together)."""
    topology, alone = together[0].topology, []
    for schedule in together:
        alone += synthesize_tenants(
            topology, [schedule.collective], seed=seed, policy=policy,
            sends_in_flight=sends_in_flight, engine=engine, tries=tries, algorithm=algorithm,
            progress=progress.apart if progress else None,
        )  # fmt: skip
        if progress:
            progress.next_tenant()
    apart = replayed_together(topology, alone, sends_in_flight)
    times_us = {
        "together": _last_end_us(together),
        "apart": None if apart is None else _last_end_us(apart),
    }
    if apart is not None and _last_end_us(apart) < _last_end_us(together):
        return _built(apart, "apart", times_us, algorithm)
    return _built(together, "together", times_us, algorithm)


def _built(
    schedules: list[Schedule], how: str, times_us: dict[str, float | None], algorithm: str
) -> list[Schedule]:
    """``schedules``, each told which tenant it is and how the tenants were built."""
    for group, schedule in enumerate(schedules):
        schedule.meta.update(
            tenant=group, tenants=len(schedules), tenants_synthesized=how, tenants_us=times_us
        )
        if algorithm == "best":
            schedule.meta.setdefault("algorithm", "tacos")
    return schedules


def _last_end_us(schedules: Sequence[Schedule]) -> float:
    return max(schedule.collective_time_us for schedule in schedules)


def _deliveries_at_most(collectives: Sequence[Collective]) -> int:
    """(rank, chunk) deliveries of an All-Gather of the same chunks, twice for All-Reduce: the
    size of the tenants' synthesis, counted without building anything."""
    phases = 2 if collectives[0].kind is CollectiveKind.ALL_REDUCE else 1
    return phases * sum((len(spec.ranks) - 1) * spec.num_chunks for spec in collectives)


class _BothWays:
    """One progress report over both ways tenants are built: the shared timeline's
    deliveries, then each tenant's alone (as many in all), out of twice the first."""

    def __init__(self, progress: ProgressCallback) -> None:
        self.progress = progress
        self.total = self.done_before = self.done = 0

    def together(self, done: int, total: int) -> None:
        self.total = total
        self.progress(done, 2 * total)

    def apart(self, done: int, _: int) -> None:
        self.done = done
        self.progress(self.total + self.done_before + done, 2 * self.total)

    def next_tenant(self) -> None:
        self.done_before += self.done
        self.done = 0


def _classic(
    topology: Topology,
    collectives: Sequence[Collective],
    algorithm: str,
    sends_in_flight: int | None,
) -> Schedule:
    if len(collectives) != 1:
        raise TacosError(
            f"{algorithm} builds one collective; tenants sharing the network (--groups) "
            "need --algorithm tacos or best"
        )
    return classic_schedule(topology, collectives[0], algorithm, sends_in_flight=sends_in_flight)


def _take_the_best(schedules: list[Schedule], sends_in_flight: int | None) -> None:
    """Replace a lone TACOS schedule by a faster classic one; record every candidate."""
    (tacos_schedule,) = schedules
    tacos_us = tacos_schedule.collective_time_us
    outcome = compete(
        tacos_schedule.topology,
        tacos_schedule.collective,
        tacos_us,
        sends_in_flight=sends_in_flight,
        max_transfers=_classic_budget(tacos_schedule),
    )
    winner = tacos_schedule if outcome.best is None else _reordered(outcome.best, sends_in_flight)
    winner.meta.update(
        algorithm=winner.meta.get("algorithm", "tacos"),
        candidates_us={"tacos": tacos_us, **outcome.times_us},
        candidates_skipped=outcome.skipped,
    )
    schedules[0] = winner


def _reordered(classic: Schedule, sends_in_flight: int | None) -> Schedule:
    """The classic winner of ``best`` with its NPUs' links reordered as TACOS's are, when
    that is faster and the result verifies (``meta["reordered"]``); else as built.

    The user asked for the fastest schedule, not for the plain algorithm (which
    ``--algorithm <name>`` still gives). A classic plan's correctness could rest on
    an order its dependencies do not state, so the reordered one is verified. On six
    DGX-like servers of four GPUs, All-Reduce at four chunks per GPU: hierarchical
    ring 1.049 -> 1.037 of the best bound (on a heterogeneous 4x4 mesh at one chunk
    per NPU 1.180 -> 1.118, as fast as TACOS's trees).
    """
    kept = replace(classic, meta={**classic.meta, "reordered": False})
    if sends_in_flight is not None:  # the list scheduler has no port model
        return kept
    faster = improved(classic.topology, classic.transfers, classic.collective.chunk_bytes)
    if faster is None:
        return kept
    reordered = replace(classic, transfers=faster, meta={**classic.meta, "reordered": True})
    return reordered if verify(reordered).ok else kept


def _classic_budget(tacos_schedule: Schedule) -> int:
    """How many transfers a classic candidate may need before ``best`` skips it.

    The compiled engine makes big schedules far faster than the classic algorithms
    are built in Python, so next to it the budget is small. The reference engine
    spends more per transfer than the classic builder does, so next to it candidates
    of a few times its own transfer count cost less than TACOS took: a switched
    cluster, where TACOS is slow and the classic algorithms matter most, keeps them.
    """
    if tacos_schedule.meta.get("engine") == "fast":
        return NEXT_TO_FAST_ENGINE
    return max(MAX_TRANSFERS, 4 * len(tacos_schedule.transfers))


def _synthesize_tacos(
    topology: Topology,
    collectives: Sequence[Collective],
    seed: int,
    policy: ChunkPolicy,
    sends_in_flight: int | None,
    progress: ProgressCallback | None,
    engine: Engine,
    tries: int,
) -> list[Schedule]:
    """The TACOS greedy for every tenant (the body of :func:`synthesize_tenants`)."""
    if policy not in CHUNK_POLICIES:
        raise TacosError(f"unknown chunk policy {policy!r}: use one of {', '.join(CHUNK_POLICIES)}")
    if not 1 <= tries <= MAX_TRIES:
        raise TacosError(f"--tries {tries}: use 1..{MAX_TRIES} (each try is a whole synthesis)")
    tenants = Tenants(tuple(collectives))
    for spec in tenants.specs:
        topology.check_ranks(spec.ranks)
    chosen = _choose_engine(engine, topology, tenants)
    total = _deliveries(topology, tenants) if progress is not None else 0
    options: dict[str, Any] = {"policy": policy, "sends_in_flight": sends_in_flight}
    if tries > 1:
        return _best_of(topology, tenants, seed, tries, chosen, options, total, progress)

    on_delivery = None
    if progress is not None:
        done = 0

        def on_delivery(count: int) -> None:
            nonlocal done
            done += count
            progress(done, total)

    transfers, construction, reordered = fastest_construction(
        topology, tenants, seed, policy, sends_in_flight, chosen, on_delivery
    )
    meta: dict[str, object] = {
        "synthesizer": SYNTHESIZER_NAME,
        "seed": seed,
        "policy": policy,
        "engine": chosen,
        "construction": construction,
        "reordered": reordered,
    }
    if sends_in_flight is not None:
        meta["sends_in_flight"] = sends_in_flight
    if len(tenants.specs) == 1:
        return [Schedule(topology, tenants.specs[0], transfers, meta)]
    # Each tenant's transfers, chunk ids its own (a transfer depends only on transfers of
    # its chunk, so on its tenant's).
    table = (
        transfers
        if isinstance(transfers, TransferTable)
        else TransferTable.from_transfers(transfers)
    )
    schedules = []
    for group, (spec, offset) in enumerate(zip(tenants.specs, tenants.offsets, strict=True)):
        ours = (table.chunk >= offset) & (table.chunk < offset + spec.num_chunks)
        mine = table.take(np.flatnonzero(ours))
        local = replace(mine, chunk=mine.chunk - offset)
        group_meta = {**meta, "tenant": group, "tenants": len(tenants.specs)}
        schedules.append(Schedule(topology, spec, local, group_meta))
    return schedules


def fastest_construction(
    topology: Topology,
    tenants: Tenants,
    seed: int,
    policy: ChunkPolicy,
    sends_in_flight: int | None,
    engine: Engine,
    on_delivery: Callable[[int], None] | None = None,
) -> tuple[Sequence[Transfer] | TransferTable, str, bool]:
    """The greedy's fastest attempt (:func:`fastest_greedy`), or the first of the trees
    (:mod:`.trees`) that is faster still, or for a Reduce-Scatter the greedy's mirror of
    the All-Gather on the network itself (:func:`_mirror_of_own_gather`) if faster than
    both: the transfers, which it is (``"greedy"`` or ``"trees"``,
    ``meta["construction"]``), and whether the greedy's links were reordered.
    :mod:`tacos.stream` writes what this gives for a small All-Gather."""
    transfers, reordered = fastest_greedy(
        topology, tenants, random.Random(seed), policy, sends_in_flight, engine, on_delivery
    )
    construction = "greedy"
    greedy_us = finish_us(transfers)

    @functools.cache
    def far_from_bound() -> bool:
        """Whether the greedy ends more than :data:`.trees.FAR_FROM_BOUND` above the best
        lower bound (computed only when a larger tree plan asks)."""
        return greedy_us > FAR_FROM_BOUND * lower_bounds(topology, tenants.specs[0]).best_us

    if policy == "rarest":
        to_beat_us = greedy_us
        for layout in tree_layouts(topology, tenants.specs, sends_in_flight, far_from_bound):
            on_trees = tree_collective(
                topology, tenants.specs[0], layout, random.Random(seed), to_beat_us, to_beat_us
            )
            if on_trees is not None and finish_us(on_trees) < to_beat_us:
                transfers, construction, reordered = on_trees, "trees", False
                to_beat_us = finish_us(transfers)
    mirrored = _mirror_of_own_gather(topology, tenants, seed, policy, sends_in_flight, engine)
    if mirrored is not None and finish_us(mirrored[0]) < finish_us(transfers):
        (transfers, reordered), construction = mirrored, "greedy"
    return transfers, construction, reordered


def _mirror_of_own_gather(
    topology: Topology,
    tenants: Tenants,
    seed: int,
    policy: ChunkPolicy,
    sends_in_flight: int | None,
    engine: Engine,
) -> tuple[Sequence[Transfer], bool] | None:
    """A Reduce-Scatter as the mirror of the All-Gather the greedy builds on the topology
    itself, where every link has a twin the other way (:func:`.timing.as_transposed`),
    and whether its links were reordered (where that is faster); None elsewhere.

    The greedy builds a Reduce-Scatter on the transposed topology, which there is the
    same network with its links numbered otherwise, so the greedy breaks its ties
    otherwise: on a heterogeneous 4x4 mesh at one chunk per NPU the All-Gather met its
    bound (76.24 us) and the Reduce-Scatter did not (80.13 us). Up to
    :data:`MIRRORED_GATHER_MAX_DELIVERIES`, both are built and the faster kept.
    """
    if len(tenants.specs) != 1:
        return None
    (spec,) = tenants.specs
    if (
        spec.kind is not CollectiveKind.REDUCE_SCATTER
        or policy != "rarest"
        or sends_in_flight is not None
        or spec.num_chunks * (len(spec.ranks) - 1) > MIRRORED_GATHER_MAX_DELIVERIES
    ):
        return None
    links = as_transposed(topology)
    if links is None:
        return None
    gather = Tenants((replace(spec, kind=CollectiveKind.ALL_GATHER),))
    spread, _ = fastest_greedy(
        topology, gather, random.Random(seed), policy, sends_in_flight, engine
    )
    on_transposed = [replace(t, link=links[t.link]) for t in spread]
    mirrored = played_backwards(on_transposed, topology, spec.chunk_bytes)
    faster = improved(topology, mirrored, spec.chunk_bytes)
    return (mirrored, False) if faster is None else (faster, True)


def fastest_greedy(
    topology: Topology,
    tenants: Tenants,
    rng: random.Random,
    policy: ChunkPolicy,
    sends_in_flight: int | None,
    engine: Engine,
    on_delivery: Callable[[int], None] | None = None,
) -> tuple[Sequence[Transfer], bool]:
    """The greedy's fastest attempt and restart (:mod:`.attempts`) on ``engine`` ("fast"
    or "reference"), its links reordered when that is faster (module docs), and whether
    they were. Only the first attempt of the first run reports deliveries."""

    def build(attempt: Attempt, reports: bool) -> Sequence[Transfer]:
        delivery = on_delivery if reports else None
        if engine == "fast":
            fast = FastSettings(rng, policy, sends_in_flight, delivery, *attempt)
            return fast_transfers(topology, tenants, fast)
        settings = Settings(rng, policy, sends_in_flight, delivery, *attempt)
        return synthesize_transfers(topology, tenants, settings)

    # Reordered for one tenant (a joint reorder trades one tenant's time for
    # another's) and no port limit (the list scheduler has no port model).
    reorders = policy == "rarest" and len(tenants.specs) == 1 and sends_in_flight is None

    def at_nearness(
        near: float, fewest_first: bool, reports: bool
    ) -> tuple[Sequence[Transfer], bool]:
        """The faster own-chunks-first choice at ``near``, reordered when that is faster."""
        choices = [
            Attempt(own_first, near, fewest_first) for own_first in own_first_choices(topology)
        ]
        built = fastest_attempt(
            choices, rng, lambda attempt, first: build(attempt, reports and first), finish_us
        )
        faster = improved(topology, built, tenants.chunk_bytes) if reorders else None
        return (built, False) if faster is None else (faster, True)

    deliveries = _deliveries(topology, tenants)
    fractions = near_fractions(topology, deliveries)
    restarts = greedy_restarts(topology, deliveries)
    if policy != "rarest":
        fractions, restarts = fractions[:1], 1

    def finish(built: tuple[Sequence[Transfer], bool]) -> float:
        return finish_us(built[0])

    def fastest_near(fewest_first: bool, reports: bool) -> tuple[Sequence[Transfer], bool]:
        return fastest_attempt(
            fractions,
            rng,
            lambda near, first: at_nearness(near, fewest_first, reports and first),
            finish,
        )

    # Restarts stop at the bound: a single collective's, where there are restarts at all.
    bound_us = 0.0
    if restarts > 1 and len(tenants.specs) == 1:
        bound_us = lower_bounds(topology, tenants.specs[0]).best_us
    runs = restart_runs(topology, tenants.specs, restarts)
    return fastest_restart(runs, rng, fastest_near, finish, bound_us)


def _choose_engine(engine: str, topology: Topology, tenants: Tenants) -> Engine:
    """The engine to run: what was asked for, or for "auto" the fast one on big problems."""
    if engine not in ENGINES:
        raise TacosError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    reason = fast_unsupported(topology, tenants.specs)
    if engine == "fast" and reason is not None:
        raise TacosError(f"the fast engine cannot synthesize this: {reason}; use --engine auto")
    if engine == "auto":
        chunks = sum(spec.num_chunks for spec in tenants.specs)
        big = topology.num_npus > AUTO_FAST_ABOVE or chunks > AUTO_FAST_ABOVE
        return "fast" if reason is None and big else "reference"
    return "fast" if engine == "fast" else "reference"


def _deliveries(topology: Topology, tenants: Tenants) -> int:
    """How many (node, chunk) deliveries the greedy will report, over all its phases."""
    phases = 2 if tenants.kind is CollectiveKind.ALL_REDUCE else 1
    if tenants.kind is CollectiveKind.REDUCE:
        mirror = tenants.as_kind(CollectiveKind.BROADCAST)
    elif tenants.kind.reduces:
        mirror = tenants.as_kind(CollectiveKind.ALL_GATHER)
    else:
        mirror = tenants
    if mirror.kind is CollectiveKind.ALL_GATHER:  # each rank wants its tenant's chunks not its own
        return _deliveries_at_most(tenants.specs)
    sources = mirror.sources()
    return phases * sum(w.bit_count() for w in mirror.wants(topology.num_nodes, sources))


def _best_of(
    topology: Topology,
    tenants: Tenants,
    seed: int,
    tries: int,
    engine: Engine,
    options: dict[str, Any],
    total: int,
    progress: ProgressCallback | None,
) -> list[Schedule]:
    """Synthesize seeds ``seed .. seed + tries - 1`` in worker processes; keep the fastest.

    Only the best schedule so far is kept, so memory stays at two schedules.
    Progress counts each finished try's deliveries.
    """
    jobs = [(topology, tenants.specs, s, engine, options) for s in range(seed, seed + tries)]
    best: list[Schedule] = []
    workers = min(tries, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        for done, schedules in enumerate(pool.map(_one_try, jobs), start=1):
            time = max(s.collective_time_us for s in schedules)
            if not best or time < max(s.collective_time_us for s in best):
                best = schedules
            if progress is not None:
                progress(done * total, tries * total)
    for schedule in best:
        schedule.meta.update(tries=tries, first_seed=seed)
    return best


def _one_try(job: tuple[Topology, tuple[Collective, ...], int, Engine, dict[str, Any]]) -> Any:
    """One seed of :func:`_best_of`, in a worker process."""
    topology, specs, seed, engine, options = job
    return synthesize_tenants(topology, list(specs), seed=seed, engine=engine, **options)


__all__ = [
    "ALGORITHM_CHOICES",
    "AUTO_FAST_ABOVE",
    "CHUNK_POLICIES",
    "ENGINES",
    "ChunkPolicy",
    "Engine",
    "ProgressCallback",
    "synthesize",
    "synthesize_tenants",
]
