"""MSCCL algorithm XML from a Schedule (``tacos-export --format msccl``).

The legacy NCCL-MSCCL interpreter, the MSCCL executor and RCCL run an
algorithm as threadblocks per GPU, each a sequence of steps that send to one
peer and receive from one peer over a channel's connections. Lowering a
schedule (a time-ordered list of chunk transfers) takes five decisions:

* **Buffers.** Chunk ``c`` of the collective lives at the MSCCL chunk offsets
  of the buffer table in :mod:`tacos.formats.msccl.runtime` (``nchunksperloop`` =
  the collective's chunk count, or R*C for All-to-All): where the collective
  puts its input (``i``) and where it
  wants its output (``o``). Data a rank only relays, or partial sums it does
  not keep, live in scratch (``s``). A reduction received into a slot adds to
  it in place (``rrc`` with src = the current partial); the first one reads
  the rank's own input, so the input buffer is never written. The same file
  is right for in-place calls, where the runtimes alias input and output
  (AG: ``i[c] = o[r*C+c]``, RS: ``o[c] = i[r*C+c]``, others ``o = i``): data
  a rank holds from the start but never receives (its own All-Gather chunks,
  a broadcast root's buffer) is first copied (``cpy``) to its output place, a
  no-op in place, and every later read uses the output. The executor file
  therefore serves both call kinds (All-to-All only out-of-place: its
  in-place aliasing overwrites unsent input). The legacy runtime takes one
  kind per file: it gets ``inplace="1"`` and no copy where input and output
  are the same memory.
* **Threadblocks.** Transfers of chunk ``c`` use channel ``c % nchannels``,
  so a chunk's whole route stays on one channel. Per GPU and channel there is
  one stream of receives per peer and one of sends per peer; a receive stream
  and a send stream share a threadblock when that lets a received chunk be
  forwarded in one fused step (``rcs``, ``rrs``, ``rrcs``), chosen greedily by
  how many steps fuse. Streams left over get threadblocks of their own, so
  independent links keep running in parallel (unless the runtime's
  threadblock limit forces them to pair up).
* **Order.** Every threadblock runs its steps in the schedule's time order,
  sends before receives at equal times (a step's data arrived strictly
  earlier). That order is one global order of all steps in which each step's
  dependencies come first, so executing it step by step never waits; and
  since a link carries one transfer at a time, a connection never holds more
  than two unreceived calls (one send plus one forwarded early by a fused
  step): Simple's two-call buffers suffice at any message size. Merged steps
  (below) stay within half of LL's eight. The export counts the calls queued
  on every connection along that order and refuses a program that would
  exceed its buffers (parallel links between two GPUs can).
* **Dependencies.** Each GPU's accesses to each buffer slot are replayed in
  that order; a step waits (``depid``/``deps``) for the last write of every
  slot it touches and, when it writes, for the reads since, if another
  threadblock did them. Waits implied by earlier waits are dropped; a step
  with several waits gets ``nop`` steps, one wait each, ahead of it, which
  keeps the runtimes' step counters aligned with the positions ``deps`` names.
* **Merging.** With LL/LL128, runs of consecutive same-type steps on
  contiguous chunks merge into one step with ``cnt`` up to 4 when the steps
  on the other side of their messages merge the same way and no other
  threadblock touches those chunks in between. Simple is never merged: a
  merged Simple step can overfill its two-call buffer.

When a limit of the runtime cannot be met (steps per threadblock,
threadblocks per GPU, peers per channel, ``depid`` range, XML elements per
rank, connection buffers) the export fails with a message naming the limit and what to change.
:mod:`tacos.formats.msccl.check` checks the result independently.

``-o DIR`` writes ``DIR/<name>.xml``; ``-o FILE.xml`` writes that file.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters.base import ExportResult, Writer
from tacos.formats.arguments import ArgumentAdder
from tacos.formats.msccl import (
    FIFO_CALLS,
    MAX_COUNT,
    MAX_DEPID,
    MAX_NODES_PER_RANK,
    MAX_TBS_PER_CHANNEL,
    PROTOCOLS,
    RUNTIMES,
    STEP_TYPES,
    Algorithm,
    Gpu,
    Runtime,
    Step,
    ThreadBlock,
    call_modes,
    in_place_slot,
    to_xml,
    user_buffer_chunks,
)
from tacos.output import (
    check_file_in_directory,
    check_file_target,
    check_named_file,
    write_bytes_atomic,
)
from tacos.schedule import Op, Schedule
from tacos.verify import verify

FORMAT_NAME = "msccl"
DEFAULT_RUNTIME = "executor"
K = CollectiveKind
Slot = tuple[str, int]
Key = tuple[float, int, int]
"""Canonical order of steps: (time, 0 for a send / 1 for a receive, message index)."""
_FIRST: Key = (-math.inf, 0, 0)


@dataclass(frozen=True)
class MscclOptions:
    """``--nchannels``, ``--proto`` and ``--msccl-runtime``, checked when made."""

    nchannels: int = 1
    proto: str = "Simple"
    runtime: str = DEFAULT_RUNTIME

    def __post_init__(self) -> None:
        if self.proto not in PROTOCOLS:
            raise TacosError(f"--proto {self.proto}: use one of {', '.join(PROTOCOLS)}")
        if self.runtime not in RUNTIMES:
            raise TacosError(f"--msccl-runtime {self.runtime}: use one of {', '.join(RUNTIMES)}")
        limit = RUNTIMES[self.runtime].max_channels
        if not 1 <= self.nchannels <= limit:
            raise TacosError(
                f"--nchannels {self.nchannels}: the {self.runtime} runtime has 1..{limit}"
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MscclOptions:
        return cls(nchannels=args.nchannels, proto=args.proto, runtime=args.msccl_runtime)


def add_arguments(parser: ArgumentAdder) -> None:
    parser.add_argument("--nchannels", type=int, default=1, help="channels to spread chunks over")
    parser.add_argument("--proto", choices=PROTOCOLS, default="Simple", help="protocol")
    parser.add_argument(
        "--msccl-runtime",
        choices=sorted(RUNTIMES),
        default=DEFAULT_RUNTIME,
        help="executor (msccl-executor-nccl; also what RCCL reads, rccl applies its "
        "tighter limits) or legacy (the NCCL 2.12 MSCCL interpreter)",
    )


SIGNATURE = b'<algo name="tacos_'
"""How every program this writer makes begins (its name starts ``tacos_``): the file it
names in a directory replaces only such a file."""


def check_target(out: Path, options: MscclOptions) -> None:
    """``-o FILE.xml``, or a directory that gets ``<algorithm name>.xml``."""
    if out.suffix.lower() == ".xml":
        check_file_target(out)
    elif out.exists() and not out.is_dir():
        raise TacosError(f"{out}: is not a directory or a .xml file; give -o a .xml file name")
    else:
        check_file_in_directory(out)


def export(
    schedules: Sequence[Schedule], out: Path, options: MscclOptions = MscclOptions()
) -> ExportResult:
    """Write the algorithm XML, replaced atomically; several tenants (``--groups``) are
    several communicators, so each gets a program of its own (``..._tenant<i>.xml``,
    its ranks numbered from 0), all into the directory ``out``."""
    if len(schedules) > 1 and out.suffix.lower() == ".xml":
        raise TacosError(
            f"{out}: {len(schedules)} tenants are {len(schedules)} MSCCL programs (one per "
            "communicator); give a directory for -o"
        )
    programs = [lower(schedule, options) for schedule in schedules]
    if len(programs) > 1:
        programs = [
            replace(
                program,
                name=f"{program.name}_tenant{index}",
                source=f"{program.name}_tenant{index}.xml",
            )
            for index, program in enumerate(programs)
        ]
    targets = [
        out
        if out.suffix.lower() == ".xml"
        # a name of our own: replace only a file we wrote
        else check_named_file(out / f"{program.name}.xml", (SIGNATURE,))
        for program in programs
    ]
    for program, target in zip(programs, targets, strict=True):
        write_bytes_atomic(target, to_xml(program))
    return ExportResult(
        files=targets,
        ranks=sum(program.ngpus for program in programs),
        notes=[note for program in programs for note in notes(program, options)],
    )


def notes(program: Algorithm, options: MscclOptions) -> list[str]:
    """What the export summary says of a lowered program: its size against the limits."""
    steps = max((len(tb.steps) for g in program.gpus for tb in g.threadblocks), default=0)
    tbs = max(len(g.threadblocks) for g in program.gpus)
    rt = RUNTIMES[options.runtime]
    served = call_modes(program, rt)
    modes = " and ".join(
        m for m, inplace in (("in-place", True), ("out-of-place", False)) if inplace in served
    )
    return [
        f"{rt.name} runtime, {program.proto}: up to {tbs} threadblocks per GPU "
        f"(limit {rt.max_threadblocks}), {steps} steps per threadblock (limit "
        f"{rt.max_steps}), {program.nchannels} channel(s); serves {modes} {program.coll} calls"
    ]


# ================================================================ the plan
# The lowering's working state: steps that still carry the messages they move and
# the steps they wait for. Numbered at the end, they become the program model
# (:mod:`tacos.formats.msccl.model`) that the writer, the reader and the checker share.
@dataclass(eq=False)
class _Message:
    """A chunk going from one rank to another (a transfer, or a route through switches)."""

    index: int
    src: int
    dst: int
    chunk: int
    op: Op
    time: float
    deps: tuple[int, ...]
    channel: int = 0

    def key(self, receiving: bool) -> Key:
        return (self.time, int(receiving), self.index)


@dataclass(eq=False)
class _PlannedStep:
    """One step before numbering; ``recvs``/``sends`` are the messages it moves, in order."""

    type: str
    key: Key
    src: Slot | None = None
    dst: Slot | None = None
    cnt: int = 1
    recvs: list[_Message] = field(default_factory=list)
    sends: list[_Message] = field(default_factory=list)
    tb: _PlannedThreadBlock | None = None
    waits: list[_PlannedStep] = field(default_factory=list)
    signals: bool = False

    def slots(self) -> tuple[list[Slot], list[Slot]]:
        """(reads, writes) of buffer slots."""
        kind = STEP_TYPES[self.type]
        reads = _span(self.src, self.cnt) if kind.reads_src else []
        writes = _span(self.dst, self.cnt) if kind.writes_dst else []
        return reads, writes


def _span(slot: Slot | None, cnt: int) -> list[Slot]:
    assert slot is not None
    return [(slot[0], slot[1] + k) for k in range(cnt)]


@dataclass(eq=False)
class _PlannedThreadBlock:
    send: int
    recv: int
    chan: int
    steps: list[_PlannedStep] = field(default_factory=list)
    id: int = -1


@dataclass
class _PlannedGpu:
    id: int
    sizes: dict[str, int]
    threadblocks: list[_PlannedThreadBlock] = field(default_factory=list)


# ================================================================ lowering
def lower(schedule: Schedule, options: MscclOptions | None = None) -> Algorithm:
    """The schedule as an MSCCL program for one runtime, protocol and channel count.

    Raises :class:`TacosError` when the schedule does not verify (the lowering
    relies on its causality and link exclusivity) or does not fit the runtime.
    """
    options = options or MscclOptions()
    report = verify(schedule)
    if not report.ok:
        raise TacosError(
            f"the schedule does not verify ({report.errors[0]}); MSCCL export needs a "
            "correct schedule"
        )
    return _Lowering(schedule, options).run()


class _Lowering:
    """The decisions of the module docstring, in order: messages, slots, threadblocks,
    merging, waits, numbering."""

    def __init__(self, schedule: Schedule, options: MscclOptions) -> None:
        self.schedule, self.options = schedule, options
        self.spec = schedule.collective
        self.runtime = RUNTIMES[options.runtime]
        if self.spec.kind not in self.runtime.colls.values():
            raise TacosError(
                f"the {options.runtime} runtime has no {self.spec.kind} collective; "
                "use --msccl-runtime executor"
            )
        self.layout = _Layout(self.spec, self.runtime)
        self.messages = _messages(schedule)
        for message in self.messages:
            message.channel = message.chunk % options.nchannels
        self.channels_used = 1 + max((m.channel for m in self.messages), default=0)
        self.send_step: dict[int, _PlannedStep] = {}
        self.recv_step: dict[int, _PlannedStep] = {}

    def run(self) -> Algorithm:
        spec, layout = self.spec, self.layout
        plans = [_SlotPlan(self.layout, g, self.messages) for g in range(spec.num_ranks)]
        gpus = []
        for rank, plan in enumerate(plans):
            gpu = _PlannedGpu(rank, layout.sizes(plan.scratch))
            gpu.threadblocks = self._threadblocks(rank, plan)
            gpus.append(gpu)
        capacity = FIFO_CALLS[self.options.proto]
        if capacity // 2 > 1:
            _merge_runs(gpus, self.send_step, self.recv_step, capacity // 2)
        _check_buffering(gpus, self.options.proto)
        for gpu in gpus:
            _add_waits(gpu)
            self._number(gpu)
        name = re.sub(
            r"[^A-Za-z0-9_.-]+",
            "-",
            f"tacos_{layout.coll}_{self.schedule.topology.name or 'topology'}_"
            f"{self.options.proto}_ch{self.channels_used}",
        )[:120]
        executor = self.runtime.executor_format
        return Algorithm(
            source=f"{name}.xml",
            name=name,
            proto=self.options.proto,
            nchannels=self.channels_used,
            nchunksperloop=layout.nchunks,
            ngpus=len(gpus),
            coll=layout.coll,
            inplace=int(layout.inplace),
            outofplace=int(layout.outofplace) if executor else None,
            min_bytes=0 if executor else None,
            max_bytes=0 if executor else None,
            gpus=tuple(_gpu_model(gpu) for gpu in gpus),
        )

    # ------------------------------------------------------------ threadblocks
    def _threadblocks(self, rank: int, plan: _SlotPlan) -> list[_PlannedThreadBlock]:
        """Pair receive and send streams per channel where steps fuse; build their steps."""
        recv_streams: dict[tuple[int, int], list[_Message]] = defaultdict(list)
        send_streams: dict[tuple[int, int], list[_Message]] = defaultdict(list)
        for m in self.messages:
            if m.dst == rank:
                recv_streams[(m.channel, m.src)].append(m)
            if m.src == rank:
                send_streams[(m.channel, m.dst)].append(m)
        weights = _fusion_weights(recv_streams, send_streams, plan)
        pairs: dict[tuple[int, int], int] = {}  # (channel, recv peer) -> send peer
        taken: set[tuple[int, int]] = set()
        for (chan, q, p), _ in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0])):
            if (chan, q) not in pairs and (chan, p) not in taken:
                pairs[(chan, q)] = p
                taken.add((chan, p))
        lone_recvs = [k for k in sorted(recv_streams) if k not in pairs]
        lone_sends = [k for k in sorted(send_streams) if k not in taken]
        excess = len(pairs) + len(lone_recvs) + len(lone_sends) - self.runtime.max_threadblocks
        for chan, q in list(lone_recvs):
            partner = next((k for k in lone_sends if k[0] == chan), None)
            if excess <= 0:
                break
            if partner is None:
                continue
            pairs[(chan, q)] = partner[1]
            lone_recvs.remove((chan, q))
            lone_sends.remove(partner)
            excess -= 1
        self._check_channel_fan_out(rank, recv_streams, send_streams)
        blocks = [_PlannedThreadBlock(p, q, chan) for (chan, q), p in pairs.items()]
        blocks += [_PlannedThreadBlock(-1, q, chan) for chan, q in lone_recvs]
        blocks += [_PlannedThreadBlock(p, -1, chan) for chan, p in lone_sends]
        for tb in blocks:
            events = [(m.key(True), m, True) for m in recv_streams.get((tb.chan, tb.recv), [])]
            events += [(m.key(False), m, False) for m in send_streams.get((tb.chan, tb.send), [])]
            tb.steps = self._steps(sorted(events, key=lambda e: e[0]), plan)
            for step in tb.steps:
                step.tb = tb
        self._place_local_copies(rank, plan, blocks)
        if len(blocks) > self.runtime.max_threadblocks:
            raise TacosError(
                f"gpu {rank} needs {len(blocks)} threadblocks but the {self.runtime.name} "
                f"runtime allows {self.runtime.max_threadblocks}; use fewer --nchannels"
                + (" or --msccl-runtime executor" if self.runtime.name == "rccl" else "")
            )
        blocks.sort(key=lambda tb: (tb.send, tb.recv, tb.chan))
        for index, tb in enumerate(blocks):
            tb.id = index
        return blocks

    def _check_channel_fan_out(
        self,
        rank: int,
        recv_streams: dict[tuple[int, int], list[_Message]],
        send_streams: dict[tuple[int, int], list[_Message]],
    ) -> None:
        for direction, streams in (("receives from", recv_streams), ("sends to", send_streams)):
            per_channel: dict[int, int] = defaultdict(int)
            for chan, _ in streams:
                per_channel[chan] += 1
            for chan, peers in per_channel.items():
                if peers > MAX_TBS_PER_CHANNEL:
                    raise TacosError(
                        f"gpu {rank} {direction} {peers} peers on channel {chan}; the runtimes "
                        f"connect at most {MAX_TBS_PER_CHANNEL} per channel and direction, so "
                        "this topology's fan-out cannot be expressed in MSCCL"
                    )

    def _steps(
        self, events: Sequence[tuple[Key, _Message, bool]], plan: _SlotPlan
    ) -> list[_PlannedStep]:
        """A threadblock's steps: its events in order, a receive fused with the next send
        when that send forwards exactly what the receive left."""
        steps: list[_PlannedStep] = []
        i = 0
        while i < len(events):
            key, message, receiving = events[i]
            if not receiving:
                step = _PlannedStep("s", key, src=plan.send_src[message.index], sends=[message])
                self.send_step[message.index] = step
                steps.append(step)
                i += 1
                continue
            recv = plan.recv[message.index]
            after = events[i + 1][1] if i + 1 < len(events) and not events[i + 1][2] else None
            fused = after is not None and plan.forwards(message, after)
            if recv.src is None:
                step = _PlannedStep("rcs" if fused else "r", key, dst=recv.dst)
            elif fused and not recv.keep_when_forwarded:
                step = _PlannedStep("rrs", key, src=recv.src)
            else:
                step = _PlannedStep("rrcs" if fused else "rrc", key, src=recv.src, dst=recv.dst)
            step.recvs.append(message)
            self.recv_step[message.index] = step
            if fused:
                assert after is not None
                step.sends.append(after)
                self.send_step[after.index] = step
            steps.append(step)
            i += 2 if fused else 1
        return steps

    def _place_local_copies(
        self, rank: int, plan: _SlotPlan, blocks: list[_PlannedThreadBlock]
    ) -> None:
        """Put each start-up copy first in the threadblock that reads its output earliest."""
        for src, dst, cnt in plan.copies:
            targets = set(_span(dst, cnt))
            readers = [
                (step.key, tb_index)
                for tb_index, tb in enumerate(blocks)
                for step in tb.steps
                if targets & set(step.slots()[0])
            ]
            if readers:
                home = blocks[min(readers)[1]]
            else:
                home = _PlannedThreadBlock(-1, -1, 0)
                blocks.append(home)
            for offset in range(0, cnt, MAX_COUNT):
                piece = min(MAX_COUNT, cnt - offset)
                copy = _PlannedStep(
                    "cpy",
                    _FIRST,
                    src=(src[0], src[1] + offset),
                    dst=(dst[0], dst[1] + offset),
                    cnt=piece,
                    tb=home,
                )
                home.steps.insert(offset // MAX_COUNT, copy)

    # ------------------------------------------------------------ numbering
    def _number(self, gpu: _PlannedGpu) -> None:
        """Expand extra waits into nops, then check the runtime's limits."""
        rt = self.runtime
        for tb in gpu.threadblocks:
            expanded: list[_PlannedStep] = []
            for step in tb.steps:
                for wait in step.waits[:-1]:
                    expanded.append(_PlannedStep("nop", step.key, tb=tb, waits=[wait]))
                step.waits = step.waits[-1:]
                expanded.append(step)
            tb.steps = expanded
        for tb in gpu.threadblocks:
            where = (
                f"gpu {gpu.id} threadblock {tb.id} (send {tb.send}, recv {tb.recv}, "
                f"channel {tb.chan})"
            )
            if len(tb.steps) > rt.max_steps:
                raise TacosError(
                    f"{where} needs {len(tb.steps)} steps but the {rt.name} runtime allows "
                    f"{rt.max_steps} per threadblock; use more --nchannels, fewer --chunks-per-npu"
                    + (", or --msccl-runtime legacy (256)" if rt.max_steps < 256 else "")
                )
            for step in tb.steps:
                for wait in step.waits:
                    assert wait.tb is not None
                    if wait.tb.id > MAX_DEPID:
                        raise TacosError(
                            f"{where} waits for threadblock {wait.tb.id}, but depid holds only "
                            f"0..{MAX_DEPID}; use fewer --nchannels"
                        )
        nodes = 1 + self.spec.num_ranks + len(gpu.threadblocks)
        nodes += sum(len(tb.steps) for tb in gpu.threadblocks)
        if nodes > MAX_NODES_PER_RANK:
            raise TacosError(
                f"gpu {gpu.id} needs {nodes} XML elements; the runtimes' parser reads at most "
                f"{MAX_NODES_PER_RANK} per rank: use fewer --chunks-per-npu or --nchannels"
            )


# ================================================================ the program model
def _gpu_model(gpu: _PlannedGpu) -> Gpu:
    sizes = gpu.sizes
    threadblocks = tuple(
        ThreadBlock(
            tb.id,
            tb.send,
            tb.recv,
            tb.chan,
            tuple(_step_model(position, step) for position, step in enumerate(tb.steps)),
        )
        for tb in gpu.threadblocks
    )
    return Gpu(gpu.id, sizes["i"], sizes["o"], sizes["s"], threadblocks)


def _step_model(position: int, step: _PlannedStep) -> Step:
    """The step as numbered; ``nop`` and one-sided steps fill the unused buffer side
    as the runtimes expect (a ``nop`` names no slot, the others mirror the used side)."""
    if step.type == "nop":
        src: Slot = ("i", -1)
        dst: Slot = ("o", -1)
        cnt = 0
    else:
        used = step.src or step.dst
        assert used is not None
        src, dst, cnt = step.src or used, step.dst or used, step.cnt
    wait = step.waits[-1] if step.waits else None
    return Step(
        index=position,
        s=position,
        type=step.type,
        srcbuf=src[0],
        srcoff=src[1],
        dstbuf=dst[0],
        dstoff=dst[1],
        cnt=cnt,
        depid=wait.tb.id if wait and wait.tb else -1,
        deps=wait.tb.steps.index(wait) if wait and wait.tb else -1,
        hasdep=int(step.signals),
    )


# ================================================================ messages
def _messages(schedule: Schedule) -> list[_Message]:
    """Rank-to-rank messages (:meth:`Schedule.messages`: MSCCL sees no switches).

    A message starts when its first hop does and carries its last hop's op; it
    depends on the messages that brought its data to the sending rank.
    """
    spec, transfers = schedule.collective, schedule.transfers
    rank_of = {npu: i for i, npu in enumerate(spec.ranks)}
    chains = schedule.messages()
    message_of = {chain[-1]: index for index, chain in enumerate(chains)}
    messages = []
    for index, chain in enumerate(chains):
        head, last = transfers[chain[0]], transfers[chain[-1]]
        if head.src not in rank_of or last.dst not in rank_of:
            outsider = head.src if head.src not in rank_of else last.dst
            raise TacosError(
                f"transfer {chain[-1]} involves NPU {outsider}, which is not a rank of the "
                "collective; MSCCL algorithms run only on the communicator's GPUs"
            )
        deps = tuple(sorted({message_of[d] for d in head.deps}))
        messages.append(
            _Message(
                index, rank_of[head.src], rank_of[last.dst], last.chunk, last.op, head.start, deps
            )
        )
    return messages


# ================================================================ buffers
class _Layout:
    """Where each chunk of the collective lives in the MSCCL buffers (the buffer table of
    :mod:`tacos.formats.msccl.runtime`)."""

    def __init__(self, spec: Collective, runtime: Runtime) -> None:
        self.spec, self.kind = spec, spec.kind
        ranks, c = spec.num_ranks, spec.chunks_per_rank
        self.per_rank = c
        self.nchunks = ranks * c if self.kind is K.ALL_TO_ALL else spec.num_chunks
        self.user_chunks = user_buffer_chunks(self.kind, self.nchunks, ranks)
        self.coll = runtime.coll_name(self.kind)
        self.outofplace = True
        self.inplace = self.kind is not K.ALL_TO_ALL
        if not runtime.executor_format:
            self.outofplace = not self.inplace
        self.starts = {(spec.rank_index(n), ch) for n, ch, _ in spec.initial_data()}
        self.ends = {(spec.rank_index(n), ch) for n, ch, _ in spec.final_data()}

    def input_slot(self, rank: int, chunk: int) -> Slot | None:
        """Where a rank's data for ``chunk`` is when the call starts (None: nowhere).

        A file that serves only in-place calls names it by its output place when
        that is the same memory, which saves the start-up copy.
        """
        if (rank, chunk) not in self.starts:
            return None
        slot = ("i", chunk % self.user_chunks["i"])
        final = self.output_slot(rank, chunk)
        if (
            not self.outofplace
            and final is not None
            and self._memory(rank, slot) == self._memory(rank, final)
        ):
            return final
        return slot

    def _memory(self, rank: int, slot: Slot) -> Slot:
        return in_place_slot(self.kind, self.nchunks, self.spec.num_ranks, rank, *slot)

    def output_slot(self, rank: int, chunk: int) -> Slot | None:
        """Where the postcondition wants ``chunk`` on ``rank`` (None: nowhere)."""
        if (rank, chunk) not in self.ends:
            return None
        if self.kind in (K.REDUCE_SCATTER, K.SCATTER):
            return ("o", chunk % self.per_rank)
        if self.kind is K.ALL_TO_ALL:
            source = chunk // self.nchunks
            return ("o", source * self.per_rank + chunk % self.per_rank)
        return ("o", chunk)

    def sizes(self, scratch: int) -> dict[str, int]:
        """Chunks of each buffer as the gpu element declares them."""
        return {**self.user_chunks, "s": scratch}


@dataclass
class _Receive:
    """How a received chunk is stored: ``src`` is the partial it adds to (None: a copy)."""

    dst: Slot
    src: Slot | None
    keep_when_forwarded: bool = True


class _SlotPlan:
    """One rank's buffer slots for every message end, from its events in time order.

    ``recv``/``send_src`` map message indices to slots; ``copies`` are start-up
    copies (src, dst, cnt) of data a rank holds but never receives, to where its
    output must be; ``scratch`` counts the scratch chunks relayed data needs.
    """

    def __init__(self, layout: _Layout, rank: int, messages: Sequence[_Message]) -> None:
        self.rank = rank
        events: dict[int, list[tuple[Key, _Message, bool]]] = defaultdict(list)
        for m in messages:
            if m.dst == rank:
                events[m.chunk].append((m.key(True), m, True))
            if m.src == rank:
                events[m.chunk].append((m.key(False), m, False))
        self.recv: dict[int, _Receive] = {}
        self.send_src: dict[int, Slot] = {}
        self.last_recv_before: dict[int, _Message] = {}
        relayed = [
            c
            for c in sorted(events)
            if layout.output_slot(rank, c) is None and any(e[2] for e in events[c])
        ]
        scratch = {c: i for i, c in enumerate(relayed)}
        self.scratch = len(relayed)
        copies = []
        for chunk in range(layout.spec.num_chunks):
            chunk_events = sorted(events.get(chunk, []), key=lambda e: e[0])
            final = layout.output_slot(rank, chunk)
            where = layout.input_slot(rank, chunk)
            if final and where and where != final and not any(e[2] for e in chunk_events):
                copies.append((where, final))
                where = final
            work = final or ("s", scratch.get(chunk, -1))
            self._walk(chunk, chunk_events, where, work, kept=final is not None)
        self.copies = _contiguous(copies)

    def _walk(
        self,
        chunk: int,
        events: Sequence[tuple[Key, _Message, bool]],
        where: Slot | None,
        work: Slot,
        *,
        kept: bool,
    ) -> None:
        """Follow where the rank's data for ``chunk`` is as messages arrive and leave."""
        last_recv: _Message | None = None
        for i, (_, message, receiving) in enumerate(events):
            if not receiving:
                if where is None:
                    raise TacosError(f"rank {self.rank} sends chunk {chunk} before holding it")
                self.send_src[message.index] = where
                if last_recv is not None:
                    self.last_recv_before[message.index] = last_recv
                continue
            last_recv = message
            if message.op is Op.COPY:
                self.recv[message.index] = _Receive(work, None)
            elif where is None:
                raise TacosError(f"rank {self.rank} reduces into chunk {chunk} before holding it")
            else:
                self.recv[message.index] = _Receive(work, where, _read_twice(events[i + 1 :], kept))
            where = work

    def forwards(self, recv: _Message, send: _Message) -> bool:
        """Whether ``send`` sends exactly the data ``recv`` leaves (so they may fuse)."""
        return (
            self.last_recv_before.get(send.index) is recv
            and recv.index in send.deps
            and send.chunk == recv.chunk
        )


def _read_twice(later: Sequence[tuple[Key, _Message, bool]], kept: bool) -> bool:
    """Whether a received sum is read again after the send that may forward it, or kept.

    When it is not, the receive and that send fuse into ``rrs``, which never stores it.
    """
    reads = 0
    for _, message, receiving in later:
        if receiving and message.op is Op.COPY:
            return reads > 1
        reads += 1
    return reads > 1 or kept


def _contiguous(copies: Sequence[tuple[Slot, Slot]]) -> list[tuple[Slot, Slot, int]]:
    """Runs of slot copies that move consecutive chunks, as (src, dst, cnt)."""
    runs: list[tuple[Slot, Slot, int]] = []
    for src, dst in sorted(copies):
        if runs:
            s, d, n = runs[-1]
            if (s[0], s[1] + n) == src and (d[0], d[1] + n) == dst:
                runs[-1] = (s, d, n + 1)
                continue
        runs.append((src, dst, 1))
    return runs


def _fusion_weights(
    recv_streams: dict[tuple[int, int], list[_Message]],
    send_streams: dict[tuple[int, int], list[_Message]],
    plan: _SlotPlan,
) -> dict[tuple[int, int, int], int]:
    """For each (channel, recv peer, send peer): how many steps would fuse in one threadblock.

    A receive fuses with a send that forwards its data when nothing of either
    stream falls between them in time.
    """
    next_recv: dict[int, Key] = {}
    for stream in recv_streams.values():
        for a, b in zip(stream, [*stream[1:], None], strict=True):
            next_recv[a.index] = b.key(True) if b else (math.inf, 0, 0)
    weights: dict[tuple[int, int, int], int] = defaultdict(int)
    for (chan, peer), stream in send_streams.items():
        for before, send in zip([None, *stream[:-1]], stream, strict=True):
            recv = plan.last_recv_before.get(send.index)
            if recv is None or recv.channel != chan or not plan.forwards(recv, send):
                continue
            previous = before.key(False) if before else _FIRST
            if previous < recv.key(True) and next_recv[recv.index] > send.key(False):
                weights[(chan, recv.src, peer)] += 1
    return weights


def _check_buffering(gpus: Sequence[_PlannedGpu], proto: str) -> None:
    """Refuse programs whose connections would need more buffered calls than ``proto`` has.

    In the canonical order every step's waits and messages come first, so the
    program cannot deadlock if, along that order, no connection ever holds
    more calls than it buffers (counting ``cnt`` calls per step, as for the
    largest messages). Exclusive links keep this at two calls; parallel links
    between two GPUs can exceed it.
    """
    capacity = FIFO_CALLS[proto]
    changes: dict[tuple[int, int, int], list[tuple[Key, int]]] = defaultdict(list)
    for gpu in gpus:
        for tb in gpu.threadblocks:
            for step in tb.steps:
                if step.sends:
                    changes[(gpu.id, tb.send, tb.chan)].append((step.key, len(step.sends)))
                if step.recvs:
                    changes[(tb.recv, gpu.id, tb.chan)].append((step.key, -len(step.recvs)))
    for (src, dst, chan), steps in sorted(changes.items()):
        queued = 0
        for _, change in sorted(steps):
            queued += change
            if queued > capacity:
                raise TacosError(
                    f"gpu {src} would queue {queued} calls to gpu {dst} on channel {chan}, but "
                    f"a {proto} connection buffers {capacity} (several messages share a "
                    "connection at once, e.g. over parallel links); use --proto LL or LL128 "
                    "(8 calls) or more --nchannels"
                )


# ================================================================ dependencies
def _add_waits(gpu: _PlannedGpu) -> None:
    """Make every step wait for the conflicting accesses of other threadblocks before it.

    Steps are replayed in their canonical order (a global order in which every
    wait points backwards); for each slot the last write and the reads since
    are remembered. A wait is dropped when the threadblock already knows (from
    its program order or earlier waits, transitively) that the step finished.
    """
    order = sorted(
        (
            (step.key, tb_index, position, step)
            for tb_index, tb in enumerate(gpu.threadblocks)
            for position, step in enumerate(tb.steps)
        ),
        key=lambda e: e[:3],
    )
    position_of = {id(step): position for _, _, position, step in order}
    tb_index_of = {id(tb): index for index, tb in enumerate(gpu.threadblocks)}

    def rank(step: _PlannedStep) -> tuple[Key, int, int]:
        """The canonical order, made total (start-up copies share a key)."""
        assert step.tb is not None
        return step.key, tb_index_of[id(step.tb)], position_of[id(step)]

    last_write: dict[Slot, _PlannedStep] = {}
    reads_since: dict[Slot, list[_PlannedStep]] = defaultdict(list)
    known_after: dict[int, dict[int, int]] = {}
    known_in_tb: dict[int, dict[int, int]] = defaultdict(dict)
    for _, tb_index, position, step in order:
        reads, writes = step.slots()
        conflicts: list[_PlannedStep] = []
        for slot in reads + writes:
            if slot in last_write:
                conflicts.append(last_write[slot])
        for slot in writes:
            conflicts.extend(reads_since[slot])
        known = dict(known_in_tb[tb_index])
        for other in sorted({id(s): s for s in conflicts}.values(), key=rank, reverse=True):
            assert other.tb is not None
            if other.tb is step.tb:
                continue
            other_tb = tb_index_of[id(other.tb)]
            if known.get(other_tb, -1) >= position_of[id(other)]:
                continue
            step.waits.append(other)
            other.signals = True
            for tb, done in known_after[id(other)].items():
                known[tb] = max(known.get(tb, -1), done)
        known[tb_index] = position
        known_after[id(step)] = known
        known_in_tb[tb_index] = known
        for slot in reads:
            reads_since[slot].append(step)
        for slot in writes:
            last_write[slot] = step
            reads_since[slot] = []
    for step in (s for tb in gpu.threadblocks for s in tb.steps):
        step.waits.sort(key=rank)


# ================================================================ merging
def _merge_runs(
    gpus: Sequence[_PlannedGpu],
    send_step: dict[int, _PlannedStep],
    recv_step: dict[int, _PlannedStep],
    cap: int,
) -> None:
    """Merge runs of adjacent steps into steps with ``cnt`` up to ``cap`` (see module doc).

    A pair of adjacent steps is a candidate when both have the same type, move
    consecutive chunks on both sides, and no other threadblock touches the
    later step's chunks between the earliest step of its block and it. A
    candidate survives only if the steps at the other end of both its messages
    form a surviving candidate too, so senders and receivers merge alike; runs
    are then cut into blocks of ``cap`` from their
    start, which again matches on both ends.
    """
    touched: dict[tuple[int, Slot], list[tuple[Key, _PlannedThreadBlock, bool]]] = defaultdict(list)
    for gpu in gpus:
        for tb in gpu.threadblocks:
            for step in tb.steps:
                reads, writes = step.slots()
                for slot in reads:
                    touched[(gpu.id, slot)].append((step.key, tb, False))
                for slot in writes:
                    touched[(gpu.id, slot)].append((step.key, tb, True))
    follower: dict[int, _PlannedStep] = {}  # id(step) -> the step it may merge with
    for gpu in gpus:
        for tb in gpu.threadblocks:
            for i, (a, b) in enumerate(zip(tb.steps, tb.steps[1:], strict=False)):
                earliest_head = tb.steps[max(0, i + 2 - cap)]
                if _mergeable(a, b) and not _touched_between(gpu.id, tb, earliest_head, b, touched):
                    follower[id(a)] = b

    def partners_merge(a: _PlannedStep, b: _PlannedStep) -> bool:
        """Whether the steps at the other end of ``a``'s and ``b``'s messages merge too."""
        for mine, next_mine, theirs in (
            (a.recvs, b.recvs, send_step),
            (a.sends, b.sends, recv_step),
        ):
            if mine and follower.get(id(theirs[mine[0].index])) is not theirs[next_mine[0].index]:
                return False
        return True

    changed = True
    while changed:
        changed = False
        for gpu in gpus:
            for tb in gpu.threadblocks:
                for step in tb.steps:
                    follows = follower.get(id(step))
                    if follows is not None and not partners_merge(step, follows):
                        del follower[id(step)]
                        changed = True
    for gpu in gpus:
        for tb in gpu.threadblocks:
            merged: list[_PlannedStep] = []
            previous: _PlannedStep | None = None
            for step in tb.steps:
                if (
                    previous is not None
                    and follower.get(id(previous)) is step
                    and merged[-1].cnt < cap
                ):
                    head = merged[-1]
                    head.cnt += 1
                    head.recvs += step.recvs
                    head.sends += step.sends
                else:
                    merged.append(step)
                previous = step
            tb.steps = merged


def _touched_between(
    gpu: int,
    tb: _PlannedThreadBlock,
    a: _PlannedStep,
    b: _PlannedStep,
    touched: dict[tuple[int, Slot], list[tuple[Key, _PlannedThreadBlock, bool]]],
) -> bool:
    """Whether another threadblock reads what ``b`` writes, or writes what it touches,
    between ``a`` and ``b`` (so ``b`` cannot move up to ``a``'s place). ``a`` is the
    earliest step ``b`` could be merged into, ``cap - 1`` steps back."""
    reads, writes = b.slots()
    for slot, b_writes in [*((s, False) for s in reads), *((s, True) for s in writes)]:
        for key, other, other_writes in touched[(gpu, slot)]:
            if other is not tb and a.key < key < b.key and (b_writes or other_writes):
                return True
    return False


def _mergeable(a: _PlannedStep, b: _PlannedStep) -> bool:
    """Same type, one chunk each, and the next chunk on every buffer side."""
    if a.type != b.type or a.type == "cpy" or a.cnt != 1 or b.cnt != 1:
        return False
    return all(
        (x is None and y is None) or (x is not None and y is not None and (x[0], x[1] + 1) == y)
        for x, y in ((a.src, b.src), (a.dst, b.dst))
    )


WRITER = Writer(add_arguments, MscclOptions.from_args, check_target, export)
