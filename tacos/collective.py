"""Collective specifications: which operation, over which ranks, in which chunks.

A *chunk* is the unit the synthesizer moves over one link in one transfer.
Chunks are numbered ``0 .. num_chunks-1``; chunk ``c`` belongs to rank
``ranks[c // chunks_per_rank]``:

* All-Gather: that rank holds chunk ``c`` at the start; every rank needs it.
* Reduce-Scatter: every rank holds a contribution to every chunk; the owner
  of ``c`` must end with the reduction of all contributions.
* All-Reduce: as Reduce-Scatter, but every rank ends with every reduced chunk.

Example:
    >>> spec = Collective(CollectiveKind.ALL_GATHER, ranks=(0, 1, 2), chunks_per_rank=2,
    ...                   chunk_bytes=1024)
    >>> spec.num_chunks, spec.owner(3)
    (6, 1)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tacos.errors import TacosError


class CollectiveKind(StrEnum):
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_REDUCE = "all-reduce"

    @classmethod
    def parse(cls, text: str) -> CollectiveKind:
        """Accept ``all-gather``, ``allgather``, ``all_gather`` and so on."""
        wanted = text.strip().lower().replace("_", "-")
        for kind in cls:
            if wanted in (kind.value, kind.value.replace("-", "")):
                return kind
        known = ", ".join(k.value for k in cls)
        raise TacosError(f"unknown collective {text!r}: use one of {known}")

    @property
    def reduces(self) -> bool:
        """Whether ranks start with contributions to every chunk (RS, AR)."""
        return self in (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE)


@dataclass(frozen=True)
class Collective:
    """What to synthesize: kind, participating NPU ids, chunking."""

    kind: CollectiveKind
    ranks: tuple[int, ...]
    chunks_per_rank: int = 1
    chunk_bytes: int = 2**20

    def __post_init__(self) -> None:
        if len(self.ranks) < 2:
            raise TacosError(f"a {self.kind} needs at least 2 ranks, got {len(self.ranks)}")
        if len(set(self.ranks)) != len(self.ranks):
            raise TacosError(f"ranks of the {self.kind} repeat: {list(self.ranks)}")
        if self.chunks_per_rank < 1:
            raise TacosError(f"chunks per NPU must be >= 1, got {self.chunks_per_rank}")
        if self.chunk_bytes < 1:
            raise TacosError(f"chunk size must be >= 1 byte, got {self.chunk_bytes}")

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    @property
    def num_chunks(self) -> int:
        return self.num_ranks * self.chunks_per_rank

    def owner(self, chunk: int) -> int:
        """The NPU id that owns ``chunk`` (its source in AG, its destination in RS)."""
        return self.ranks[chunk // self.chunks_per_rank]

    def rank_index(self, npu: int) -> int:
        """Position of ``npu`` in :attr:`ranks`."""
        return self.ranks.index(npu)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "ranks": list(self.ranks),
            "chunks_per_rank": self.chunks_per_rank,
            "chunk_bytes": self.chunk_bytes,
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "collective") -> Collective:
        try:
            return cls(
                CollectiveKind.parse(str(data["kind"])),
                tuple(int(r) for r in data["ranks"]),
                int(data["chunks_per_rank"]),
                int(data["chunk_bytes"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise TacosError(
                f"{source}: needs kind, ranks, chunks_per_rank, chunk_bytes ({err})"
            ) from None


_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1}
for _power, _prefix in enumerate("kmgt", start=1):
    _UNITS[_prefix + "ib"] = _UNITS[_prefix + "i"] = 1024**_power
    _UNITS[_prefix + "b"] = _UNITS[_prefix] = 1000**_power


def parse_size(text: str | int) -> int:
    """Bytes from ``4096``, ``512KiB``, ``1MiB``, ``1GiB`` (binary) or ``1MB`` (decimal).

    >>> parse_size("1MiB"), parse_size("512KiB"), parse_size("4096")
    (1048576, 524288, 4096)
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(text)
        if not match:
            raise TacosError(f"size {text!r} is not understood: use e.g. 4096, 512KiB, 1MiB")
        value_f = float(match["number"]) * _UNITS[match["unit"].lower()]
        if not value_f.is_integer():
            raise TacosError(f"size {text!r} is not a whole number of bytes")
        value = int(value_f)
    if value < 1:
        raise TacosError(f"size {text!r} must be at least 1 byte")
    return value
