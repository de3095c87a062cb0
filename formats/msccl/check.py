"""Check an MSCCL algorithm the way the GPU runtimes would run it, from the XML alone.

The GPU runtimes that execute these files (the legacy NCCL-MSCCL interpreter,
the MSCCL executor and RCCL) parse them by hand and run them without checking
that they are right: a wrong file hangs the job or returns wrong sums. This
module owns the verdict (``tacos verify --format msccl FILE.xml``): it turns
the reader's format lint, the loaders' rules and the symbolic execution into
one :class:`CheckReport`. It does not use our exporter, so it can judge the
exporter's output. What it checks:

* **format** -- what the hand-written tokenizers reject although a standard
  XML parser accepts it (found by :func:`~tacos.formats.msccl.codec.load`);
* **structure** -- the loaders' rules and limits (``RUNTIMES``): required
  attributes, collective names, threadblock ids, one threadblock per
  connection, steps per threadblock, threadblocks per GPU, channels,
  dependency encoding (``depid``/``deps``/``hasdep``, ``nop`` chains), buffer
  bounds;
* **matching** -- per connection (sender, receiver, channel) the k-th send
  step pairs with the k-th receive step and both move ``cnt`` chunks;
* **execution** -- every threadblock runs its steps in order, waits for the
  steps it depends on, receives from and sends to connections that buffer
  only a few calls (``FIFO_CALLS``). A step whose messages are large is split
  into several calls; the check runs once with one call per step and once with
  the calls of the largest message the file accepts (``maxBytes``). Both must
  finish; otherwise the report shows the cycle of waiting threadblocks;
* **semantics** -- buffer slots hold symbolic values (which ranks' input
  chunks were summed into them, or uninitialised data). Accesses to one slot
  by two threadblocks must be ordered by dependencies, messages or program
  order (vector clocks); otherwise the result depends on timing and is
  reported as a race. At the end the collective's postcondition must hold in
  every mode the file serves (in-place, where input and output alias as the
  runtimes lay them out, and out-of-place).

Example:
    >>> report = check(load(Path("ag_ring_8ch2_Simple.xml")))  # doctest: +SKIP
    >>> print(report.summary())  # doctest: +SKIP
    OK: allgather on 8 GPUs for the legacy runtime; in-place: race-free, postcondition holds; ...
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tacos.collective import CollectiveKind
from tacos.errors import TacosError
from tacos.formats.msccl.execute import Execution, buffer_sizes, execute, wrong_outputs
from tacos.formats.msccl.model import Algorithm, Gpu, Step, StepRef, ThreadBlock
from tacos.formats.msccl.runtime import (
    BUFFERS,
    CHUNK_EFFECTIVE_BYTES,
    FIFO_CALLS,
    LEGACY_COLLS,
    LEGACY_DEFAULT_MAX_BYTES,
    MAX_COUNT,
    MAX_DEPID,
    MAX_NODES_PER_RANK,
    MAX_TBS_PER_CHANNEL,
    PROTOCOLS,
    RUNTIMES,
    STEP_TYPES,
    Runtime,
)

K = CollectiveKind
MAX_REPORTED = 20
"""Errors a report lists; the rest are only counted."""


# ================================================================ checking
@dataclass
class CheckReport:
    """Outcome of :func:`check`: ``ok`` and, when not, what is wrong (first few)."""

    source: str
    runtime: str
    coll: str
    ngpus: int
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    warnings: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    root: int | None = None
    """The root a broadcast or reduce was found correct for."""

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def fail(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(message)

    def summary(self) -> str:
        head = f"{self.coll} on {self.ngpus} GPUs for the {self.runtime} runtime"
        if self.ok:
            return f"OK: {head}; " + "; ".join(self.checked)
        more = self.error_count - len(self.errors)
        tail = f"\n  ... and {more} more" if more else ""
        return (
            f"FAILED ({self.error_count} problems, {head}):\n  " + "\n  ".join(self.errors) + tail
        )


def detect_runtime(algorithm: Algorithm) -> str:
    """``executor`` when the file has the executor's ``outofplace`` attribute or spells
    ``coll`` the executor's way, else ``legacy`` (what msccl-tools writes)."""
    if algorithm.outofplace is not None or algorithm.coll not in LEGACY_COLLS:
        return "executor"
    return "legacy"


def check(
    algorithm: Algorithm, *, runtime: str | None = None, root: int | None = None
) -> CheckReport:
    """Check an algorithm for one runtime (default: :func:`detect_runtime`); never raises
    on a wrong algorithm. ``root`` pins the root of a broadcast or reduce, which the
    XML does not record (by default any root that makes the result right is accepted).
    """
    runtime_name = runtime or detect_runtime(algorithm)
    if runtime_name not in RUNTIMES:
        raise TacosError(
            f"unknown MSCCL runtime {runtime_name!r}: use one of {', '.join(RUNTIMES)}"
        )
    if root is not None and not 0 <= root < algorithm.ngpus:
        raise TacosError(
            f"{algorithm.source}: --root {root} is not a GPU of this {algorithm.ngpus}-GPU "
            f"algorithm; use 0..{algorithm.ngpus - 1}"
        )
    report = CheckReport(algorithm.source, runtime_name, algorithm.coll, algorithm.ngpus)
    for message in algorithm.format_errors:
        report.fail(message)
    report.warnings.extend(algorithm.format_warnings)
    if not _Structure(algorithm, RUNTIMES[runtime_name], report).check():
        report.checked.append("not executed: fix the structure first")
        return report
    if not _check_matching(algorithm, report):
        return report
    kind = RUNTIMES[runtime_name].colls[algorithm.coll]
    for inplace in call_modes(algorithm, RUNTIMES[runtime_name]):
        if not _check_mode(algorithm, kind, inplace, root, report):
            break  # a deadlock does not depend on the mode
    if report.ok:
        _check_large_messages(algorithm, report)
    return report


def _check_mode(
    algorithm: Algorithm,
    kind: CollectiveKind | None,
    inplace: bool,
    root: int | None,
    report: CheckReport,
) -> bool:
    """Run one call kind with one call per step: races, then the result. False on deadlock."""
    mode = "in-place" if inplace else "out-of-place"
    run = execute(algorithm, inplace=inplace, track_data=True)
    if run.deadlock:
        report.fail(f"deadlock with {run.buffering}: {run.deadlock}")
        return False
    for race in run.races:
        report.fail(f"{mode}: {race}")
    for writer in run.input_writers:
        report.warnings.append(
            f"{mode}: {writer} writes the input buffer, which is the user's const "
            "send buffer in an out-of-place call"
        )
    if run.races:
        return True
    if kind is None:
        report.checked.append(
            f"{mode}: race-free, runs to completion (coll={algorithm.coll} has no postcondition)"
        )
    else:
        _check_postcondition(algorithm, kind, inplace, run, root, mode, report)
    return True


def _check_large_messages(algorithm: Algorithm, report: CheckReport) -> None:
    """Run again with the calls of the largest message the file accepts, if that differs."""
    largest = _smallest_max_allowed_count(algorithm)
    split = any(
        math.ceil(step.cnt / largest) > 1
        for gpu in algorithm.gpus
        for tb in gpu.threadblocks
        for step in tb.steps
        if step.kind.send or step.kind.recv
    )
    limit = _max_bytes(algorithm)
    sizes = "any message size" if limit is None else f"messages up to {limit} bytes"
    if split:
        run = execute(algorithm, inplace=True, max_allowed_count=largest)
        if run.deadlock:
            report.fail(
                f"deadlock for large messages ({sizes}), with {run.buffering}: {run.deadlock}; "
                "lower maxBytes or split the steps with cnt > 1"
            )
            return
    buffering = f"{FIFO_CALLS[algorithm.proto]}-call connection buffers"
    report.checked.append(f"no deadlock with {buffering} for {sizes}")


def call_modes(algorithm: Algorithm, runtime: Runtime) -> list[bool]:
    """The call kinds (in-place True, out-of-place False) the runtime uses this file for."""
    if not runtime.executor_format:
        return [bool(algorithm.inplace)]
    return [flag for flag, on in ((True, algorithm.inplace), (False, algorithm.outofplace)) if on]


def _max_bytes(algorithm: Algorithm) -> int | None:
    """The largest message the runtime may run the file for (None: no limit).

    The legacy runtime defaults to 128 MiB; the executor reads ``maxBytes=0`` as unlimited.
    """
    if algorithm.max_bytes is None:
        return LEGACY_DEFAULT_MAX_BYTES
    return algorithm.max_bytes or None


def _smallest_max_allowed_count(algorithm: Algorithm) -> int:
    """The chunks one call moves for the largest message the file accepts (at least 1).

    The runtimes compute ``chunkEffectiveSize / ceil(nBytes / nchunksperloop)``,
    clamped to 1..71.
    """
    limit = _max_bytes(algorithm)
    if limit is None:
        return 1
    per_chunk = math.ceil(limit / algorithm.nchunksperloop)
    return max(1, min(MAX_COUNT, CHUNK_EFFECTIVE_BYTES[algorithm.proto] // per_chunk))


class _Structure:
    """The loaders' rules and limits (``RUNTIMES``), reported against the offending element."""

    def __init__(self, algorithm: Algorithm, runtime: Runtime, report: CheckReport) -> None:
        self.a, self.rt, self.report = algorithm, runtime, report
        self.errors_before = report.error_count

    def fail(self, message: str) -> None:
        self.report.fail(message)

    def check(self) -> bool:
        self.algo()
        if self.report.error_count == self.errors_before:
            self.gpus()
        return self.report.error_count == self.errors_before

    def algo(self) -> None:
        a, rt = self.a, self.rt
        where = f"{a.source}: <algo>"
        if a.proto not in PROTOCOLS:
            self.fail(f"{where} proto={a.proto!r}: use one of {', '.join(PROTOCOLS)}")
        if a.coll not in rt.colls:
            other = next((n for n, r in RUNTIMES.items() if a.coll in r.colls), None)
            hint = f" (that is the {other} runtime's spelling)" if other else ""
            self.fail(
                f"{where} coll={a.coll!r} is unknown to the {rt.name} runtime{hint}; "
                f"it reads {', '.join(rt.colls)}"
            )
        if not 1 <= a.nchannels <= rt.max_channels:
            self.fail(
                f"{where} nchannels={a.nchannels}: the {rt.name} runtime allows "
                f"1..{rt.max_channels}"
            )
        if a.ngpus < 1 or a.nchunksperloop < 1:
            self.fail(f"{where} ngpus and nchunksperloop must be positive")
        elif rt.colls.get(a.coll) in _PER_RANK_COLLS and a.nchunksperloop % a.ngpus:
            self.fail(
                f"{where} nchunksperloop={a.nchunksperloop} is not a multiple of ngpus={a.ngpus}"
            )
        if rt.executor_format:
            for attribute, value in (
                ("outofplace", a.outofplace),
                ("minBytes", a.min_bytes),
                ("maxBytes", a.max_bytes),
            ):
                if value is None:
                    self.fail(f"{where} lacks {attribute}, which the {rt.name} runtime requires")
            if not a.inplace and not a.outofplace and a.outofplace is not None:
                self.report.warnings.append(f"{where}: inplace=0 and outofplace=0 serve no call")
        elif a.name is None:
            self.fail(f"{where} lacks name, which the legacy runtime requires")
        low, high = a.min_bytes or 0, a.max_bytes
        if low < 0 or (high is not None and (high < 0 or (high and low > high))):
            self.fail(f"{where} minBytes/maxBytes must be >= 0 with minBytes <= maxBytes")
        if not rt.executor_format and high == 0:
            self.fail(f"{where} maxBytes=0: the legacy runtime selects sizes below maxBytes: none")
        if len(a.gpus) != a.ngpus or sorted(g.id for g in a.gpus) != list(range(a.ngpus)):
            ids = sorted(g.id for g in a.gpus)
            self.fail(
                f"{where} ngpus={a.ngpus} but the <gpu> ids are {ids[:8]}{'...' * (len(ids) > 8)}"
            )

    def gpus(self) -> None:
        for gpu in self.a.gpus:
            self.gpu(gpu)

    def gpu(self, gpu: Gpu) -> None:
        a, rt = self.a, self.rt
        where = f"{a.source}:{gpu.line}: gpu {gpu.id}"
        sizes = buffer_sizes(a, rt.colls[a.coll], gpu)
        declared = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
        if min(declared.values()) < 0:
            self.fail(f"{where}: i_chunks, o_chunks and s_chunks must be >= 0")
        kind = rt.colls[a.coll]
        if not rt.executor_format:
            multiplier = {
                "i": a.ngpus if kind is K.ALL_GATHER else 1,
                "o": a.ngpus if kind is K.REDUCE_SCATTER else 1,
            }
            for buf, mult in multiplier.items():
                if declared[buf] > 0 and declared[buf] * mult != a.nchunksperloop:
                    self.fail(
                        f"{where}: {buf}_chunks={declared[buf]} disagrees with nchunksperloop="
                        f"{a.nchunksperloop} (the legacy loader wants {buf}_chunks x {mult} == it)"
                    )
        for buf in ("i", "o"):
            if declared[buf] > sizes[buf]:
                self.report.warnings.append(
                    f"{where}: {buf}_chunks={declared[buf]} is larger than the {sizes[buf]} "
                    f"chunks the user's buffer has"
                )
        tbs = gpu.threadblocks
        if len(tbs) > rt.max_threadblocks:
            self.fail(
                f"{where}: {len(tbs)} threadblocks; the {rt.name} runtime allows "
                f"{rt.max_threadblocks}"
            )
        ids = [tb.id for tb in tbs]
        if sorted(ids) != list(range(len(tbs))):
            self.fail(
                f"{where}: threadblock ids must be 0..{len(tbs) - 1} without gaps or repeats, "
                f"got {sorted(ids)[:10]}"
            )
            return
        nodes = 1 + a.ngpus + len(tbs) + sum(len(tb.steps) for tb in tbs)
        if nodes > MAX_NODES_PER_RANK:
            self.fail(
                f"{where}: {nodes} XML elements for this rank (algo, every gpu, its tbs and "
                f"steps); the runtimes' tokenizer stops at {MAX_NODES_PER_RANK}"
            )
        connections: dict[tuple[str, int, int], int] = {}
        per_channel: dict[tuple[str, int], int] = defaultdict(int)
        by_id = {tb.id: tb for tb in tbs}
        for tb in tbs:
            self.threadblock(gpu, tb, by_id, declared, sizes)
            for direction, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer < 0:
                    continue
                key = (direction, peer, tb.chan)
                if key in connections:
                    self.fail(
                        f"{where}: tb {connections[key]} and tb {tb.id} both {direction} "
                        f"{'to' if direction == 'send' else 'from'} gpu {peer} on channel "
                        f"{tb.chan}; a connection serves one threadblock"
                    )
                connections[key] = tb.id
                per_channel[(direction, tb.chan)] += 1
        for (direction, chan), count in per_channel.items():
            if count > MAX_TBS_PER_CHANNEL:
                self.fail(
                    f"{where}: {count} threadblocks {direction} on channel {chan}; the runtimes "
                    f"allow {MAX_TBS_PER_CHANNEL} per channel: use more channels"
                )

    def threadblock(
        self,
        gpu: Gpu,
        tb: ThreadBlock,
        by_id: Mapping[int, ThreadBlock],
        declared: Mapping[str, int],
        sizes: Mapping[str, int],
    ) -> None:
        a, rt = self.a, self.rt
        where = f"{a.source}:{tb.line}: gpu {gpu.id} tb {tb.id}"
        for direction, peer in (("send", tb.send), ("recv", tb.recv)):
            if not -1 <= peer < a.ngpus or peer == gpu.id:
                self.fail(
                    f"{where}: {direction}={peer} must be -1 or another gpu in 0..{a.ngpus - 1}"
                )
        if not 0 <= tb.chan < a.nchannels:
            self.fail(f"{where}: chan={tb.chan} must be in 0..{a.nchannels - 1} (nchannels)")
        if len(tb.steps) > rt.max_steps:
            self.fail(
                f"{where}: {len(tb.steps)} steps; the {rt.name} runtime allows {rt.max_steps} "
                "per threadblock"
            )
        pending_nops: list[Step] = []
        for step in tb.steps:
            self.step(gpu, tb, step, by_id, declared, sizes)
            if step.type == "nop":
                pending_nops.append(step)
            elif step.type in STEP_TYPES:
                if pending_nops and step.depid < 0:
                    self.fail(
                        f"{a.source}:{step.line}: {StepRef.of(gpu, tb, step)}: follows nop "
                        "dependencies but has none itself; the loaders reject such a chain"
                    )
                pending_nops = []
        if pending_nops:
            self.report.warnings.append(f"{where}: trailing nops are dropped by the loaders")
        self.reduction_fusion(gpu, tb)

    def step(
        self,
        gpu: Gpu,
        tb: ThreadBlock,
        step: Step,
        by_id: Mapping[int, ThreadBlock],
        declared: Mapping[str, int],
        sizes: Mapping[str, int],
    ) -> None:
        where = f"{self.a.source}:{step.line}: {StepRef.of(gpu, tb, step)}"
        if step.type not in STEP_TYPES:
            self.fail(f"{where}: unknown type; the runtimes run {', '.join(STEP_TYPES)}")
            return
        if step.s != step.index:
            self.fail(
                f"{where}: s={step.s}, but the runtimes number steps by position ({step.index})"
            )
        if step.srcbuf not in BUFFERS or step.dstbuf not in BUFFERS:
            self.fail(f"{where}: srcbuf and dstbuf must be i, o or s (even for nop)")
            return
        if step.hasdep not in (0, 1):
            self.fail(f"{where}: hasdep={step.hasdep} must be 0 or 1")
        self.dependency(gpu, tb, step, by_id, where)
        kind = step.kind
        if step.type == "nop":
            return
        if not 1 <= step.cnt <= MAX_COUNT:
            self.fail(f"{where}: cnt={step.cnt} must be in 1..{MAX_COUNT}")
        if kind.send and tb.send < 0:
            self.fail(f"{where}: sends, but the threadblock has no send peer")
        if kind.recv and tb.recv < 0:
            self.fail(f"{where}: receives, but the threadblock has no receive peer")
        uses = (
            ("src", step.srcbuf, step.srcoff, kind.reads_src),
            ("dst", step.dstbuf, step.dstoff, kind.writes_dst),
        )
        for field_name, buf, offset, used in uses:
            if field_name in kind.checked and not -1 <= offset < declared[buf]:
                self.fail(
                    f"{where}: {field_name}off={offset} is outside the declared {buf}_chunks="
                    f"{declared[buf]}; the loader rejects it"
                )
            elif used and not (offset >= 0 and offset + step.cnt <= sizes[buf]):
                self.fail(
                    f"{where}: {buf}[{offset}..{offset + step.cnt - 1}] is outside the "
                    f"{sizes[buf]}-chunk {_BUFFER_NAMES[buf]} buffer"
                )

    def dependency(
        self, gpu: Gpu, tb: ThreadBlock, step: Step, by_id: Mapping[int, ThreadBlock], where: str
    ) -> None:
        if step.depid < 0:
            if step.deps != -1 or step.depid != -1:
                self.fail(f"{where}: without a dependency write depid=-1 deps=-1")
            if step.type == "nop":
                self.fail(
                    f"{where}: a nop without a dependency shifts the runtime's step counter, "
                    "so later deps point at the wrong step"
                )
            return
        if step.depid > MAX_DEPID:
            self.fail(
                f"{where}: depid={step.depid} does not fit the runtimes' int8 (max {MAX_DEPID})"
            )
            return
        target = by_id.get(step.depid)
        if target is None:
            self.fail(
                f"{where}: depid={step.depid} names no threadblock of gpu {gpu.id} (waits forever)"
            )
            return
        if target.id == tb.id:
            if step.deps >= step.index:
                self.fail(
                    f"{where}: depends on a later step of its own threadblock (waits forever)"
                )
            else:
                self.report.warnings.append(f"{where}: depends on its own threadblock (redundant)")
            return
        if not 0 <= step.deps < len(target.steps):
            self.fail(f"{where}: deps={step.deps} is not a step of gpu {gpu.id} tb {target.id}")
            return
        awaited = target.steps[step.deps]
        if awaited.type == "nop" or not awaited.hasdep:
            self.fail(
                f"{where}: waits for {StepRef.of(gpu, target, awaited)}, which never signals "
                "(needs hasdep=1 and not a nop)"
            )

    def reduction_fusion(self, gpu: Gpu, tb: ThreadBlock) -> None:
        """Consecutive ``re`` into one slot run as one fused reduction (legacy loader rule)."""
        group: list[Step] = []
        reductions = 0
        for step in tb.steps:
            continues = (
                step.type == "re"
                and group
                and step.depid < 0
                and (group[-1].dstbuf, group[-1].dstoff, group[-1].srcbuf)
                == (step.dstbuf, step.dstoff, step.srcbuf)
                and not group[-1].hasdep
                and reductions != 16
            )
            if continues:
                group.append(step)
            else:
                self.fused_group(gpu, tb, group)
                group = [step] if step.type == "re" else []
            reductions += step.type == "re"
            if step.type not in ("re", "nop"):
                self.fused_group(gpu, tb, group)
                group = []
        self.fused_group(gpu, tb, group)

    def fused_group(self, gpu: Gpu, tb: ThreadBlock, group: Sequence[Step]) -> None:
        if len(group) < 2:
            return
        first = StepRef.of(gpu, tb, group[0])
        if len({s.cnt for s in group}) > 1:
            self.fail(
                f"{first}: the runtimes fuse {len(group)} consecutive re steps into one with "
                "the last one's cnt, but their cnts differ"
            )
        if len(group) > 16:
            self.fail(f"{first}: {len(group)} fused re steps; the runtimes hold at most 16 sources")


_BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}
_PER_RANK_COLLS = (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_TO_ALL, K.GATHER, K.SCATTER)


def _check_matching(algorithm: Algorithm, report: CheckReport) -> bool:
    """Per connection the k-th send pairs with the k-th receive; their cnt must agree."""
    ends: dict[tuple[int, int, int], dict[str, list[StepRef | int]]] = defaultdict(
        lambda: {"send": [], "recv": []}
    )
    counts: dict[StepRef, int] = {}
    for gpu in algorithm.gpus:
        for tb in gpu.threadblocks:
            for step in tb.steps:
                ref = StepRef.of(gpu, tb, step)
                counts[ref] = step.cnt
                if step.kind.send:
                    ends[(gpu.id, tb.send, tb.chan)]["send"].append(ref)
                if step.kind.recv:
                    ends[(tb.recv, gpu.id, tb.chan)]["recv"].append(ref)
    before = report.error_count
    for (src, dst, chan), sides in sorted(ends.items()):
        sends, recvs = sides["send"], sides["recv"]
        for send, recv in zip(sends, recvs, strict=False):
            assert isinstance(send, StepRef) and isinstance(recv, StepRef)
            if counts[send] != counts[recv]:
                report.fail(
                    f"{send} sends cnt={counts[send]} but the matching {recv} receives "
                    f"cnt={counts[recv]}"
                )
        for extra in sends[len(recvs) :]:
            report.fail(f"{extra} sends to gpu {dst} on channel {chan}, but no receive matches it")
        for extra in recvs[len(sends) :]:
            report.fail(f"{extra} receives from gpu {src} on channel {chan}, but nothing is sent")
    return report.error_count == before


def _check_postcondition(
    algorithm: Algorithm,
    kind: CollectiveKind,
    inplace: bool,
    execution: Execution,
    root: int | None,
    mode: str,
    report: CheckReport,
) -> None:
    """Compare every output slot with the collective's postcondition (the buffer table of
    :mod:`tacos.formats.msccl.runtime`).

    A broadcast or reduce file does not say its root: any root that makes the
    result right is accepted (and recorded in ``report.root``) unless ``root`` is given.
    """
    roots = [root] if root is not None else list(range(algorithm.ngpus)) if kind.rooted else [0]
    fewest: list[str] | None = None
    for candidate in roots:
        problems = list(wrong_outputs(algorithm, kind, inplace, execution, candidate, mode))
        if not problems:
            report.root = candidate if kind.rooted else None
            suffix = f" with root {candidate}" if kind.rooted else ""
            report.checked.append(f"{mode}: race-free, postcondition holds{suffix}")
            return
        if fewest is None or len(problems) < len(fewest):
            fewest = problems
    for problem in fewest or []:
        report.fail(problem)
