"""Chakra execution traces from a Schedule: one ET per NPU, and a runnable ASTRA-sim bundle.

Every transfer becomes a COMM_SEND_NODE on its source NPU and a COMM_RECV_NODE on
its destination, with the same ``comm_tag`` (the transfer's index), so ASTRA-sim
-- which pairs sends and receives on (tag, src, dst, size) -- matches each send
with exactly one receive. A reduction is a COMP_NODE after its receive. A send
lists in ``data_deps`` the nodes that produced its data (ASTRA-sim ignores
``ctrl_deps``), so the traces carry exactly the schedule's causality, and the
previous send on the same link: ASTRA-sim completes a send when it arrives, so
the link then carries one chunk at a time in the schedule's order, which is the
link model the synthesizer and ``tacos simulate`` use. An NPU without transfers
gets one zero-length COMP_NODE, since ASTRA-sim never finishes an empty trace.

``tacos-export --format chakra -o DIR`` writes a ready-to-run ASTRA-sim bundle
(:func:`export`; its configuration files come from
:mod:`tacos.exporters.astra_config`); the ETs alone come from :func:`rank_traces`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tacos.chakra_io import CHAKRA_VERSION, GlobalMetadata, Node, NodeType, attr, write_et
from tacos.errors import TacosError
from tacos.exporters.astra_config import ET_PREFIX, WORKLOAD_PREFIX, plan_bundle
from tacos.exporters.base import ExportOptions, ExportResult
from tacos.output import atomic_directory, write_text_atomic
from tacos.schedule import Op, Schedule, StepKind

FORMAT_NAME = "chakra"
CHUNK_ATTRIBUTE = "tacos_chunk"
"""Which collective chunk a send or receive moves (int64). ASTRA-sim ignores it; importers
use it to recover the data each message carries without guessing."""
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
        nodes: list[Node] = []
        produced_by: dict[int, int] = {}  # transfer index -> node id holding its data here
        last_send_on: dict[int, int] = {}  # link id -> node id of its latest send
        program = programs.get(npu)
        for step in program.steps if program else ():
            t = schedule.transfers[step.transfer]
            if step.kind is StepKind.RECV:
                recv = _comm_node(
                    len(nodes),
                    f"recv chunk {t.chunk} from {t.src} (transfer {step.transfer})",
                    NodeType.COMM_RECV_NODE,
                    t.src,
                    t.dst,
                    step.transfer,
                    nbytes,
                    t.chunk,
                    deps=(),
                )
                nodes.append(recv)
                produced_by[step.transfer] = recv.id
                if t.op is Op.REDUCE:
                    reduce = Node(
                        id=len(nodes),
                        name=f"reduce chunk {t.chunk} from {t.src} (transfer {step.transfer})",
                        type=NodeType.COMP_NODE,
                        data_deps=[recv.id],
                        duration_micros=0,
                        attr=[attr("is_cpu_op", False)],
                    )
                    nodes.append(reduce)
                    produced_by[step.transfer] = reduce.id
            else:
                deps = {produced_by[d] for d in step.waits_for}
                if t.link in last_send_on:
                    deps.add(last_send_on[t.link])
                last_send_on[t.link] = len(nodes)
                nodes.append(
                    _comm_node(
                        len(nodes),
                        f"send chunk {t.chunk} to {t.dst} (transfer {step.transfer})",
                        NodeType.COMM_SEND_NODE,
                        t.src,
                        t.dst,
                        step.transfer,
                        nbytes,
                        t.chunk,
                        deps=sorted(deps),
                    )
                )
        if not nodes:
            nodes.append(Node(id=0, name="idle", type=NodeType.COMP_NODE, duration_micros=0))
        traces[npu] = (GlobalMetadata(version=CHAKRA_VERSION), nodes)
    return traces


def _comm_node(
    node_id: int,
    name: str,
    node_type: int,
    src: int,
    dst: int,
    tag: int,
    nbytes: int,
    chunk: int,
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
            attr("comm_tag", tag),
            attr("comm_size", nbytes),
            attr(CHUNK_ATTRIBUTE, chunk),
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


def export(schedule: Schedule, out: Path, options: ExportOptions) -> ExportResult:
    """Write a ready-to-run ASTRA-sim bundle to the directory ``out`` (atomically).

    Layout (paths inside are relative, so the folder can be moved)::

        run.sh                 ./run.sh [custom|p2p]; ASTRA_SIM_BIN picks the binary
        et/tacos.<r>.et        the schedule as send/recv/reduce nodes, one file per NPU
        workload/collective.<r>.et  one COMM_COLL_NODE per NPU (custom route)
        system.json            custom-collective key -> et/tacos
        system_p2p.json        no custom key: et/tacos runs as the workload itself
        network.yml, memory.json, schedule.json, manifest.json, README.md
    """
    bundle = plan_bundle(schedule)
    traces = rank_traces(schedule)
    with atomic_directory(out) as scratch:
        for rank, (meta, nodes) in traces.items():
            write_et(scratch / "et" / f"{ET_PREFIX}.{rank}.et", meta, nodes)
        for rank, (meta, nodes) in workload_traces(schedule, bundle.comm_type).items():
            write_et(scratch / "workload" / f"{WORKLOAD_PREFIX}.{rank}.et", meta, nodes)
        for name, text in bundle.text_files().items():
            write_text_atomic(scratch / name, text)
        (scratch / "run.sh").chmod(0o755)
        schedule.save(scratch / "schedule.json")
    node_count = sum(len(nodes) for _, nodes in traces.values())
    files = sorted(p for p in out.rglob("*") if p.is_file())
    return ExportResult(files, ranks=len(traces), nodes=node_count, notes=bundle.notes)
