"""Where an All-Reduce's trees are rooted on a network of direct links (a mesh): by its
shape, not by where each chunk's owner sits (:mod:`.trees`, ``TreeLayout.central``).

A chunk rooted at a mesh corner waits for data from the far corner before its
broadcast can start, and its last results must cross the whole mesh back: the
pipeline fills and drains across the network. Rooted in the middle, both take
half as long (:func:`central_roots`). Where slow links join two halves of the
network (a heterogeneous mesh's slow columns between its middle rows), each half
can reduce a chunk at an NPU on the cut and the two sums swap across it, so the
chunk crosses the slow cut once each way (:func:`split_in_halves`,
:func:`crossing_roots`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx
import numpy as np
from networkx.algorithms.community import kernighan_lin_bisection

from tacos.synthesizer.message_routes import MessageRoutes
from tacos.topology import Topology

Placed = tuple[dict[int, int], dict[int, tuple[int, ...]]]
"""Per rank, the root of its chunks; per such root, the chunk's root in every group."""


def placed_roots(routes: MessageRoutes, groups: Sequence[Sequence[int]]) -> Placed | None:
    """One group: :func:`central_roots`; two halves: :func:`crossing_roots`."""
    if len(groups) == 1:
        root_of = central_roots(routes, groups[0])
        return root_of, {root: (root,) for root in root_of.values()}
    return crossing_roots(routes, groups)


def central_roots(routes: MessageRoutes, ranks: Sequence[int]) -> dict[int, int]:
    """Per rank, the nearest (from it, then by number) of the central ranks: those whose
    eccentricity (the longest time to or from another rank) is at most the median."""
    members = frozenset(ranks)
    away: dict[int, dict[int, float]] = {}
    eccentricity: dict[int, float] = {}
    for rank in ranks:
        to_others, from_others = routes.distances(rank, members)
        away[rank] = to_others
        eccentricity[rank] = max(*to_others.values(), *from_others.values())
    middle = float(np.median(list(eccentricity.values())))
    central = [rank for rank in sorted(ranks) if eccentricity[rank] <= middle]
    return {rank: min(central, key=lambda c: (away[rank][c], c)) for rank in ranks}


HALVING_SEEDS = 4
"""Kernighan-Lin bisections tried for :func:`split_in_halves` (it is seeded; the least cut kept)."""


def split_in_halves(topology: Topology, ranks: Sequence[int]) -> tuple[tuple[int, ...], ...] | None:
    """The ranks in two equal halves joined by the least bandwidth found, where only links
    slower than the network's fastest join them (a heterogeneous mesh's slow columns
    between its middle rows); else None.

    Each half then reduces a chunk at an NPU on the cut and the two sums swap across it
    (:func:`crossing_roots`): every chunk crosses the slow cut once each way, from the
    middle, where one tree over the whole network crossed it about 1.05 times and had its
    root a whole tree away from the far side (hetero 4x4 at 16 chunks per NPU, central
    roots 1.155 -> 1.149 of the throughput bound, at 4 1.119 -> 1.105 of the best bound)."""
    if len(ranks) < 4 or len(ranks) % 2:
        return None
    wanted = set(ranks)
    graph = nx.Graph()
    graph.add_nodes_from(ranks)
    for link in topology.links:
        if link.src in wanted and link.dst in wanted:
            was = graph.get_edge_data(link.src, link.dst, {"weight": 0.0})["weight"]
            graph.add_edge(link.src, link.dst, weight=was + link.bandwidth_GBps)
    cuts = []
    for seed in range(HALVING_SEEDS):
        one, _ = kernighan_lin_bisection(graph, weight="weight", seed=seed)
        cuts.append((nx.cut_size(graph, one, weight="weight"), seed, frozenset(one)))
    _, _, one = min(cuts, key=lambda cut: cut[:2])
    fastest = max(topology.links[i].bandwidth_GBps for r in ranks for i in topology.out_links[r])
    crossing = [lk for lk in topology.links if lk.src in wanted and lk.dst in wanted
                and (lk.src in one) != (lk.dst in one)]  # fmt: skip
    if not crossing or max(lk.bandwidth_GBps for lk in crossing) >= fastest:
        return None
    return tuple(sorted((tuple(sorted(one)), tuple(sorted(wanted - one)))))


def crossing_roots(routes: MessageRoutes, groups: Sequence[Sequence[int]]) -> Placed | None:
    """Two halves of a network of direct links: per rank, the root of its chunks (the NPU of
    its half nearest it among those one message from the other half and back), and per
    such root, the roots of both halves (it, and the NPU of the other half nearest it
    there and back: the two swap sums); None when a half has no such NPU."""
    members = [frozenset(group) for group in groups]
    root_of: dict[int, int] = {}
    partners: dict[int, tuple[int, ...]] = {}
    for side, inside in enumerate(members):
        other = members[1 - side]
        across = {}
        for npu in sorted(inside):
            both_ways = [
                (us + routes.from_npu(peer)[npu][0], peer)
                for peer, (us, _) in routes.from_npu(npu).items()
                if peer in other and npu in routes.from_npu(peer)
            ]
            if both_ways:
                across[npu] = min(both_ways)[1]
        if not across:
            return None
        for rank in sorted(inside):
            away = routes.distances(rank, inside)[0]
            root = min(across, key=lambda npu: (away.get(npu, math.inf), npu))
            root_of[rank] = root
            partners[root] = (root, across[root]) if side == 0 else (across[root], root)
    return root_of, partners
