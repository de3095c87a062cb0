"""All-Reduce is gossip: a message count through the ports of NPUs or of whole servers.

Switches only forward, so the All-Reduce of one chunk among ``N`` NPUs is
one-way gossip (a message carries at most what its sender knows at that
moment) and needs at least ``2 N - 2`` messages: every NPU's contribution must
reach every NPU. Each message leaves one NPU and enters another, so the whole
collective pushes ``2 (N - 1) M`` bytes (``M`` the buffer) through the NPUs'
ports, and takes at least that over their total capacity.

The same holds for any partition of the NPUs into groups (the servers or pods
that fast links make): grant every group all its members know, and it is one
gossiper among ``S``; at least ``2 (S - 1)`` messages per chunk then travel
between groups, each leaving one group's links and entering another's. On a
cluster of many servers whose NICs are the bottleneck this is the tighter one
(dgx:16x8: 30 chunk transfers per NIC port and chunk per server, 6% above the
single-GPU count, which the fast NVSwitch ports dilute); on a few servers the
single NPUs' count is (dgx:4x8). Both are taken, and the largest wins.

A group's capacity is that of its links to nodes outside it, except that all
its links into one outside switch carry no more than that switch passes on to
nodes outside the group (a message leaves the group for good only through a
switch that forwards it elsewhere): a GPU's PCIe link is limited by its NIC's
network link.

With ranks that are a subset of the NPUs, the other NPUs could collect and
redistribute, so no count holds: the bound is then 0.

Example (2 x 31 messages per chunk, 32 chunks of 1 MiB, through 32 GPU ports of
400 GB/s NVSwitch plus 50 GB/s NIC, in us):

    >>> from tacos.collective import Collective, CollectiveKind
    >>> from tacos.topology import from_spec
    >>> all_reduce = Collective(CollectiveKind.ALL_REDUCE, tuple(range(32)), 1, 2**20)
    >>> round(gossip_bound_us(from_spec("dgx:4x8"), all_reduce), 2)
    134.55
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.topology import GIB, Direction, Topology

OUTSIDE = -1
"""The group of a node that belongs to none (a switch between the groups)."""


def gossip_bound_us(topology: Topology, collective: Collective) -> float:
    """The largest message-count bound over the partitions worth trying, in us (module docs).

    Partitions: single NPUs, and the components of links at least as fast as
    each bandwidth the topology has.
    """
    if collective.kind is not CollectiveKind.ALL_REDUCE:
        raise TacosError(f"gossip_bound_us is for all-reduce, not {collective.kind}")
    if not gossips(topology, collective):
        return 0.0
    buffer_bytes = collective.num_chunks * collective.chunk_bytes
    best_us = 0.0
    for group_of, num_groups in partitions(topology):
        capacity_GBps = min(
            port_capacity_GBps(topology, group_of, direction) for direction in ("in", "out")
        )
        moved_bytes = 2 * (num_groups - 1) * buffer_bytes
        best_us = max(best_us, moved_bytes * 1_000_000 / (capacity_GBps * GIB))
    return best_us


def gossips(topology: Topology, collective: Collective) -> bool:
    """Whether the count holds: an All-Reduce over every NPU, of at least two."""
    return (
        collective.kind is CollectiveKind.ALL_REDUCE
        and collective.num_ranks >= 2
        and sorted(collective.ranks) == list(topology.npus)
    )


def partitions(topology: Topology) -> Iterator[tuple[list[int], int]]:
    """The partitions of two groups or more, each as every node's group (or ``OUTSIDE``)
    and the number of groups: single NPUs, then per bandwidth level the components of
    links at least that fast that hold an NPU (switch-only ones are outside)."""
    if topology.num_npus >= 2:
        npus_alone = range(topology.num_npus)
        yield [*npus_alone, *[OUTSIDE] * topology.num_switches], topology.num_npus
    for bandwidth in sorted({link.bandwidth_GBps for link in topology.links}):
        root = topology.components_over(bandwidth)
        with_npu = {root[npu] for npu in topology.npus}
        if len(with_npu) >= 2:
            yield [r if r in with_npu else OUTSIDE for r in root], len(with_npu)


def port_capacity_GBps(topology: Topology, group_of: Sequence[int], direction: Direction) -> float:
    """How fast all groups together can send to (``"out"``) or take in from (``"in"``)
    nodes outside themselves, in GB/s (a switch passes on no more than it can forward)."""
    links = topology.links
    direct = 0.0
    into_switch: defaultdict[tuple[int, int], float] = defaultdict(float)
    switch_onward: defaultdict[int, float] = defaultdict(float)  # all a switch passes on
    back_into: defaultdict[tuple[int, int], float] = defaultdict(float)  # ... to one group
    for link in links:
        inside, outside = (link.src, link.dst) if direction == "out" else (link.dst, link.src)
        if topology.is_switch(inside):
            switch_onward[inside] += link.bandwidth_GBps
            back_into[(group_of[outside], inside)] += link.bandwidth_GBps
        group = group_of[inside]
        if group == OUTSIDE or group_of[outside] == group:
            continue
        if topology.is_switch(outside):
            into_switch[(group, outside)] += link.bandwidth_GBps
        else:
            direct += link.bandwidth_GBps
    through_switches = sum(
        min(bandwidth, switch_onward[switch] - back_into[(group, switch)])
        for (group, switch), bandwidth in into_switch.items()
    )
    return direct + through_switches
