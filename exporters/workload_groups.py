"""Collectives that several communicator groups run at once: which groups, and their time.

ASTRA-sim maps a workload node id to one custom ET, opened by position in the
group (:mod:`tacos.exporters.workload`), so every group whose ranks issue that
node runs one algorithm, all groups at once on one network. The bundle's
prediction is therefore the time of all of them together
(:func:`tacos.replicas.replicated_time_us`), with messages routed as ASTRA-sim
routes them, and the algorithm is synthesized for each of the first few groups
(:data:`MAX_CANDIDATE_GROUPS`) and the one fastest with every group running it is
kept: for ring:8 All-Reduce of 1 MiB on [0, 3, 4, 7] and [1, 2, 5, 6] the groups
are not translates of each other, and an algorithm for either one is slow on the
other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Final

import networkx as nx

from tacos.formats.astrasim import AnalyticalNetwork, ring_path
from tacos.formats.workload import WHOLE_NETWORK, CollectiveCall, CommGroup
from tacos.replicas import Route, replicated_time_us
from tacos.schedule import Schedule
from tacos.topology import Link, Topology

MAX_CANDIDATE_GROUPS: Final = 4
"""Groups sharing a node that the algorithm is synthesized for (the first ones, in the order
the workload lists them), stopping at the first whose algorithm runs on every group as fast
as on its own: groups along a cluster's rails or in its servers stop at the first (dgx:32x8,
eight rail groups of 32 GPUs, 16 MiB All-Reduce: 18.6 s, 7.6 s of it replaying the groups
together; 11.6 s when the first group alone was timed). Groups that are translates of each
other give the same time, so a handful covers the distinct shapes of usual layouts."""

ROUTE_BYTES: Final = 2**20
"""The message size routes are fastest for where the network has no routing rule of its
own (a route rarely depends on it)."""


def sharing_groups(
    calls: Sequence[CollectiveCall], sharers: Sequence[CollectiveCall]
) -> list[tuple[CommGroup, ...]]:
    """Per call, the groups that run it at once: every distinct group of the calls that
    share its node ids (``sharers[i]`` is the first call ``calls[i]`` shares them with),
    in the order the workload lists them; its own group alone for a call on every NPU."""
    together: dict[CollectiveCall, list[CommGroup]] = {}
    for call, first in zip(calls, sharers, strict=True):
        groups = together.setdefault(first, [])
        if call.group not in groups:
            groups.append(call.group)
    result = []
    for first in sharers:
        groups = together[first]
        whole = any(group.id == WHOLE_NETWORK for group in groups)
        result.append((first.group,) if whole else tuple(groups))
    return result


class Router:
    """Messages between NPUs routed as ASTRA-sim routes them on ``network``: a single
    Ring dimension by :func:`~tacos.formats.astrasim.ring_path`; anything else (a switch,
    direct links, several dimensions, a network ASTRA-sim cannot express) the fastest
    way for a message of :data:`ROUTE_BYTES`, as the synthesizer routes a group's
    messages through the NPUs outside it (the one path a Switch or FullyConnected
    dimension has)."""

    def __init__(self, topology: Topology, network: Sequence[AnalyticalNetwork] | None) -> None:
        self.topology = topology
        self.ring = len(network) == 1 and network[0].kind == "Ring" if network else False
        self._routes: dict[tuple[int, int], Route] = {}

    @cached_property
    def link_between(self) -> dict[tuple[int, int], int]:
        """Per pair of nodes, the fastest of the links between them (built when a first
        route is asked for: most workloads have no group sharing a node)."""
        fastest: dict[tuple[int, int], int] = {}
        for index, link in enumerate(self.topology.links):
            pair = (link.src, link.dst)
            if pair not in fastest or _us(link) < _us(self.topology.links[fastest[pair]]):
                fastest[pair] = index
        return fastest

    @cached_property
    def graph(self) -> nx.DiGraph:
        graph = nx.DiGraph()
        for (src, dst), index in self.link_between.items():
            graph.add_edge(src, dst, us=_us(self.topology.links[index]))
        return graph

    def __call__(self, src: int, dst: int) -> Route:
        route = self._routes.get((src, dst))
        if route is None:
            if self.ring:
                nodes = ring_path(self.topology.num_npus, src, dst)
            else:
                nodes = nx.shortest_path(self.graph, src, dst, weight="us")
            route = [self.link_between[pair] for pair in zip(nodes, nodes[1:], strict=False)]
            self._routes[(src, dst)] = route
        return route


def _us(link: Link) -> float:
    return link.transfer_time_us(ROUTE_BYTES)


def together_time_us(
    schedule: Schedule,
    topology: Topology,
    groups: Sequence[CommGroup],
    route: Callable[[int, int], Route],
) -> float:
    """``schedule`` (synthesized for one of ``groups``) run by all of them at once."""
    if len(groups) == 1:
        return schedule.collective_time_us
    return replicated_time_us(schedule, topology, [group.members for group in groups], route)
