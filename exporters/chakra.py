"""Chakra execution traces from a Schedule: one ET per NPU, and a runnable ASTRA-sim bundle.

Every transfer becomes a COMM_SEND_NODE on its source NPU and a COMM_RECV_NODE on
its destination, with the same ``comm_tag`` (the transfer's index), so ASTRA-sim
-- which pairs sends and receives on (tag, src, dst, size) -- matches each send
with exactly one receive. A reduction is a COMP_NODE after its receive, as long
as the topology's cost model says (whole microseconds, as Chakra holds it). A send
lists in ``data_deps`` the nodes that produced its data (ASTRA-sim ignores
``ctrl_deps``), so the traces carry exactly the schedule's causality, and it
keeps each link in the schedule's order:

* A send over a direct link waits for the previous send on that link. ASTRA-sim
  completes a send when it arrives, so the link carries one chunk at a time,
  which is the link model of the synthesizer and ``tacos simulate``.
* A send through a switch must not wait that long (its uplink frees after the
  first hop), nor any send under the pipelined link model (its link frees after
  serialization), but ASTRA-sim serves a link in the order sends are issued. So
  the send is followed by a zero-length COMP_NODE with the same dependencies
  (it completes 1 ns after the send is issued), and the next send on that
  link waits for it: issue order = schedule order, at 1 ns per send.
* A schedule made for one-port NPUs (``sends_in_flight=1``) chains every send of
  an NPU to the previous one instead, which both ASTRA-sim routes then replay
  exactly as the schedule says.

An NPU without transfers gets one zero-length COMP_NODE, since ASTRA-sim never
finishes an empty trace.

``tacos-export --format chakra -o DIR`` writes a ready-to-run ASTRA-sim bundle
(:func:`export`; its configuration files come from
:mod:`tacos.exporters.astra_config`); the ETs alone come from :func:`rank_traces`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tacos.errors import TacosError
from tacos.exporters.astra_config import (
    CARRIER_KEY,
    CARRIER_PREFIX,
    ET_PREFIX,
    WORKLOAD_PREFIX,
    plan_bundle,
)
from tacos.exporters.base import ExportResult, Writer
from tacos.formats.arguments import ArgumentAdder
from tacos.formats.chakra import (
    CHAKRA_VERSION,
    CHUNK_ATTRIBUTE,
    TENANTS_ATTRIBUTE,
    GlobalMetadata,
    Node,
    NodeType,
    attr,
    reduce_micros,
    write_et,
)
from tacos.output import atomic_directory, check_directory_target, write_text_atomic
from tacos.schedule import Op, RankStep, Schedule, StepKind, merge_tenants, save_schedules

FORMAT_NAME = "chakra"
PORT = -1
"""Queue key of an NPU's one port, for schedules made with one send in flight per NPU."""
MAX_TAGS = 500_000_000
"""ASTRA-sim matches comm_tag modulo 5e8, so larger tags would alias."""

Trace = tuple[GlobalMetadata, list[Node]]


def rank_traces(schedule: Schedule) -> dict[int, Trace]:
    """The point-to-point ET of every NPU (NPUs without transfers get an empty trace).

    Node ids start at 0 in each file; nodes are listed in the rank's step
    order, each after the nodes it depends on.
    """
    if len(schedule.transfers) > MAX_TAGS:
        raise TacosError(
            f"{len(schedule.transfers)} transfers need more distinct comm_tag values than "
            f"ASTRA-sim tells apart ({MAX_TAGS}); use fewer chunks per NPU"
        )
    programs = schedule.per_rank()
    nbytes = schedule.collective.chunk_bytes
    traces: dict[int, Trace] = {}
    for npu in schedule.topology.npus:
        program = programs.get(npu)
        nodes = _program_nodes(schedule, npu, program.steps if program else (), nbytes)
        if not nodes:
            nodes.append(Node(id=0, name="idle", type=NodeType.COMP_NODE, duration_micros=0))
        traces[npu] = (_metadata(schedule), nodes)
    return traces


def _metadata(schedule: Schedule) -> GlobalMetadata:
    """Version plus the collective the traces implement, and how many tenants' collectives
    they hold together when more than one, for importers (ASTRA-sim ignores both)."""
    attributes = [attr("collective", schedule.collective.kind.value)]
    tenants = len(schedule.meta.get("tenants") or ())
    if tenants > 1:
        attributes.append(attr(TENANTS_ATTRIBUTE, tenants))
    return GlobalMetadata(version=CHAKRA_VERSION, attr=attributes)


def _program_nodes(
    schedule: Schedule, npu: int, steps: Sequence[RankStep], nbytes: int
) -> list[Node]:
    """The ET nodes of one NPU, in step order."""
    nodes: list[Node] = []
    reduce_us = reduce_micros(schedule.topology.cost, nbytes)
    produced_by: dict[int, int] = {}  # message (last hop) -> node id holding its data here
    previous_send: dict[int, int] = {}  # first link (or PORT) -> node the next send waits for
    one_port = schedule.sends_in_flight == 1
    pipelined = schedule.topology.cost.link_model == "pipelined"
    for step in steps:
        what = f"chunk {step.chunk} (transfer {step.transfer})"
        if step.kind is StepKind.RECV:
            recv = _comm_node(
                len(nodes), f"recv {what} from {step.peer}", NodeType.COMM_RECV_NODE,
                step.peer, npu, step, nbytes, deps=(),
            )  # fmt: skip
            nodes.append(recv)
            produced_by[step.transfer] = recv.id
            if step.op is Op.REDUCE:
                reduce = Node(
                    id=len(nodes),
                    name=f"reduce {what} from {step.peer}",
                    type=NodeType.COMP_NODE,
                    data_deps=[recv.id],
                    duration_micros=reduce_us,
                    attr=[attr("is_cpu_op", False)],
                )
                nodes.append(reduce)
                produced_by[step.transfer] = reduce.id
            continue
        deps = {produced_by[d] for d in step.waits_for}
        link = schedule.transfers[step.hops[0]].link
        queue = PORT if one_port else link  # what this send must wait its turn on
        if queue in previous_send:
            deps.add(previous_send[queue])
        nodes.append(
            _comm_node(
                len(nodes),
                f"send {what} to {step.peer}",
                NodeType.COMM_SEND_NODE,
                npu,
                step.peer,
                step,
                nbytes,
                deps=sorted(deps),
            )  # fmt: skip
        )
        if one_port or (len(step.hops) == 1 and not pipelined):
            previous_send[queue] = nodes[-1].id
        else:
            marker = Node(
                id=len(nodes),
                name=f"issued {what} on link {link}",
                type=NodeType.COMP_NODE,
                data_deps=sorted(deps),
                duration_micros=0,
                attr=[attr("is_cpu_op", False)],
            )
            nodes.append(marker)
            previous_send[queue] = marker.id
    return nodes


def _comm_node(
    node_id: int,
    name: str,
    node_type: int,
    src: int,
    dst: int,
    step: RankStep,
    nbytes: int,
    deps: Sequence[int],
) -> Node:
    return Node(
        id=node_id,
        name=name,
        type=node_type,  # type: ignore[arg-type]
        data_deps=list(deps),
        attr=[
            attr("is_cpu_op", False),
            attr("comm_src", src),
            attr("comm_dst", dst),
            attr("comm_tag", step.transfer),
            attr("comm_size", nbytes),
            attr(CHUNK_ATTRIBUTE, step.chunk),
        ],
    )


def workload_traces(schedule: Schedule, comm_type: int) -> dict[int, Trace]:
    """One COMM_COLL_NODE per NPU: the workload that triggers a custom collective."""
    total_bytes = schedule.collective.num_chunks * schedule.collective.chunk_bytes
    node = Node(
        id=0,
        name=f"tacos {schedule.collective.kind}",
        type=NodeType.COMM_COLL_NODE,
        attr=[
            attr("is_cpu_op", False),
            attr("comm_type", comm_type),
            attr("comm_size", total_bytes),
        ],
    )
    return {npu: (GlobalMetadata(version=CHAKRA_VERSION), [node]) for npu in schedule.topology.npus}


@dataclass(frozen=True)
class ChakraOptions:
    """``--force``: write a bundle into a directory tacos did not write."""

    force: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ChakraOptions:
        return cls(force=args.force)


def add_arguments(parser: ArgumentAdder) -> None:
    parser.add_argument(
        "--force",
        action="store_true",
        help="write a bundle into a non-empty directory that tacos did not write "
        "(its other files are kept; same-named files are replaced)",
    )


def check_target(out: Path, options: ChakraOptions) -> None:
    """A new or empty directory, a previous bundle, or any directory with ``--force``."""
    check_directory_target(out, force=options.force)


def export(
    schedules: Sequence[Schedule], out: Path, options: ChakraOptions = ChakraOptions()
) -> ExportResult:
    """Write a ready-to-run ASTRA-sim bundle to the directory ``out`` (atomically).

    Several tenants' schedules share the network, so their traffic is one bundle
    (:func:`tacos.schedule.merge_tenants`).

    An existing bundle is updated in place: files of the previous export that this one
    does not write are removed, files tacos did not write are kept
    (:func:`tacos.output.atomic_directory`).

    Layout (paths inside are relative, so the folder can be moved)::

        run.sh                 ./run.sh [custom|p2p]; ASTRA_SIM_BIN picks the binary
        et/tacos.<r>.et        the schedule as send/recv/reduce nodes, one file per NPU
        workload/collective.<r>.et  one COMM_COLL_NODE per NPU (custom route)
        workload/carrier.<r>.et     the same as an all-reduce (carrier route, Reduce-Scatter)
        system.json            custom-collective key -> et/tacos
        system_carrier.json    all-reduce key -> et/tacos (Reduce-Scatter on older ASTRA-sim)
        system_p2p.json        no custom key: et/tacos runs as the workload itself
        network.yml, memory.json, schedule.json, manifest.json, README.md
    """
    schedule = merge_tenants(schedules)
    bundle = plan_bundle(schedule)
    traces = rank_traces(schedule)
    with atomic_directory(out, force=options.force) as scratch:
        for rank, (meta, nodes) in traces.items():
            write_et(scratch / "et" / f"{ET_PREFIX}.{rank}.et", meta, nodes)
        workloads = {WORKLOAD_PREFIX: bundle.comm_type}
        if bundle.carrier:
            workloads[CARRIER_PREFIX] = int(CARRIER_KEY[1])
        for prefix, comm_type in workloads.items():
            for rank, (meta, nodes) in workload_traces(schedule, comm_type).items():
                write_et(scratch / "workload" / f"{prefix}.{rank}.et", meta, nodes)
        for name, text in bundle.text_files().items():
            write_text_atomic(scratch / name, text)
        (scratch / "run.sh").chmod(0o755)
        save_schedules(scratch / "schedule.json", schedules)  # each tenant verifiable
        written = sorted(p.relative_to(scratch) for p in scratch.rglob("*") if p.is_file())
    node_count = sum(len(nodes) for _, nodes in traces.values())
    return ExportResult(
        [out / name for name in written], ranks=len(traces), nodes=node_count, notes=bundle.notes
    )


WRITER = Writer(add_arguments, ChakraOptions.from_args, check_target, export)
