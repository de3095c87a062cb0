"""Which NPU each All-Reduce chunk is reduced into, and gathered from.

All-Reduce is built as Reduce-Scatter into owners, then All-Gather from them,
and the result does not depend on who owns what, so ownership is ours to
choose. An NPU owning ``k`` of the ``n`` chunks must send ``n - k`` partial
sums while reducing and receive ``n - k`` chunks while gathering (and take in,
then give out, at least one message per chunk it owns); with equal shares,
NPUs with little bandwidth (mesh corners and edges, slow-linked NPUs) finish
both phases last. Shares are therefore levelled (:func:`level_shares`) with
each NPU's bandwidth the smaller of its in- and out-bandwidth: on a 2D mesh
the corners own more.

Example:
    >>> from tacos.collective import Collective, CollectiveKind
    >>> from tacos.topology import from_spec
    >>> spec = Collective(CollectiveKind.ALL_REDUCE, tuple(range(9)), 1, 2**20)
    >>> reduction_owners(from_spec("mesh2d:3x3"), spec).tolist()  # the corners own all
    [0, 0, 0, 2, 2, 6, 6, 8, 8]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tacos.collective import Collective
from tacos.topology import Topology

_BISECTION_STEPS = 100
"""Halvings of the level's interval: far below one chunk for any count."""


def reduction_owners(topology: Topology, spec: Collective) -> np.ndarray:
    """The owning NPU of each chunk of ``spec``, levelled, in contiguous blocks in rank order.

    NPUs of equal bandwidth own ``chunks_per_rank`` each, as the collective
    itself lays chunks out, so uniform networks keep that layout.
    """
    bandwidth = [
        min(
            sum(topology.links[i].bandwidth_GBps for i in topology.in_links[rank]),
            sum(topology.links[i].bandwidth_GBps for i in topology.out_links[rank]),
        )
        for rank in spec.ranks
    ]
    shares = level_shares(spec.num_chunks, bandwidth)
    return np.repeat(np.asarray(spec.ranks, np.int64), shares)


def collective_owners(spec: Collective) -> np.ndarray:
    """The owning NPU of each chunk as the collective lays chunks out (``chunks_per_rank`` each)."""
    return np.repeat(np.asarray(spec.ranks, np.int64), spec.chunks_per_rank)


def owned_chunks(spec: Collective, ranks: np.ndarray, places: np.ndarray) -> np.ndarray:
    """The ``places[i]``-th chunk ``ranks[i]`` owns as the collective lays chunks out
    (:func:`collective_owners`: each rank's ``chunks_per_rank`` chunks, in rank order)."""
    order = np.argsort(spec.ranks, kind="stable")
    position = order[np.searchsorted(np.asarray(spec.ranks)[order], ranks)]
    return position * spec.chunks_per_rank + places


def owner_layouts(topology: Topology, specs: Sequence[Collective]) -> list[list[np.ndarray]]:
    """The layouts worth synthesizing, each the owners of every spec's chunks: levelled
    first, the collective's own layout too where it differs.

    Levelling is the better bet (up to 1.4x faster All-Reduce on meshes), but with
    one chunk per NPU on uneven networks its rounding can cost a few percent; both
    layouts are valid, so the engines build both and keep the faster
    (:func:`~tacos.synthesizer.attempts.fastest_attempt`).
    """
    levelled = [reduction_owners(topology, spec) for spec in specs]
    own = [collective_owners(spec) for spec in specs]
    if all(np.array_equal(a, b) for a, b in zip(levelled, own, strict=True)):
        return [levelled]
    return [levelled, own]


def level_shares(total: int, bandwidth: Sequence[float]) -> list[int]:
    """Integer shares ``k_i`` summing to ``total`` that keep both phases level.

    While reducing, NPU ``i`` sends ``total - k_i`` partial sums and receives at
    least one per chunk it owns; while gathering, the reverse. Each phase takes
    at least ``max(total - k_i, k_i) / bandwidth_i``: the smallest level ``L``
    with ``total - L * b_i <= k_i <= L * b_i`` for every NPU is found by
    bisection, each NPU gets its lower end, and what is left of ``total`` is
    shared in proportion to the room up to the upper ends.

    >>> level_shares(10, [1.0, 1.0])
    [5, 5]
    >>> level_shares(12, [1.0, 4.0, 4.0])  # the slow NPU keeps more, but not all
    [6, 3, 3]
    """
    if len(set(bandwidth)) == 1 and total % len(bandwidth) == 0:
        return [total // len(bandwidth)] * len(bandwidth)

    def ends(level: float) -> tuple[list[float], list[float]]:
        lower = [max(0.0, total - level * b) for b in bandwidth]
        upper = [min(float(total), level * b) for b in bandwidth]
        return lower, upper

    def feasible(level: float) -> bool:
        lower, upper = ends(level)
        fits = all(lo <= up for lo, up in zip(lower, upper, strict=True))
        return fits and sum(lower) <= total <= sum(upper)

    low, high = 0.0, total / min(bandwidth)
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        low, high = (low, middle) if feasible(middle) else (middle, high)
    lower, upper = ends(high)
    room = [up - lo for lo, up in zip(lower, upper, strict=True)]
    left = (total - sum(lower)) / sum(room) if sum(room) else 0.0
    exact = [lo + left * r for lo, r in zip(lower, room, strict=True)]
    counts = [int(x) for x in exact]
    largest_remainder_first = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
    for i in largest_remainder_first[: total - sum(counts)]:
        counts[i] += 1
    return counts
