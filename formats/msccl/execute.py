"""Symbolic execution of an MSCCL algorithm, as the GPU runtimes would run it.

Owns the runtimes' buffer layout (which slots alias in an in-place call), the
symbolic values buffer slots hold, the interpreter (:func:`execute`) and the
collectives' postconditions in terms of those values. It is separate from the
checker because the importer runs it for its event trace, and from the model
because it is the one place that decides what a step does at run time.

Every threadblock runs its steps in order, waits for the steps it depends on,
receives from and sends to connections that buffer only a few calls
(``FIFO_CALLS``); a step whose messages are large may be split into several
calls. Buffer slots hold symbolic values (which ranks' input chunks were summed
into them, or uninitialised data), and accesses to one slot by two
threadblocks that no dependency, message or program order puts one before the
other (vector clocks) are reported as races.

Because a step that can run stays runnable until its own threadblock runs it
(a connection has one sender and one receiver threadblock, flags only grow),
the steps that complete do not depend on the order in which threadblocks
run: executing one order decides deadlock for all (a Kahn process network).
The interpreters replay the whole program once per slice of the buffer, but
a later replay's messages queue behind the earlier one's and its waits are
for steps of the same replay, so one replay decides it too.

:func:`execute` also yields an event trace: every chunk each receive step
took, with the earlier receives whose data it carried.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacos.collective import CollectiveKind
from tacos.errors import TacosError
from tacos.formats.msccl.model import Algorithm, Gpu, Step, StepRef, ThreadBlock
from tacos.formats.msccl.runtime import FIFO_CALLS, KNOWN_COLLS, user_buffer_chunks

K = CollectiveKind


# ================================================================ buffer layout
def buffer_sizes(algorithm: Algorithm, kind: CollectiveKind | None, gpu: Gpu) -> dict[str, int]:
    """Chunks the user's buffers really have (input, output) and the declared scratch."""
    user = user_buffer_chunks(kind, algorithm.nchunksperloop, algorithm.ngpus)
    return {**user, "s": gpu.s_chunks}


def in_place_slot(
    kind: CollectiveKind | None, nchunks: int, ngpus: int, gpu: int, buf: str, offset: int
) -> tuple[str, int]:
    """The memory a buffer slot is in an in-place call, as the runtimes select them.

    All-Gather and Gather: ``i[c]`` is ``o[gpu*N/R + c]``; Reduce-Scatter and
    Scatter: ``o[c]`` is ``i[gpu*N/R + c]``; the others: ``o[c]`` is ``i[c]``.
    Scratch and unknown collectives alias nothing.
    """
    if buf == "s" or kind is None:
        return buf, offset
    per_rank = nchunks // ngpus
    if kind in (K.ALL_GATHER, K.GATHER):
        return ("o", gpu * per_rank + offset) if buf == "i" else (buf, offset)
    if kind in (K.REDUCE_SCATTER, K.SCATTER):
        return ("i", gpu * per_rank + offset) if buf == "o" else (buf, offset)
    return ("i", offset) if buf == "o" else (buf, offset)


def _alias(
    algorithm: Algorithm,
    kind: CollectiveKind | None,
    inplace: bool,
    gpu: int,
    buf: str,
    offset: int,
) -> tuple[str, int]:
    if not inplace:
        return buf, offset
    return in_place_slot(kind, algorithm.nchunksperloop, algorithm.ngpus, gpu, buf, offset)


# ================================================================ execution
Value = tuple[int, bool] | None
"""A slot's content: (bit set over rank*nchunksperloop + input chunk, some bit counted
twice), or None for uninitialised data."""


def _combine(a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    return a[0] | b[0], a[1] or b[1] or bool(a[0] & b[0])


def _merge(
    a: tuple[Value, frozenset[int]], b: tuple[Value, frozenset[int]]
) -> tuple[Value, frozenset[int]]:
    """Reduce two slot contents: values add up, their provenances join."""
    return _combine(a[0], b[0]), a[1] | b[1]


@dataclass(frozen=True)
class Delivery:
    """One chunk of one message as the receiving step took it (the event trace).

    ``sources`` are the earlier deliveries to ``src`` whose data the chunk carries
    (through local copies and reductions), i.e. what the transfer depends on.
    """

    index: int
    src: int
    dst: int
    channel: int
    sender: StepRef
    receiver: StepRef
    value: Value
    reduces: bool
    sources: frozenset[int]


@dataclass
class Execution:
    """What running an algorithm produced (see :func:`execute`)."""

    buffering: str
    deadlock: str | None = None
    races: list[str] = field(default_factory=list)
    input_writers: list[StepRef] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    final: dict[int, dict[tuple[str, int], tuple[Value, StepRef | None]]] = field(
        default_factory=dict
    )

    def slot(self, gpu: int, key: tuple[str, int]) -> tuple[Value, StepRef | None]:
        return self.final.get(gpu, {}).get(key, (None, None))


@dataclass
class _Action:
    """A step the interpreter executes (nops fold their dependency into the next one)."""

    step: Step
    ref: StepRef
    deps: tuple[tuple[int, int], ...]  # (global threadblock, position that must have signalled)
    recv_from: tuple[int, int, int] | None
    send_to: tuple[int, int, int] | None
    calls: int


@dataclass
class _Access:
    clock: int
    thread: int
    ref: StepRef


def execute(
    algorithm: Algorithm,
    *,
    inplace: bool,
    max_allowed_count: int | None = None,
    track_data: bool = False,
) -> Execution:
    """Run a structurally valid algorithm with finite connection buffers.

    With ``max_allowed_count`` None every step is one call; otherwise a step of
    ``cnt`` chunks is ``ceil(cnt / max_allowed_count)`` calls (large messages).
    ``track_data`` adds the symbolic buffer contents, the event trace and the race
    check (which uses only the orderings every buffering guarantees).
    """
    inputs = algorithm.ngpus * algorithm.nchunksperloop
    if track_data and inputs > MAX_TRACKED_INPUTS:
        raise TacosError(
            f"{algorithm.source}: {algorithm.ngpus} GPUs x nchunksperloop "
            f"{algorithm.nchunksperloop} are {inputs} input chunks to follow through every "
            f"buffer slot; tacos checks programs of at most {MAX_TRACKED_INPUTS}"
        )
    return _Machine(algorithm, inplace, max_allowed_count, track_data).run()


MAX_TRACKED_INPUTS = 1 << 16
"""GPUs times chunks per loop that tracking the data may follow. A slot's value is a bit per
input chunk, and every slot of every GPU has one, so memory grows with the square: at this
limit (256 GPUs x 256 chunks, an All-Reduce tacos exports on mesh2d:16x16) the check took 69 s
and 5.5 GB."""


class _Machine:
    """All threadblocks of all GPUs, run until every one finishes or none can move."""

    def __init__(
        self, algorithm: Algorithm, inplace: bool, max_allowed_count: int | None, track: bool
    ) -> None:
        self.a, self.inplace, self.track = algorithm, inplace, track
        self.kind = KNOWN_COLLS.get(algorithm.coll)
        self.capacity = FIFO_CALLS[algorithm.proto]
        calls = (
            "one call per step"
            if max_allowed_count is None
            else (f"steps split into calls of {max_allowed_count} chunk(s)")
        )
        self.result = Execution(f"{self.capacity}-call connection buffers and {calls}")
        threads = [
            (gpu, tb)
            for gpu in sorted(algorithm.gpus, key=lambda g: g.id)
            for tb in gpu.threadblocks
        ]
        self.threads = threads
        index = {(gpu.id, tb.id): g for g, (gpu, tb) in enumerate(threads)}
        self.programs = [self._program(gpu, tb, index, max_allowed_count) for gpu, tb in threads]
        count = len(threads)
        self.sender: dict[tuple[int, int, int], int] = {}
        self.receiver: dict[tuple[int, int, int], int] = {}
        for g, (gpu, tb) in enumerate(threads):
            if tb.send >= 0:
                self.sender[(gpu.id, tb.send, tb.chan)] = g
            if tb.recv >= 0:
                self.receiver[(tb.recv, gpu.id, tb.chan)] = g
        self.fifo: dict[tuple[int, int, int], deque[Any]] = defaultdict(deque)
        self.pc = [0] * count
        self.calls_done = [0] * count
        self.deps_met = [False] * count
        self.signalled = [-1] * count
        self.flag_waiters: dict[int, set[int]] = defaultdict(set)
        self.blocked: dict[int, tuple[str, Any]] = {}
        if track:
            self.clock = np.zeros((count, count), dtype=np.int64)
            self.signal_clock: dict[tuple[int, int], np.ndarray] = {}
            self.slots: dict[
                int, dict[tuple[str, int], tuple[Value, frozenset[int], StepRef | None]]
            ] = {gpu.id: self._initial_slots(gpu.id) for gpu in algorithm.gpus}
            self.writes: dict[tuple[int, tuple[str, int]], _Access] = {}
            self.reads: dict[tuple[int, tuple[str, int]], dict[int, _Access]] = defaultdict(dict)
            self.reported: set[tuple[StepRef, StepRef]] = set()

    # ------------------------------------------------------------ set-up
    def _program(
        self,
        gpu: Gpu,
        tb: ThreadBlock,
        index: Mapping[tuple[int, int], int],
        max_allowed_count: int | None,
    ) -> list[_Action]:
        actions, pending = [], []
        for step in tb.steps:
            if step.depid >= 0 and step.depid != tb.id:
                pending.append((index[(gpu.id, step.depid)], step.deps))
            if step.type == "nop":
                continue
            kind = step.kind
            split = 1 if max_allowed_count is None else math.ceil(step.cnt / max_allowed_count)
            actions.append(
                _Action(
                    step,
                    StepRef.of(gpu, tb, step),
                    tuple(pending),
                    (tb.recv, gpu.id, tb.chan) if kind.recv else None,
                    (gpu.id, tb.send, tb.chan) if kind.send else None,
                    split if kind.send or kind.recv else 1,
                )
            )
            pending = []
        return actions

    def _slot(self, gpu: int, buf: str, offset: int) -> tuple[str, int]:
        return _alias(self.a, self.kind, self.inplace, gpu, buf, offset)

    def _initial_slots(
        self, gpu: int
    ) -> dict[tuple[str, int], tuple[Value, frozenset[int], StepRef | None]]:
        n = self.a.nchunksperloop
        size = buffer_sizes(self.a, self.kind, self.a.gpu(gpu))["i"]
        return {
            self._slot(gpu, "i", k): ((1 << (gpu * n + k), False), frozenset(), None)
            for k in range(size)
        }

    # ------------------------------------------------------------ running
    def run(self) -> Execution:
        ready = deque(range(len(self.threads)))
        queued = [True] * len(self.threads)
        while ready:
            g = ready.popleft()
            queued[g] = False
            for woken in self._advance(g):
                if not queued[woken]:
                    queued[woken] = True
                    ready.append(woken)
        if self.blocked:
            self.result.deadlock = self._cycle()
        elif self.track:
            self.result.final = {
                gpu: {key: (value, writer) for key, (value, _, writer) in slots.items()}
                for gpu, slots in self.slots.items()
            }
        return self.result

    def _advance(self, g: int) -> list[int]:
        """Run threadblock ``g`` until it finishes or blocks; return whom it may have unblocked."""
        woken: list[int] = []
        program = self.programs[g]
        while self.pc[g] < len(program):
            action = program[self.pc[g]]
            if not self.deps_met[g]:
                for target, position in action.deps:
                    if self.signalled[target] < position:
                        self.blocked[g] = ("dep", (target, position))
                        self.flag_waiters[target].add(g)
                        return woken
                if self.track:
                    for target, position in action.deps:
                        np.maximum(
                            self.clock[g], self.signal_clock[(target, position)], out=self.clock[g]
                        )
                    self.clock[g, g] += 1
                self.deps_met[g] = True
            while self.calls_done[g] < action.calls:
                if action.recv_from is not None and not self.fifo[action.recv_from]:
                    self.blocked[g] = ("message", action.recv_from)
                    return woken
                if action.send_to is not None and len(self.fifo[action.send_to]) >= self.capacity:
                    self.blocked[g] = ("room", action.send_to)
                    return woken
                self._call(g, action)
                self.calls_done[g] += 1
                if action.recv_from is not None:
                    woken.append(self.sender[action.recv_from])
                if action.send_to is not None:
                    woken.append(self.receiver[action.send_to])
            if action.step.hasdep:
                self.signalled[g] = action.step.index
                if self.track:
                    self.signal_clock[(g, action.step.index)] = self.clock[g].copy()
                woken.extend(self.flag_waiters.pop(g, ()))
            self.pc[g] += 1
            self.calls_done[g] = 0
            self.deps_met[g] = False
        self.blocked.pop(g, None)
        return woken

    def _call(self, g: int, action: _Action) -> None:
        """One primitive call: take a message, compute, pass one on."""
        incoming = self.fifo[action.recv_from].popleft() if action.recv_from is not None else None
        payload = self._compute(g, action, incoming) if self.track else None
        if action.send_to is not None:
            self.fifo[action.send_to].append(
                (payload, self.clock[g].copy() if self.track else None, action.ref)
            )

    def _compute(
        self, g: int, action: _Action, incoming: Any
    ) -> list[tuple[Value, frozenset[int]]]:
        """The step's effect on the symbolic buffers; returns what it forwards."""
        step, kind, gpu = action.step, action.step.kind, action.ref.gpu
        received: list[tuple[Value, frozenset[int]]] = []
        if incoming is not None:
            data, clock, sender = incoming
            np.maximum(self.clock[g], clock, out=self.clock[g])
            for value, sources in data:
                index = len(self.result.deliveries)
                self.result.deliveries.append(
                    Delivery(
                        index,
                        sender.gpu,
                        gpu,
                        action.recv_from[2] if action.recv_from else 0,
                        sender,
                        action.ref,
                        value,
                        kind.reduces,
                        sources,
                    )
                )
                received.append((value, frozenset((index,))))
        out: list[tuple[Value, frozenset[int]]] = []
        for k in range(step.cnt):
            src = self._slot(gpu, step.srcbuf, step.srcoff + k)
            dst = self._slot(gpu, step.dstbuf, step.dstoff + k)
            local = self._read(g, action.ref, src) if kind.reads_src else (None, frozenset())
            if step.type == "re":
                result = _merge(self._read(g, action.ref, dst), local)
            elif kind.reduces:
                result = _merge(received[k], local)
            else:
                result = received[k] if kind.recv else local
            if kind.writes_dst:
                self._write(g, action.ref, dst, result)
            out.append(result)
        return out

    def _read(self, g: int, ref: StepRef, key: tuple[str, int]) -> tuple[Value, frozenset[int]]:
        slot = (ref.gpu, key)
        last = self.writes.get(slot)
        if last is not None and last.thread != g:
            self._race(g, ref, last, key, "reads", "writes")
        self.reads[slot][g] = _Access(int(self.clock[g, g]), g, ref)
        value, sources, _ = self.slots[ref.gpu].get(key, (None, frozenset(), None))
        return value, sources

    def _write(
        self, g: int, ref: StepRef, key: tuple[str, int], data: tuple[Value, frozenset[int]]
    ) -> None:
        slot = (ref.gpu, key)
        last = self.writes.get(slot)
        if last is not None and last.thread != g:
            self._race(g, ref, last, key, "writes", "writes")
        for reader in self.reads.pop(slot, {}).values():
            if reader.thread != g:
                self._race(g, ref, reader, key, "writes", "reads")
        self.writes[slot] = _Access(int(self.clock[g, g]), g, ref)
        self.slots[ref.gpu][key] = (data[0], data[1], ref)
        if key[0] == "i" and not self.inplace and ref not in self.result.input_writers:
            self.result.input_writers.append(ref)

    def _race(
        self, g: int, ref: StepRef, other: _Access, key: tuple[str, int], did: str, they: str
    ) -> None:
        if self.clock[g, other.thread] >= other.clock or (other.ref, ref) in self.reported:
            return
        self.reported.add((other.ref, ref))
        self.result.races.append(
            f"race on gpu {ref.gpu} {key[0]}[{key[1]}]: {ref} {did} it while {other.ref} "
            f"{they} it, and no dependency, message or program order puts one first"
        )

    # ------------------------------------------------------------ deadlock
    def _cycle(self) -> str:
        """The cycle of waits that keeps the blocked threadblocks from moving."""

        def waits_for(g: int) -> tuple[int, str]:
            reason, detail = self.blocked[g]
            if reason == "dep":
                target, position = detail
                gpu, tb = self.threads[target]
                return target, f"waits for gpu {gpu.id} tb {tb.id} to finish step {position}"
            src, dst, chan = detail
            if reason == "message":
                return self.sender[detail], f"waits for a message from gpu {src} on channel {chan}"
            return self.receiver[detail], (
                f"waits for room to send to gpu {dst} on channel {chan} "
                f"({self.capacity} calls not yet received)"
            )

        g = min(self.blocked)
        seen: list[int] = []
        while g in self.blocked and g not in seen:
            seen.append(g)
            g = waits_for(g)[0]
        cycle = seen[seen.index(g) :] if g in seen else seen
        parts = []
        for member in cycle:
            action = self.programs[member][self.pc[member]]
            parts.append(f"{action.ref} {waits_for(member)[1]}")
        return " -> ".join(parts)


# ================================================================ postconditions
def _expected(
    kind: CollectiveKind, gpu: int, root: int, n: int, ngpus: int
) -> Iterator[tuple[int, set[tuple[int, int]]]]:
    """(output chunk, the (rank, input chunk) pairs it must sum) on ``gpu``."""
    per_rank = n // ngpus
    if kind is K.ALL_REDUCE or (kind is K.REDUCE and gpu == root):
        for c in range(n):
            yield c, {(j, c) for j in range(ngpus)}
    elif kind is K.ALL_GATHER:
        for j in range(ngpus):
            for k in range(per_rank):
                yield j * per_rank + k, {(j, k)}
    elif kind is K.REDUCE_SCATTER:
        for k in range(per_rank):
            yield k, {(j, gpu * per_rank + k) for j in range(ngpus)}
    elif kind is K.ALL_TO_ALL:
        for j in range(ngpus):
            for k in range(per_rank):
                yield j * per_rank + k, {(j, gpu * per_rank + k)}
    elif kind is K.BROADCAST:
        for c in range(n):
            yield c, {(root, c)}
    elif kind is K.GATHER and gpu == root:
        for j in range(ngpus):
            for k in range(per_rank):
                yield j * per_rank + k, {(j, k)}
    elif kind is K.SCATTER:
        for k in range(per_rank):
            yield k, {(root, gpu * per_rank + k)}


def wrong_outputs(
    algorithm: Algorithm,
    kind: CollectiveKind,
    inplace: bool,
    execution: Execution,
    root: int,
    mode: str,
) -> Iterator[str]:
    n, ngpus = algorithm.nchunksperloop, algorithm.ngpus
    for gpu in range(ngpus):
        for chunk, wanted in _expected(kind, gpu, root, n, ngpus):
            value, writer = execution.slot(gpu, _alias(algorithm, kind, inplace, gpu, "o", chunk))
            bits = sum(1 << (j * n + c) for j, c in wanted)
            if value != (bits, False):
                by = f"last written by {writer}" if writer else "never written"
                yield (
                    f"{mode}: gpu {gpu} o[{chunk}] should hold {describe_value((bits, False), n)} "
                    f"but holds {describe_value(value, n, bits)} ({by})"
                )


def describe_value(value: Value, n: int, wanted: int = 0) -> str:
    if value is None:
        return "uninitialised data"
    bits, twice = value
    count = bits.bit_count()
    terms = [f"in_{b // n}[{b % n}]" for b in _lowest_bits(bits, 4)]
    text = " + ".join(terms) if count <= 4 else f"a sum of {count} inputs"
    missing = wanted & ~bits
    if wanted and missing and count > 4:
        gone = [f"in_{b // n}[{b % n}]" for b in _lowest_bits(missing, 5)]
        text += f" (missing {', '.join(gone[:4])}{'...' if len(gone) > 4 else ''})"
    return text + (" with a contribution counted twice" if twice else "")


def _lowest_bits(bits: int, most: int) -> list[int]:
    """The positions of the ``most`` lowest set bits of ``bits``: a value of a big buffer has
    tens of thousands of bit positions, and testing each one was quadratic."""
    found: list[int] = []
    while bits and len(found) < most:
        lowest = bits & -bits
        found.append(lowest.bit_length() - 1)
        bits ^= lowest
    return found
