"""The classic algorithms as *spreading plans*: how one chunk travels from where it starts.

A plan maps ``(origin, chunk)`` to logical messages ``(a, b)`` in causal order
(``a`` is the origin or an earlier ``b``). :mod:`tacos.classic.build` routes each
message over its network path and plays reductions as mirrored spreads, so an
algorithm is written once for All-Gather and Broadcast and serves
Reduce-Scatter, Reduce and All-Reduce too:

* ``ring`` -- the ranks as a cycle that follows the topology
  (:func:`~tacos.classic.network.ring_order`); ``unidirectional``: every chunk
  goes N-1 steps around it; ``bidirectional``: each chunk goes half way in each
  direction (both directions of every cable busy, half the pipeline depth).
* ``hierarchical-ring`` -- NCCL's multi-node ring: a ring among the ranks with
  the same local index (a rail) across nodes, then a ring inside every node
  (All-Gather; Reduce-Scatter mirrors it: inside the node first, then the rail).
* ``tree`` -- NCCL's double binary tree: two complementary binary trees over the
  ring order, half the chunks each; All-Reduce reduces each chunk up its tree
  and broadcasts it down.
* ``direct`` -- every chunk straight from its origin to every rank that needs it.
* ``halving-doubling`` -- recursive doubling (farthest partner first, so the
  largest exchanges are with the nearest partner); mirrored, recursive halving.
  Needs a power-of-two rank count.

Each algorithm applies to some collectives only; :func:`recipes` raises
:class:`NotApplicable` with a one-line reason otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tacos.classic.network import Network, node_groups, ring_order
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.topology import Topology

Message = tuple[int, int]
PlanFn = Callable[[int, int], list[Message]]
"""``plan(origin, chunk)``: the logical messages that spread ``chunk`` from ``origin``."""

ALGORITHMS = ("ring", "hierarchical-ring", "tree", "direct", "halving-doubling")
K = CollectiveKind
_SPREAD_AND_REDUCE = (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE, K.BROADCAST, K.REDUCE)
SUPPORTED: dict[str, tuple[CollectiveKind, ...]] = {
    "ring": _SPREAD_AND_REDUCE,
    "hierarchical-ring": (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE),
    "tree": (K.ALL_REDUCE, K.BROADCAST, K.REDUCE),
    "direct": tuple(CollectiveKind),
    "halving-doubling": _SPREAD_AND_REDUCE,
}


class NotApplicable(TacosError):
    """The algorithm does not apply to this collective on this topology."""


@dataclass(frozen=True)
class Recipe:
    """One buildable algorithm: its plan per phase network, and where All-Reduce reduces."""

    algorithm: str
    variant: str
    plan: Callable[[Network], PlanFn]
    hub: Callable[[object], int] | None = None
    """All-Reduce: the rank a chunk of this class is reduced to before it spreads (default:
    the chunk's owner)."""
    chunk_class: Callable[[int], object] = lambda chunk: 0
    """Chunks of one origin and one class travel alike: a plan depends on the chunk only
    through its class."""
    notes: dict[str, object] = field(default_factory=dict)


def recipes(net: Network, collective: Collective, algorithm: str) -> list[Recipe]:
    """The variants of ``algorithm`` for ``collective`` on ``net`` (its topology and chunk
    times); NotApplicable when there are none."""
    topology = net.topology
    if algorithm not in ALGORITHMS:
        raise TacosError(f"unknown algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")
    kind = collective.kind
    if kind not in SUPPORTED[algorithm]:
        kinds = ", ".join(k.value for k in SUPPORTED[algorithm])
        raise NotApplicable(f"{algorithm} implements {kinds}, not {kind}")
    if algorithm == "ring":
        return _ring(collective)
    if algorithm == "hierarchical-ring":
        return _hierarchical(topology, collective)
    if algorithm == "tree":
        return [_tree(net, collective)]
    if algorithm == "direct":
        return [_direct(collective)]
    return [_halving_doubling(collective)]


# ------------------------------------------------------------------ ring
def _ring(collective: Collective) -> list[Recipe]:
    ranks = collective.ranks

    def make(bidirectional: bool) -> Callable[[Network], PlanFn]:
        def plan_for(net: Network) -> PlanFn:
            return ring_plan(ring_order(net, ranks), bidirectional)

        return plan_for

    return [
        Recipe("ring", "unidirectional", make(False)),
        Recipe("ring", "bidirectional", make(True), chunk_class=_parity),
    ]


def _parity(chunk: int) -> int:
    return chunk % 2


def ring_plan(order: Sequence[int], bidirectional: bool) -> PlanFn:
    """Around the cycle ``order`` (one way, or half way each way)."""
    n = len(order)
    position = {rank: i for i, rank in enumerate(order)}

    def plan(origin: int, chunk: int) -> list[Message]:
        p = position[origin]
        if not bidirectional:
            return [(order[(p + i) % n], order[(p + i + 1) % n]) for i in range(n - 1)]
        ahead = n // 2 if _parity(chunk) == 0 else (n - 1) // 2  # alternate the longer half
        behind = n - 1 - ahead
        out: list[Message] = []
        for i in range(max(ahead, behind)):
            if i < ahead:
                out.append((order[(p + i) % n], order[(p + i + 1) % n]))
            if i < behind:
                out.append((order[(p - i) % n], order[(p - i - 1) % n]))
        return out

    return plan


# ------------------------------------------------------------------ hierarchical ring
def _hierarchical(topology: Topology, collective: Collective) -> list[Recipe]:
    groups = node_groups(topology, collective.ranks)
    if groups is None:
        raise NotApplicable(
            "hierarchical-ring needs two or more equal nodes (NPUs joined by links faster than "
            f"the slowest tier, or sharing a first-hop switch); {topology.name or 'the topology'} "
            "has one"
        )
    group_of = {rank: g for g, members in enumerate(groups) for rank in members}
    local = {rank: i for members in groups for i, rank in enumerate(members)}
    rails = [[members[i] for members in groups] for i in range(len(groups[0]))]
    notes: dict[str, object] = {"nodes": len(groups), "npus_per_node": len(groups[0])}

    def make(bidirectional: bool) -> Callable[[Network], PlanFn]:
        def plan_for(net: Network) -> PlanFn:
            rail_plans = [ring_plan(ring_order(net, rail), bidirectional) for rail in rails]
            node_plans = [ring_plan(ring_order(net, members), bidirectional) for members in groups]

            def plan(origin: int, chunk: int) -> list[Message]:
                across = rail_plans[local[origin]](origin, chunk)
                out = list(across)
                for holder in (origin, *(b for _, b in across)):
                    out.extend(node_plans[group_of[holder]](holder, chunk))
                return out

            return plan

        return plan_for

    return [
        Recipe("hierarchical-ring", "unidirectional", make(False), notes=notes),
        Recipe("hierarchical-ring", "bidirectional", make(True), chunk_class=_parity, notes=notes),
    ]


# ------------------------------------------------------------------ double binary tree
def binary_tree(n: int, rank: int) -> tuple[int, list[int]]:
    """NCCL's ``ncclGetBtree``: parent (-1 at the root, rank 0) and children of ``rank``."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if n > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    low = bit >> 1
    if low == 0:
        return up, []
    children = [rank - low]
    down1 = rank + low
    while down1 >= n and low:
        low >>= 1
        down1 = rank + low
    if low and down1 != children[0]:
        children.append(down1)
    return up, children


def double_binary_tree(n: int) -> list[list[list[int]]]:
    """Children per position of NCCL's two complementary trees (mirror for even n, shift odd)."""
    first = [binary_tree(n, r)[1] for r in range(n)]
    second: list[list[int]] = [[] for _ in range(n)]
    for r in range(n):
        if n % 2:
            shifted = binary_tree(n, r)[1]
            second[(r + 1) % n] = [(c + 1) % n for c in shifted]
        else:
            mirrored = binary_tree(n, n - 1 - r)[1]
            second[r] = [n - 1 - c for c in mirrored]
    return [first, second]


def _tree(net: Network, collective: Collective) -> Recipe:
    n = collective.num_ranks
    trees = double_binary_tree(n)
    roots = [0, n - 1 if n % 2 == 0 else 1]
    order = ring_order(net, collective.ranks)
    if collective.kind is CollectiveKind.ALL_REDUCE:
        shift = [0, 0]
    else:  # rooted: rotate both trees so that their roots are the collective's root
        assert collective.root is not None
        at = order.index(collective.root)
        shift = [at - roots[0], at - roots[1]]

    def npu(tree: int, position: int) -> int:
        return order[(position + shift[tree]) % n]

    def which(chunk: int) -> int:
        return chunk % 2 if n > 2 else 0

    def plan_for(_net: Network) -> PlanFn:
        def plan(origin: int, chunk: int) -> list[Message]:
            tree = which(chunk)
            out: list[Message] = []
            frontier = [roots[tree]]
            while frontier:  # breadth first from the root
                nxt = []
                for p in frontier:
                    for child in trees[tree][p]:
                        out.append((npu(tree, p), npu(tree, child)))
                        nxt.append(child)
                frontier = nxt
            return out

        return plan

    def hub(tree: object) -> int:
        assert isinstance(tree, int)
        return npu(tree, roots[tree])

    return Recipe("tree", "double-binary", plan_for, hub, which)


# ------------------------------------------------------------------ direct
def _direct(collective: Collective) -> Recipe:
    kind, ranks = collective.kind, collective.ranks
    one_target = kind in (K.GATHER, K.SCATTER, K.ALL_TO_ALL)

    def target(chunk: int) -> int:
        if kind is K.GATHER:
            assert collective.root is not None
            return collective.root
        if one_target:
            return collective.destination(chunk)
        return -1  # every rank

    def plan_for(net: Network) -> PlanFn:
        def plan(origin: int, chunk: int) -> list[Message]:
            if one_target:
                targets = [target(chunk)]
            else:  # nearest first, so that relays on the way are reached by their own path
                paths = net.paths_from(origin)
                position = {rank: i for i, rank in enumerate(ranks)}
                rest = [r for r in ranks if r != origin]
                targets = sorted(rest, key=lambda r: (len(paths[r]), position[r]))
            return [(origin, t) for t in targets if t != origin]

        return plan

    return Recipe("direct", "direct", plan_for, chunk_class=target)


# ------------------------------------------------------------------ halving-doubling
def _halving_doubling(collective: Collective) -> Recipe:
    n = collective.num_ranks
    if n & (n - 1):
        raise NotApplicable(f"halving-doubling needs a power-of-two number of ranks, not {n}")
    bits = [1 << b for b in reversed(range(n.bit_length() - 1))]  # farthest partner first

    def plan_for(net: Network) -> PlanFn:
        layout = _pairing_layout(net, collective.ranks, bits)
        position = {rank: i for i, rank in enumerate(layout)}

        def plan(origin: int, chunk: int) -> list[Message]:
            holders = [position[origin]]
            out: list[Message] = []
            for bit in bits:
                partners = [h ^ bit for h in holders]
                out.extend((layout[h], layout[q]) for h, q in zip(holders, partners, strict=True))
                holders += partners
            return out

        return plan

    return Recipe("halving-doubling", "halving-doubling", plan_for)


def _pairing_layout(net: Network, ranks: Sequence[int], bits: Sequence[int]) -> list[int]:
    """Rank order or ring order, whichever puts the partners of big exchanges closer."""
    best: tuple[float, list[int]] | None = None
    for layout in (sorted(ranks), ring_order(net, ranks)):
        cost = 0.0
        for step, bit in enumerate(bits):  # step k moves 2^k chunks per rank
            cost += (1 << step) * sum(
                net.path_time(layout[p], layout[p ^ bit]) for p in range(len(layout))
            )
        if best is None or cost < best[0]:
            best = (cost, layout)
    assert best is not None
    return best[1]
