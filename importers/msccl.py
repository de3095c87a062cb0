"""MSCCL algorithm XML: read it safely, run it symbolically, check it, import it.

This module owns the import: :func:`to_schedule` turns the event trace of
:func:`~tacos.importers.msccl_execute.execute` (every chunk each receive step
took, with the earlier receives whose data it carried) into a
:class:`~tacos.schedule.Schedule` on a fully connected topology, which
:func:`tacos.verify` can check. The rest lives in one module per concept, and
everything public there is re-exported here (``tacos.importers.msccl`` is
what the CLI, the exporter and the tests import):

* :mod:`tacos.importers.msccl_xml` -- the runtimes' facts (limits, step
  semantics), the model and the safe reader with its format lint;
* :mod:`tacos.importers.msccl_execute` -- buffer layout (in-place aliasing),
  symbolic values, the interpreter and the collectives' postconditions;
* :mod:`tacos.importers.msccl_check` -- the checker and its report.

Example:
    >>> schedule = to_schedule(load(Path("ag_ring_8ch2_Simple.xml")))  # doctest: +SKIP
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.importers.msccl_check import MAX_REPORTED, CheckReport, _modes, check, detect_runtime
from tacos.importers.msccl_execute import (
    Delivery,
    Execution,
    Value,
    _describe,
    execute,
    in_place_slot,
)
from tacos.importers.msccl_xml import (
    BUFFERS,
    CHUNK_EFFECTIVE_BYTES,
    FIFO_CALLS,
    LEGACY_DEFAULT_MAX_BYTES,
    MAX_ATTRIBUTES,
    MAX_COUNT,
    MAX_DEPID,
    MAX_NODES_PER_RANK,
    MAX_TBS_PER_CHANNEL,
    MAX_VALUE_CHARS,
    PROTOCOLS,
    RUNTIMES,
    STEP_TYPES,
    Algorithm,
    Gpu,
    Runtime,
    Step,
    StepRef,
    StepType,
    ThreadBlock,
    load,
)
from tacos.schedule import Op, Schedule, Transfer
from tacos.topology import Topology

__all__ = [
    "BUFFERS",
    "CHUNK_EFFECTIVE_BYTES",
    "FIFO_CALLS",
    "LEGACY_DEFAULT_MAX_BYTES",
    "MAX_ATTRIBUTES",
    "MAX_COUNT",
    "MAX_DEPID",
    "MAX_NODES_PER_RANK",
    "MAX_REPORTED",
    "MAX_TBS_PER_CHANNEL",
    "MAX_VALUE_CHARS",
    "PROTOCOLS",
    "RUNTIMES",
    "STEP_TYPES",
    "Algorithm",
    "CheckReport",
    "Delivery",
    "Execution",
    "Gpu",
    "Runtime",
    "Step",
    "StepRef",
    "StepType",
    "ThreadBlock",
    "Value",
    "check",
    "detect_runtime",
    "execute",
    "import_schedule",
    "in_place_slot",
    "load",
    "to_schedule",
]

K = CollectiveKind


# ================================================================ import
def to_schedule(
    algorithm: Algorithm,
    *,
    topology: Topology | None = None,
    chunk_bytes: int = 2**20,
    root: int | None = None,
) -> Schedule:
    """The algorithm as a Schedule, by default on a fully connected topology of its GPUs.

    Every chunk a receive step takes becomes one transfer over the direct link
    between the two GPUs; it depends on the transfers whose data the sender's
    step read. A transfer is a reduction when it adds contributions the
    receiver's copy of that chunk lacks, and a copy when it replaces them.
    Times come from our link model: each transfer starts as soon as its link is
    free and its dependencies have arrived, in the order the algorithm runs.
    Raises :class:`TacosError` when the algorithm does not check out, or moves
    data the Schedule IR cannot name (it keeps one copy of each chunk per NPU).
    """
    report = check(algorithm, root=root)
    if not report.ok:
        raise TacosError(f"{algorithm.source}: cannot import: {report.errors[0]}")
    runtime = RUNTIMES[detect_runtime(algorithm)]
    kind = runtime.colls[algorithm.coll]
    if kind is None:
        raise TacosError(f"{algorithm.source}: coll={algorithm.coll!r} names no collective")
    n, ngpus = algorithm.nchunksperloop, algorithm.ngpus
    whole_buffer = kind in (K.BROADCAST, K.REDUCE)
    spec = Collective(
        kind, tuple(range(ngpus)), n if whole_buffer else n // ngpus, chunk_bytes, report.root
    )
    if topology is None:
        topology = Topology.fully_connected(ngpus)
    elif topology.num_npus < ngpus:
        raise TacosError(f"{algorithm.source}: {ngpus} GPUs do not fit {topology.describe()}")
    execution = execute(algorithm, inplace=_modes(algorithm, runtime)[0], track_data=True)
    return _ScheduleBuilder(spec, topology, n).build(execution.deliveries, algorithm.source)


def import_schedule(
    source: str | Path,
    *,
    collective: CollectiveKind | None = None,
    topology: Topology | None = None,
) -> Schedule:
    """Read an MSCCL XML file as a Schedule (the schedule importers' interface).

    ``collective``, when given, must be what the file's ``coll`` says.
    """
    algorithm = load(source)
    schedule = to_schedule(algorithm, topology=topology)
    if collective is not None and collective is not schedule.collective.kind:
        raise TacosError(
            f"{algorithm.source}: coll={algorithm.coll!r} means {schedule.collective.kind}, "
            f"not {collective}"
        )
    return schedule


class _ScheduleBuilder:
    """Deliveries -> transfers with IR ops, dependencies and link-model times."""

    def __init__(self, spec: Collective, topology: Topology, n: int) -> None:
        self.spec, self.topology, self.n = spec, topology, n
        self.links = {(link.src, link.dst): i for i, link in enumerate(topology.links)}

    def chunk(self, value: Value, where: StepRef, source: str) -> int:
        """Which collective chunk a symbolic value is (a piece of)."""
        spec, n = self.spec, self.n
        bits = 0 if value is None or value[1] else value[0]
        pairs = [(b // n, b % n) for b in range(bits.bit_length()) if bits >> b & 1]
        if (
            not pairs
            or len({c for _, c in pairs}) != 1
            or (len(pairs) > 1 and not spec.kind.reduces)
        ):
            raise TacosError(
                f"{source}: {where} moves {_describe(value, n)}, which is no chunk of the "
                f"{spec.kind}"
            )
        rank, c = pairs[0]
        if spec.kind in (K.ALL_GATHER, K.GATHER):
            return rank * spec.chunks_per_rank + c
        if spec.kind is K.ALL_TO_ALL:
            return rank * n + c
        return c

    def build(self, deliveries: Sequence[Delivery], source: str) -> Schedule:
        spec = self.spec
        held = {(node, c): bits for node, c, bits in spec.initial_data()}
        link_free: dict[int, float] = defaultdict(float)
        transfers: list[Transfer] = []
        for d in deliveries:
            chunk = self.chunk(d.value, d.receiver, source)
            bits = self._contributions(d.value[0] if d.value else 0)
            here = held.get((d.dst, chunk), 0)
            if spec.kind.reduces and not bits & here:
                op, held[(d.dst, chunk)] = Op.REDUCE, here | bits
            elif bits & here == here:
                op, held[(d.dst, chunk)] = Op.COPY, bits
            else:
                raise TacosError(
                    f"{source}: {d.receiver} overwrites part of what gpu {d.dst} holds of chunk "
                    f"{chunk}; the Schedule IR keeps one copy per chunk and cannot express it"
                )
            link = self.links.get((d.src, d.dst))
            if link is None:
                raise TacosError(
                    f"{source}: {d.sender} sends to gpu {d.dst}, but {self.topology.describe()} "
                    f"has no link {d.src}->{d.dst}"
                )
            start = max([link_free[link], *(transfers[s].end for s in d.sources)])
            end = start + self.topology.links[link].transfer_time_us(spec.chunk_bytes)
            link_free[link] = end
            transfers.append(Transfer(chunk, d.src, d.dst, link, start, end, op, tuple(d.sources)))
        order = sorted(range(len(transfers)), key=lambda i: (transfers[i].start, i))
        position = {old: new for new, old in enumerate(order)}
        ordered = [
            replace(transfers[i], deps=tuple(sorted(position[d] for d in transfers[i].deps)))
            for i in order
        ]
        return Schedule(self.topology, spec, ordered, {"imported_from": source, "format": "msccl"})

    def _contributions(self, bits: int) -> int:
        """The value as a bit set over rank positions, as the IR counts contributions."""
        return sum(1 << (b // self.n) for b in range(bits.bit_length()) if bits >> b & 1)
