"""One schedule run by several groups of NPUs at once, each NPU playing its position.

Why: ASTRA-sim maps a workload node to one custom ET per position in a
communicator group, so when one collective node runs on several groups (data
parallelism inside each of several model-parallel groups, say), every group runs
the same algorithm, NPU ``groups[g][j]`` playing the part of position ``j``, and
all of them share the network. Timed for its first group alone, a ring:8
All-Reduce on [0, 3, 4, 7] and [1, 2, 5, 6] predicted 24 us where ASTRA-sim
took 69 us: the second group's messages cross three hops where the first's
cross one, over the first group's links.

How: every message of the schedule (an NPU-to-NPU chain of transfers,
:meth:`~tacos.schedule.Schedule.messages`) is sent in every group between that
group's NPUs at the same positions, over the links ``route`` gives (the route
the simulator that runs the ETs takes), waiting for the same messages as in the
schedule, and all groups' messages are replayed together
(:func:`tacos.synthesizer.list_scheduling.replayed`: as :mod:`tacos.simulate`
replays, compiled when large). An NPU's program sends in the schedule's
order: per link it sent on in the schedule, a message leaves after the one
before it on that link, and over a direct link in the paper's link model (which
holds the link until the message arrives) only once that one has arrived; a
one-port schedule's NPU sends one message at a time. That order stays when a
copy's route starts on another link. A message may pass through NPUs of the
network, which a :class:`~tacos.topology.Topology` lets only switches do, so the
replay runs on a copy of the network where every NPU's links leave and enter a
router of its own: routers are switches, serving their links in the order
messages arrive, as a simulator's link queues do, and an NPU reaches its router
over links too fast to take time, one per link it sent on in the schedule,
which keep its order of sends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from tacos.errors import TacosError
from tacos.schedule import Op, Schedule, Transfer, message_chains
from tacos.synthesizer.list_scheduling import replayed
from tacos.topology import Link, Topology
from tacos.transfers import TransferTable

Route = Sequence[int]
"""Link ids of ``network``, in order, from one NPU to another."""
INSTANT_GBPS = 1e12
"""Bandwidth of the links between an NPU and its router: a 1 MiB chunk crosses one in
under a femtosecond, far below the nanoseconds the times are quoted in."""
ROUNDED_DIGITS = 6
"""The time is rounded to the picosecond, dropping what the instant links added."""


def replicated_time_us(
    schedule: Schedule,
    network: Topology,
    groups: Sequence[Sequence[int]],
    route: Callable[[int, int], Route],
) -> float:
    """When the last of ``groups`` finishes running ``schedule`` together on ``network``.

    ``schedule``'s NPU ``j`` is position ``j`` of every group (NPU ids of ``network``);
    ``route(a, b)`` gives the links a message from NPU ``a`` to NPU ``b`` crosses.
    """
    width = schedule.topology.num_npus
    for group in groups:
        if len(group) != width:
            raise TacosError(
                f"a group of {len(group)} NPUs cannot run a schedule for {width} NPUs; "
                "give groups of the schedule's size"
            )
    program = _messages(schedule)
    chunks = 1 + max((message.chunk for message in program), default=0)
    routed = _Routed(network)
    for index, group in enumerate(groups):
        routed.add(program, group, route, index * chunks)
    table = TransferTable.from_transfers(routed.transfers)
    _, end_us = replayed(table, routed.topology, schedule.collective.chunk_bytes)
    return round(float(end_us.max(initial=0.0)), ROUNDED_DIGITS)


class _Message(NamedTuple):
    """A message of the schedule as every copy sends it."""

    src: int
    dst: int
    chunk: int
    op: Op
    """What the receiver does with it: the op of its last hop."""
    start_us: float
    """When the schedule starts it: the order an NPU's sends keep."""
    queue: int
    """What it waits its turn on at its sender: the link it left on, or -1 for the
    sender's one port."""
    after_arrival: bool
    """Whether the next message of its queue waits for it to arrive (module docs)."""
    waits_for: tuple[int, ...]
    """Messages (indices in send order) whose arrival it waits for."""


def _messages(schedule: Schedule) -> list[_Message]:
    """``schedule``'s messages in the order they start (module docs)."""
    sent = list(schedule.transfers)  # a table makes a Transfer at every access
    chains = sorted(
        message_chains(sent, schedule.topology), key=lambda chain: (sent[chain[0]].start, chain[0])
    )
    ending = {chain[-1]: index for index, chain in enumerate(chains)}
    one_port = schedule.sends_in_flight == 1
    holding = schedule.topology.cost.link_model == "paper"
    messages = []
    for chain in chains:
        first, last = sent[chain[0]], sent[chain[-1]]
        messages.append(
            _Message(first.src, last.dst, first.chunk, last.op, first.start,
                     -1 if one_port else first.link, one_port or (holding and len(chain) == 1),
                     tuple(ending[d] for d in first.deps))
        )  # fmt: skip
    return messages


class _Routed:
    """``network`` with a router per NPU (module docs): NPU ``n``'s router is node
    ``network.num_nodes + n``, and every link of ``network`` joins routers and switches.
    The links into routers are added as copies of messages need them."""

    def __init__(self, network: Topology) -> None:
        self.network = network
        self.links = [Link(self._node(link.src), self._node(link.dst), link.bandwidth_GBps,
                           link.latency_us) for link in network.links]  # fmt: skip
        self.out_of_router = {npu: self._instant(self._node(npu), npu) for npu in network.npus}
        self.into_router: dict[tuple[int, int], int] = {}  # (NPU, queue) -> link
        self.transfers: list[Transfer] = []

    @property
    def topology(self) -> Topology:
        switches = self.network.num_switches + self.network.num_npus
        return Topology(self.network.num_npus, tuple(self.links), switches, cost=self.network.cost)

    def _node(self, node: int) -> int:
        """Where ``network``'s links meet ``node`` in the copy: an NPU's router."""
        return self.network.num_nodes + node if node < self.network.num_npus else node

    def _instant(self, src: int, dst: int) -> int:
        self.links.append(Link(src, dst, INSTANT_GBPS, 0.0))
        return len(self.links) - 1

    def add(
        self,
        program: Sequence[_Message],
        group: Sequence[int],
        route: Callable[[int, int], Route],
        chunk_offset: int,
    ) -> None:
        """Add ``group``'s copy of every message to :attr:`transfers`: into the sender's
        router, along the route, out to the receiver (which adds it in where the
        schedule's last hop did), in the order and with the waits of the module docs.
        Its chunks are numbered from ``chunk_offset``, apart from other copies'."""
        arrived_before: dict[tuple[int, int], int] = {}  # (NPU, queue) -> last hop to wait for
        last_hops: list[int] = []  # per message, this copy's last hop
        for message in program:
            src, dst = group[message.src], group[message.dst]
            queue = (src, message.queue)
            if queue not in self.into_router:
                self.into_router[queue] = self._instant(src, self._node(src))
            deps = {last_hops[index] for index in message.waits_for}
            if queue in arrived_before:
                deps.add(arrived_before[queue])
            hops = [self.into_router[queue], *route(src, dst), self.out_of_router[dst]]
            for hop, link in enumerate(hops):
                into = self.links[link]
                op = message.op if hop == len(hops) - 1 else Op.COPY
                # Recorded starts order an NPU's sends; the replay re-times everything.
                self.transfers.append(
                    Transfer(chunk_offset + message.chunk, into.src, into.dst, link,
                             message.start_us, message.start_us, op, tuple(sorted(deps)))
                )  # fmt: skip
                deps = {len(self.transfers) - 1}
            last_hops.append(len(self.transfers) - 1)
            if message.after_arrival:
                arrived_before[queue] = last_hops[-1]
