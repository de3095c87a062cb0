"""Synthesize a collective algorithm for a topology: the TACOS entry point.

Example:
    >>> from tacos.topology import Topology
    >>> from tacos.collective import Collective, CollectiveKind
    >>> topo = Topology.ring(4)
    >>> spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 2**20)
    >>> schedule = synthesize(topo, spec, seed=0)
    >>> len(schedule.transfers), schedule.collective_time_us
    (12, 40.0625)
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule
from tacos.synthesizer.collectives import all_gather, all_reduce, reduce_scatter
from tacos.synthesizer.greedy import CHUNK_POLICIES, ChunkPolicy
from tacos.topology import Topology

SYNTHESIZER_NAME = "tacos-greedy"
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` with counts of (rank, chunk) deliveries."""

_BUILDERS = {
    CollectiveKind.ALL_GATHER: all_gather,
    CollectiveKind.REDUCE_SCATTER: reduce_scatter,
    CollectiveKind.ALL_REDUCE: all_reduce,
}
_PHASES = {
    CollectiveKind.ALL_GATHER: 1,
    CollectiveKind.REDUCE_SCATTER: 1,
    CollectiveKind.ALL_REDUCE: 2,
}


def synthesize(
    topology: Topology,
    collective: Collective,
    *,
    seed: int = 0,
    policy: ChunkPolicy = "rarest",
    progress: ProgressCallback | None = None,
) -> Schedule:
    """Run TACOS greedy link-chunk matching for ``collective`` on ``topology``.

    The same ``seed`` (and ``policy``, see :mod:`tacos.synthesizer.greedy`)
    always yields the same schedule. Raises
    :class:`~tacos.errors.TacosError` when a rank is not an NPU of the
    topology or the ranks cannot all reach each other.
    """
    if policy not in CHUNK_POLICIES:
        raise TacosError(f"unknown chunk policy {policy!r}: use one of {', '.join(CHUNK_POLICIES)}")
    for rank in collective.ranks:
        if not 0 <= rank < topology.num_npus:
            raise TacosError(
                f"rank {rank} is not an NPU of {topology.describe()}; "
                f"ranks must be in 0..{topology.num_npus - 1}"
            )
    if collective.kind.reduces and topology.num_switches:
        raise TacosError(
            f"{collective.kind} over switches is not supported yet: switches cannot reduce; "
            "use a topology without switch nodes"
        )
    topology.check_connected(collective.ranks)

    on_delivery = None
    if progress is not None:
        total = _PHASES[collective.kind] * (collective.num_ranks - 1) * collective.num_chunks
        done = 0

        def on_delivery(count: int) -> None:
            nonlocal done
            done += count
            progress(done, total)

    rng = random.Random(seed)
    transfers = _BUILDERS[collective.kind](topology, collective, rng, policy, on_delivery)
    meta = {"synthesizer": SYNTHESIZER_NAME, "seed": seed, "policy": policy}
    return Schedule(topology, collective, transfers, meta)


__all__ = ["CHUNK_POLICIES", "ChunkPolicy", "ProgressCallback", "synthesize"]
