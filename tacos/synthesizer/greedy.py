"""TACOS greedy link-chunk matching on the time-expanded network (TEN).

This is the All-Gather core every other collective is built from. Time moves
from event to event (a transfer ends, a chunk becomes available). At each
event, every idle link ``u -> v`` that could do something is matched with one
chunk that ``u`` holds and ``v`` neither holds nor is already receiving; the
link is then busy for ``latency + chunk_bytes / bandwidth``. Because every link
frees at its own time, heterogeneous links need no common time step.

Which of several eligible chunks a link sends is the policy:

* ``"random"`` — the plain TACOS rule: uniformly at random.
* ``"rarest"`` (default) — the chunk fewest of ``v``'s in-neighbours hold (so
  the other links into ``v`` keep something to send), then the chunk with the
  fewest copies in the network; remaining ties at random. Measured on rings,
  meshes, tori and hypercubes it is never worse on average and often reaches
  the lower bound where random does not (``benchmarks/quality.py``).

The order in which idle links are matched is a seeded shuffle, so the same
seed gives the same schedule.

Node state is one Python integer per node used as a bit set over chunks, which
keeps the reference implementation short and exact; it is the oracle that any
faster implementation is tested against.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tacos.errors import TacosError
from tacos.schedule import Op, Transfer
from tacos.topology import Topology

DeliveryCallback = Callable[[int], None]
ChunkPolicy = Literal["rarest", "random"]
CHUNK_POLICIES: tuple[ChunkPolicy, ...] = ("rarest", "random")


@dataclass(frozen=True, slots=True)
class ChunkSource:
    """``node`` holds ``chunk`` from ``time`` on, made available by transfers ``deps``."""

    node: int
    chunk: int
    time: float = 0.0
    deps: tuple[int, ...] = ()


def greedy_spread(
    topology: Topology,
    sources: Iterable[ChunkSource],
    wants: Sequence[int],
    chunk_bytes: int,
    rng: random.Random,
    *,
    policy: ChunkPolicy = "rarest",
    link_free_at: Sequence[float] | None = None,
    index_offset: int = 0,
    on_delivery: DeliveryCallback | None = None,
) -> list[Transfer]:
    """Spread chunks until every node holds the chunks it wants.

    Args:
        topology: links to use; any node may relay a chunk.
        sources: where each chunk is at first, and since when.
        wants: per node, a bit set of the chunks it must end with.
        chunk_bytes: size of every chunk.
        rng: tie-breaking randomness (seeded by the caller).
        policy: how a link picks among eligible chunks (see module docs).
        link_free_at: per link, when it becomes usable (links busy with earlier work).
        index_offset: added to transfer indices used as dependencies, for schedules
            that continue an earlier list of transfers.
        on_delivery: called with how many wanted chunks arrived at each event.

    Returns:
        Transfers in start-time order (a relay may have received chunks that
        nobody ends up needing; see :func:`tacos.synthesizer.timing.prune`).
    """
    n = topology.num_nodes
    links = topology.links
    durations = topology.link_times_us(chunk_bytes)
    out_links = topology.out_links

    holds = [0] * n
    in_neighbours = [[links[i].src for i in topology.in_links[node]] for node in range(n)]
    incoming = [0] * n
    source_deps: dict[tuple[int, int], tuple[int, ...]] = {}
    arrived_by: dict[tuple[int, int], int] = {}
    busy = [False] * len(links)
    remaining = sum(w.bit_count() for w in wants)

    # Events: (time, order, kind, a, b). Kinds: 0 = chunk a available at node b,
    # 1 = transfer a on link b ends, 2 = link b becomes usable.
    events: list[tuple[float, int, int, int, int]] = []
    order = 0
    sources = list(sources)
    copies = [0] * (1 + max([s.chunk for s in sources] + [w.bit_length() for w in wants]))
    for source in sources:
        copies[source.chunk] += 1
        source_deps[(source.node, source.chunk)] = source.deps
        events.append((source.time, order, 0, source.chunk, source.node))
        order += 1
    for link_id, free_at in enumerate(link_free_at or ()):
        if free_at > 0:
            busy[link_id] = True
            events.append((free_at, order, 2, -1, link_id))
            order += 1
    heapq.heapify(events)

    transfers: list[Transfer] = []
    while events and remaining > 0:
        now = events[0][0]
        touched_nodes: set[int] = set()
        freed_links: list[int] = []
        delivered = 0
        while events and events[0][0] == now:
            _, _, kind, a, b = heapq.heappop(events)
            if kind == 0:
                node, bit = b, 1 << a
            elif kind == 1:
                transfer = transfers[a]
                node, bit = transfer.dst, 1 << transfer.chunk
                incoming[node] &= ~bit
                arrived_by[(node, transfer.chunk)] = a + index_offset
                busy[b] = False
                freed_links.append(b)
            else:
                busy[b] = False
                freed_links.append(b)
                continue
            if not holds[node] & bit:
                holds[node] |= bit
                touched_nodes.add(node)
                if wants[node] & bit:
                    delivered += 1
        remaining -= delivered
        if on_delivery and delivered:
            on_delivery(delivered)
        if remaining == 0:
            break

        # Only links that just freed, or whose source just gained a chunk, can
        # have a new match: eligibility of an idle link only grows with holds[src].
        candidates = set(freed_links)
        for node in touched_nodes:
            candidates.update(lk for lk in out_links[node] if not busy[lk])
        ordered = sorted(candidates)
        rng.shuffle(ordered)
        for link_id in ordered:
            link = links[link_id]
            u, v = link.src, link.dst
            eligible = holds[u] & ~holds[v] & ~incoming[v]
            if not eligible:
                continue
            wanted = eligible & wants[v]
            if policy == "random":
                chunk = _random_member(wanted or eligible, rng)
            else:
                chunk = _rarest_member(wanted or eligible, in_neighbours[v], holds, copies, rng)
            copies[chunk] += 1
            bit = 1 << chunk
            incoming[v] |= bit
            busy[link_id] = True
            deps = source_deps.get((u, chunk))
            if deps is None:
                deps = (arrived_by[(u, chunk)],)
            end = now + durations[link_id]
            heapq.heappush(events, (end, order, 1, len(transfers), link_id))
            order += 1
            transfers.append(Transfer(chunk, u, v, link_id, now, end, Op.COPY, deps))

    if remaining > 0:
        missing = next(
            (node, chunk)
            for node in range(n)
            for chunk in range(wants[node].bit_length())
            if wants[node] >> chunk & 1 and not holds[node] >> chunk & 1
        )
        raise TacosError(
            f"topology {topology.name!r}: chunk {missing[1]} can never reach node {missing[0]}; "
            "check that the topology is strongly connected"
        )
    return transfers


def _random_member(bits: int, rng: random.Random) -> int:
    """A uniformly random index of a set bit of ``bits`` (which is non-zero)."""
    for _ in range(rng.randrange(bits.bit_count())):
        bits &= bits - 1
    return (bits & -bits).bit_length() - 1


def _rarest_member(
    bits: int,
    neighbours: Sequence[int],
    holds: Sequence[int],
    copies: Sequence[int],
    rng: random.Random,
) -> int:
    """The set bit of ``bits`` held by fewest ``neighbours``, then with fewest copies."""
    best: list[int] = []
    best_score = (len(neighbours) + 1, 0)
    while bits:
        low = bits & -bits
        bits ^= low
        chunk = low.bit_length() - 1
        score = (sum(holds[u] >> chunk & 1 for u in neighbours), copies[chunk])
        if score < best_score:
            best, best_score = [chunk], score
        elif score == best_score:
            best.append(chunk)
    return best[rng.randrange(len(best))] if len(best) > 1 else best[0]
