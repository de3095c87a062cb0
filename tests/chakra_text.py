"""Chakra's text workload descriptions as ET sets, written with our ET writer.

Chakra's ``text_converter`` (mlcommons/chakra, ``src/converter/text_converter.py``)
turns a one-line-per-layer description of a training step into per-rank ETs; its
example inputs (``eg_converter/input_files/Text`` at c2335b7) are in
``tests/data/chakra_text``. This module builds the same graphs for the parallelism
kinds of those examples, one pass:

* ``DATA`` (data parallel, ResNet-50): forward compute layer by layer; backward, per
  layer from the last, the weight-gradient compute, its All-Reduce, then the
  input-gradient compute (not for the first layer).
* ``MODEL`` (model parallel, MLP): each forward compute is followed by its collective
  (All-Gather), which the next layer waits for; backward, per layer from the last, the
  input-gradient compute (after the previous layer's weight gradient and collective),
  its All-Reduce (not for the first layer), then the weight-gradient compute.
* ``HYBRID_DLRM`` (DLRM): embedding All-to-All forward and backward around the bottom
  MLP, All-Reduce of the MLP weight gradients (``NONE`` collectives are left out); the
  top MLP starts after the embedding All-to-All.
* ``MICRO``: the weight-gradient collective of each layer, in order.

Columns: name, (unused), then compute time (us), collective and bytes for the forward
pass, the input gradient and the weight gradient, then the update time (unused).
Every rank gets the same trace, its nodes numbered from 0 in creation order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tacos.formats.chakra import CHAKRA_VERSION, GlobalMetadata, Node, NodeType, attr, write_et
from tacos.proto.et_def_pb2 import CollectiveCommType

COMM_TYPES = {
    "ALLREDUCE": CollectiveCommType.ALL_REDUCE,
    "ALLGATHER": CollectiveCommType.ALL_GATHER,
    "REDUCESCATTER": CollectiveCommType.REDUCE_SCATTER,
    "ALLTOALL": CollectiveCommType.ALL_TO_ALL,
}


@dataclass(frozen=True)
class Layer:
    name: str
    fwd_us: int
    fwd_comm: tuple[str, int]
    ig_us: int
    ig_comm: tuple[str, int]
    wg_us: int
    wg_comm: tuple[str, int]

    @classmethod
    def parse(cls, line: str) -> Layer:
        f = line.split()
        return cls(
            f[0], int(f[2]), (f[3], int(f[4])), int(f[5]), (f[6], int(f[7])), int(f[8]),
            (f[9], int(f[10])),
        )  # fmt: skip


class _Trace:
    """Nodes in creation order, each depending on the nodes it names."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def comp(self, layer: Layer, phase: str, micros: int, *deps: Node | None) -> Node:
        node = self._add(f"COMP_NODE_{layer.name}_{phase}", NodeType.COMP_NODE, deps)
        node.duration_micros = micros
        return node

    def coll(self, layer: Layer, comm: tuple[str, int], *deps: Node | None) -> Node:
        kind, size = comm
        node = self._add(f"COMM_COLL_NODE_{layer.name}_{kind}", NodeType.COMM_COLL_NODE, deps)
        node.attr.extend([attr("comm_type", int(COMM_TYPES[kind])), attr("comm_size", size)])
        return node

    def _add(self, name: str, node_type: int, deps: tuple[Node | None, ...]) -> Node:
        node = Node(id=len(self.nodes), name=name, type=node_type)  # type: ignore[arg-type]
        node.data_deps.extend(d.id for d in deps if d is not None)
        self.nodes.append(node)
        return node


def _data_parallel(layers: list[Layer], trace: _Trace) -> None:
    fwd = None
    for layer in layers:
        fwd = trace.comp(layer, "FWD", layer.fwd_us, fwd)
    previous_ig = fwd
    for index, layer in enumerate(reversed(layers)):
        wg = trace.comp(layer, "BWD_WG", layer.wg_us, previous_ig)
        trace.coll(layer, layer.wg_comm, wg)
        if index != len(layers) - 1:
            previous_ig = trace.comp(layer, "BWD_IG", layer.ig_us, wg)


def _model_parallel(layers: list[Layer], trace: _Trace) -> None:
    comm = None
    for layer in layers:
        fwd = trace.comp(layer, "FWD", layer.fwd_us, comm)
        comm = trace.coll(layer, layer.fwd_comm, fwd)
    wg = None
    for index, layer in enumerate(reversed(layers)):
        ig = trace.comp(layer, "BWD_IG", layer.ig_us, *((comm,) if index == 0 else (wg, comm)))
        if index != len(layers) - 1:
            comm = trace.coll(layer, layer.ig_comm, ig)
        wg = trace.comp(layer, "BWD_WG", layer.wg_us, ig)


def _hybrid_dlrm(layers: list[Layer], trace: _Trace, last_bottom: int) -> None:
    fwd: Node | None = None
    embedding_a2a = None
    for index, layer in enumerate(layers):
        joins = embedding_a2a if index == last_bottom else None
        fwd = trace.comp(layer, "FWD", layer.fwd_us, fwd, joins)
        if layer.fwd_comm[0] == "ALLTOALL":
            embedding_a2a = trace.coll(layer, layer.fwd_comm, fwd)
    ig = fwd
    backward_a2a = None
    for index, layer in enumerate(reversed(layers)):
        position = len(layers) - 1 - index
        wg = trace.comp(layer, "BWD_WG", layer.wg_us, ig, backward_a2a if position == 0 else None)
        if layer.wg_comm[0] != "NONE":
            trace.coll(layer, layer.wg_comm, wg)
        ig = trace.comp(layer, "BWD_IG", layer.ig_us, wg) if position != 0 else None
        if position == last_bottom + 1:
            backward_a2a = trace.coll(layers[0], layers[0].ig_comm, ig)


def _microbenchmark(layers: list[Layer], trace: _Trace) -> None:
    for layer in layers:
        trace.coll(layer, layer.wg_comm)


def convert(text_file: Path, npus: int, prefix: Path) -> None:
    """Write ``PREFIX.<rank>.et`` for ``npus`` ranks from a Chakra text workload."""
    lines = [line for line in text_file.read_text().splitlines() if line.strip()]
    kind, *arguments = lines[0].split()
    layers = [Layer.parse(line) for line in lines[2 : 2 + int(lines[1].split()[0])]]
    trace = _Trace()
    if kind == "DATA":
        _data_parallel(layers, trace)
    elif kind == "MODEL":
        _model_parallel(layers, trace)
    elif kind == "HYBRID_DLRM":
        _hybrid_dlrm(layers, trace, int(arguments[0]))
    elif kind == "MICRO":
        _microbenchmark(layers, trace)
    else:
        raise ValueError(f"{text_file}: parallelism {kind} is not converted here")
    metadata = GlobalMetadata(version=CHAKRA_VERSION, attr=[attr("source", text_file.name)])
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        write_et(prefix.with_name(f"{prefix.name}.{rank}.et"), metadata, trace.nodes)
