"""MSCCL algorithm XML in: an algorithm as a Schedule.

:func:`to_schedule` turns the event trace of
:func:`~tacos.formats.msccl.execute.execute` (every chunk each receive step
took, with the earlier receives whose data it carried) into a
:class:`~tacos.schedule.Schedule` on a fully connected topology, which
:func:`tacos.verify` can check. The program model, the XML reader, the
checker and the interpreter are the format's own (:mod:`tacos.formats.msccl`).

Example:
    >>> schedule = to_schedule(load(Path("ag_ring_8ch2_Simple.xml")))  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.formats.arguments import ArgumentAdder
from tacos.formats.msccl import (
    RUNTIMES,
    Algorithm,
    Delivery,
    StepRef,
    Value,
    call_modes,
    check,
    describe_value,
    detect_runtime,
    execute,
    load,
)
from tacos.importers.base import Checker, FileCheck
from tacos.linkmodel import KEEP_COST, CostChoice
from tacos.schedule import Op, Schedule, Transfer
from tacos.simulate import replay_times
from tacos.synthesizer.timing import renumber
from tacos.topology import Topology

K = CollectiveKind
DEFAULT_CHUNK_BYTES = 2**20


# ================================================================ import
def to_schedule(
    algorithm: Algorithm,
    *,
    topology: Topology | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    root: int | None = None,
) -> Schedule:
    """The algorithm as a Schedule, by default on a fully connected topology of its GPUs.

    Every chunk a receive step takes becomes one transfer over the direct link
    between the two GPUs; it depends on the transfers whose data the sender's
    step read. A transfer is a reduction when it adds contributions the
    receiver's copy of that chunk lacks, and a copy when it replaces them.

    Times come from the topology's cost model. Threadblocks and channels run
    concurrently on the GPU runtimes: each threadblock sends in its program
    order, each transfer once the data it sends has arrived and its link is
    free, and a link shared by several threadblocks (channels) serves whichever
    is ready first, never idling while one waits. The result is sorted by start,
    so ``tacos simulate`` replays it to the same times.
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
    execution = execute(algorithm, inplace=call_modes(algorithm, runtime)[0], track_data=True)
    return _ScheduleBuilder(spec, topology, n).build(execution.deliveries, algorithm.source)


def import_schedule(
    source: str | Path,
    *,
    collective: CollectiveKind | None = None,
    topology: Topology | None = None,
    chunk_bytes: int | None = None,
    cost: CostChoice = KEEP_COST,
) -> Schedule:
    """Read an MSCCL XML file as a Schedule (the schedule importers' interface).

    ``collective``, when given, must be what the file's ``coll`` says; chunks
    are ``chunk_bytes`` (default 1 MiB) each, since the XML does not size them.
    """
    algorithm = load(source)
    if topology is None:
        topology = Topology.fully_connected(algorithm.ngpus)
    topology = topology.with_cost(cost.apply(topology.cost))
    schedule = to_schedule(
        algorithm, topology=topology, chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES
    )
    if collective is not None and collective is not schedule.collective.kind:
        raise TacosError(
            f"{algorithm.source}: coll={algorithm.coll!r} means {schedule.collective.kind}, "
            f"not {collective}"
        )
    return schedule


# ================================================================ check
@dataclass(frozen=True)
class CheckOptions:
    """``tacos verify --format msccl``: the runtime whose rules apply (None: the file's kind
    says) and the root of a broadcast or reduce (None: found from the file)."""

    runtime: str | None = None
    root: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CheckOptions:
        return cls(runtime=args.msccl_runtime, root=args.root)


def add_check_arguments(parser: ArgumentAdder) -> None:
    parser.add_argument(
        "--msccl-runtime",
        choices=sorted(RUNTIMES),
        help="--format msccl: the runtime whose rules apply (default: executor if the file "
        "has outofplace=, else legacy)",
    )
    parser.add_argument("--root", type=int, help="--format msccl: the root of a broadcast/reduce")


def check_file(path: Path, options: CheckOptions) -> FileCheck:
    """Check an MSCCL XML by running it symbolically (format, limits, deadlock, result)."""
    report = check(load(path), runtime=options.runtime, root=options.root)
    data = {
        "file": str(path),
        "verified": report.ok,
        "runtime": report.runtime,
        "collective": report.coll,
        "ngpus": report.ngpus,
        "root": report.root,
        "checked": report.checked,
        "error_count": report.error_count,
        "errors": report.errors,
        "warnings": report.warnings,
    }
    warnings = "".join(f"\n  warning: {w}" for w in report.warnings)
    return FileCheck(report.ok, data, f"{path}: {report.summary()}{warnings}")


CHECKER = Checker(add_check_arguments, CheckOptions.from_args, check_file)


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
                f"{source}: {where} moves {describe_value(value, n)}, which is no chunk of the "
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
            position = float(len(transfers))  # program order, until timed below
            transfers.append(
                Transfer(chunk, d.src, d.dst, link, position, position, op, tuple(d.sources))
            )
        threadblocks = [(d.sender.gpu, d.sender.tb) for d in deliveries]
        stream_ids = {tb: k for k, tb in enumerate(dict.fromkeys(threadblocks))}
        starts, ends = replay_times(
            transfers,
            self.topology,
            spec.chunk_bytes,
            streams=[stream_ids[tb] for tb in threadblocks],
        )
        timed = [replace(t, start=starts[i], end=ends[i]) for i, t in enumerate(transfers)]
        order = sorted(range(len(timed)), key=lambda i: (timed[i].start, i))
        return Schedule(
            self.topology,
            spec,
            renumber(timed, order),
            {"imported_from": source, "format": "msccl"},
        )

    def _contributions(self, bits: int) -> int:
        """The value as a bit set over rank positions, as the IR counts contributions."""
        return sum(1 << (b // self.n) for b in range(bits.bit_length()) if bits >> b & 1)
