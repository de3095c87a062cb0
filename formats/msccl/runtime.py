"""What the GPU runtimes that run MSCCL algorithm XML accept and mean.

The legacy NCCL-MSCCL interpreter, the MSCCL executor and RCCL read the same
XML but differ in their limits and collective names (``RUNTIMES``); they
agree on what a step type does (``STEP_TYPES``), how much a connection buffers
(``FIFO_CALLS``) and where a collective keeps its chunks.

Buffers and postconditions (what every runtime assumes; the exporter lays chunks
out this way and the checker tests results against it). With ``N`` =
``nchunksperloop`` and ``R`` = ``ngpus``, chunk ``c`` of a buffer is its ``c``-th
of ``N`` equal parts; ``in_j`` is rank ``j``'s input, ``o`` the output of rank ``r``::

    coll             input  output  in place                  every rank r ends with
    allreduce        N      N       o is i                    o[c] = sum_j in_j[c]
    allgather        N/R    N       i[c] is o[r*N/R + c]      o[j*N/R + c] = in_j[c]
    reduce_scatter   N      N/R     o[c] is i[r*N/R + c]      o[c] = sum_j in_j[r*N/R + c]
    alltoall         N      N       o is i                    o[j*N/R + c] = in_j[r*N/R + c]
    broadcast        N      N       o is i                    o[c] = in_root[c]
    reduce           N      N       o is i                    (root only) o[c] = sum_j in_j[c]

Every contribution is summed exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tacos.collective import CollectiveKind

K = CollectiveKind


@dataclass(frozen=True)
class Runtime:
    """What one runtime's loader accepts (as read from that runtime's loader source).

    ``max_steps`` is ``MSCCL_MAX_NUM_STEPS`` (steps per threadblock, ``nop``
    included), ``max_threadblocks`` is ``MSCCL_MAX_NUM_THREAD_BLOCKS`` (per GPU)
    and ``max_channels`` is ``MAXCHANNELS``. ``colls`` maps the ``coll`` names
    the loader knows to our collectives (None: no postcondition to check).
    The executor format ignores ``name`` but needs ``outofplace``,
    ``minBytes`` and ``maxBytes``.
    """

    name: str
    max_steps: int
    max_threadblocks: int
    max_channels: int
    colls: Mapping[str, CollectiveKind | None]
    executor_format: bool

    def coll_name(self, kind: CollectiveKind) -> str:
        """How this runtime spells a collective in ``coll``."""
        return next(name for name, known in self.colls.items() if known is kind)


_COMMON_COLLS: dict[str, CollectiveKind | None] = {
    "allreduce": K.ALL_REDUCE,
    "allgather": K.ALL_GATHER,
    "reduce": K.REDUCE,
    "broadcast": K.BROADCAST,
    "alltoall": K.ALL_TO_ALL,
}
LEGACY_COLLS = {**_COMMON_COLLS, "reduce_scatter": K.REDUCE_SCATTER, "custom": None}
_EXECUTOR_COLLS = {
    **_COMMON_COLLS,
    "reducescatter": K.REDUCE_SCATTER,
    "gather": K.GATHER,
    "scatter": K.SCATTER,
    "send": None,
    "recv": None,
    "alltoallv": None,
}
KNOWN_COLLS = {**LEGACY_COLLS, **_EXECUTOR_COLLS}
RUNTIMES: dict[str, Runtime] = {
    # microsoft/msccl src/include/msccl.h, devcomm.h
    "legacy": Runtime("legacy", 256, 216, 32, LEGACY_COLLS, executor_format=False),
    # Azure/msccl-executor-nccl makefiles/common.mk (default build), msccl_struct.h, device.h
    "executor": Runtime("executor", 64, 1024, 32, _EXECUTOR_COLLS, executor_format=True),
    # ROCm/rccl src/include/msccl/msccl_struct.h, device.h
    "rccl": Runtime("rccl", 64, 64, 128, _EXECUTOR_COLLS, executor_format=True),
}
MAX_COUNT = 71
"""Largest ``cnt`` of a step (``MSCCL_MAX_COUNT`` 72 is exclusive)."""
MAX_TBS_PER_CHANNEL = 32
"""Threadblocks with a send peer (and, separately, with a receive peer) per channel."""
MAX_DEPID = 127
"""``depid`` is stored in an ``int8_t``: larger threadblock ids wrap around."""
MAX_NODES_PER_RANK = 4096
"""The tokenizer records ``algo`` + every ``gpu`` + the rank's own ``tb`` and ``step`` elements."""
MAX_ATTRIBUTES = 16
MAX_VALUE_CHARS = 255
PROTOCOLS = ("Simple", "LL", "LL128")
FIFO_CALLS = {"Simple": 2, "LL": 8, "LL128": 8}
"""Calls a connection buffers ahead of its receiver: NCCL_STEPS = 8 slots, a Simple
call takes MSCCL_CHUNKSTEPS = 4 of them, an LL or LL128 call one."""
CHUNK_EFFECTIVE_BYTES = {"Simple": 2 * 2**20, "LL": 32 * 2**10, "LL128": 576_000}
"""Bytes one call moves with NCCL's default buffers; a step of ``cnt`` chunks of
``nBytes / nchunksperloop`` bytes is split into calls of at most this much."""
LEGACY_DEFAULT_MAX_BYTES = 2**27
"""The legacy runtime's ``maxBytes`` when the attribute is absent."""
BUFFERS = ("i", "o", "s")


def user_buffer_chunks(
    kind: CollectiveKind | None, nchunksperloop: int, ngpus: int
) -> dict[str, int]:
    """Chunks of a rank's input (``i``) and output (``o``) buffer: the table's first columns.

    >>> user_buffer_chunks(K.ALL_GATHER, 8, 4)
    {'i': 2, 'o': 8}
    """
    per_rank = nchunksperloop // max(1, ngpus)
    return {
        "i": per_rank if kind in (K.ALL_GATHER, K.GATHER) else nchunksperloop,
        "o": per_rank if kind in (K.REDUCE_SCATTER, K.SCATTER) else nchunksperloop,
    }


@dataclass(frozen=True)
class StepType:
    """What a step type does, as the interpreters run it.

    ``reads_src``/``writes_dst``: the buffer slots it touches; ``reduces``: the
    received data is added to ``src``; ``checked``: which of src/dst the loader
    bounds-checks (the others are used unchecked).
    """

    recv: bool = False
    send: bool = False
    reads_src: bool = False
    writes_dst: bool = False
    reduces: bool = False
    checked: tuple[str, ...] = ()


STEP_TYPES: dict[str, StepType] = {
    "s": StepType(send=True, reads_src=True, checked=("src",)),
    "r": StepType(recv=True, writes_dst=True, checked=("dst",)),
    "rcs": StepType(recv=True, send=True, writes_dst=True, checked=("dst",)),
    "rrs": StepType(recv=True, send=True, reads_src=True, reduces=True, checked=("src",)),
    "rrc": StepType(recv=True, reads_src=True, writes_dst=True, reduces=True),
    "rrcs": StepType(
        recv=True, send=True, reads_src=True, writes_dst=True, reduces=True, checked=("src", "dst")
    ),
    "cpy": StepType(reads_src=True, writes_dst=True, checked=("src", "dst")),
    "re": StepType(reads_src=True, writes_dst=True, reduces=True, checked=("src", "dst")),
    "nop": StepType(),
}
