"""The MSCCL program model: an ``<algo>`` down to its ``<step>`` elements.

One model for every MSCCL tool here: the XML reader parses into it, the
writer serializes it, the exporter lowers a Schedule into it, and the checker
and the interpreter run on it. Fields are the XML attributes as the runtimes
read them; ``line`` is where the element starts in the file it was read from
(0 for a program built in memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from tacos.formats.msccl.runtime import STEP_TYPES, StepType


@dataclass(frozen=True)
class Step:
    """One ``<step>``; ``index`` is its position in the threadblock (what ``deps`` names)."""

    index: int
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    line: int = 0

    @property
    def kind(self) -> StepType:
        return STEP_TYPES[self.type]


@dataclass(frozen=True)
class ThreadBlock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    line: int = 0


@dataclass(frozen=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[ThreadBlock, ...]
    line: int = 0


@dataclass(frozen=True)
class Algorithm:
    """An MSCCL ``<algo>``, read from a file or lowered from a schedule.

    ``source`` names where it came from, for messages; ``format_errors`` and
    ``format_warnings`` are what the runtimes' tokenizers would make of the
    text it was read from (with line numbers).
    """

    source: str
    name: str | None
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int | None
    min_bytes: int | None
    max_bytes: int | None
    gpus: tuple[Gpu, ...]
    format_errors: tuple[str, ...] = ()
    format_warnings: tuple[str, ...] = ()

    def gpu(self, gpu_id: int) -> Gpu:
        return next(g for g in self.gpus if g.id == gpu_id)


@dataclass(frozen=True)
class StepRef:
    """A step by position, as messages name it: ``gpu 2 tb 1 step 4 (rcs)``."""

    gpu: int
    tb: int
    step: int
    type: str

    @classmethod
    def of(cls, gpu: Gpu | int, tb: ThreadBlock, step: Step) -> StepRef:
        return cls(gpu if isinstance(gpu, int) else gpu.id, tb.id, step.index, step.type)

    def __str__(self) -> str:
        return f"gpu {self.gpu} tb {self.tb} step {self.step} ({self.type})"
