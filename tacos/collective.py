"""Collective specifications: which operation, over which ranks, in which chunks.

A *chunk* is the unit the synthesizer moves over one link in one transfer.
Every collective is defined by where its data starts and where it must end,
as (node, chunk, contributions) triples where *contributions* is a bit set
over rank positions (bit ``i`` stands for ``ranks[i]``'s data):

* :meth:`Collective.initial_data` -- what each rank holds at the start;
* :meth:`Collective.final_data` -- what must be where at the end.

The verifier checks schedules against exactly these, and the synthesizer
derives its sources and goals from them, so a collective is defined once.

Chunk numbering (``R`` ranks, ``C`` chunks per rank):

* All-Gather, Reduce-Scatter, All-Reduce, Gather, Scatter: ``R*C`` chunks;
  chunk ``c`` belongs to ``ranks[c // C]`` (its source in All-Gather and
  Gather, its destination in Reduce-Scatter and Scatter).
* Broadcast, Reduce: the root's buffer, ``C`` chunks.
* All-to-All: ``R*R*C`` chunks; chunk ``c`` goes from ``ranks[c // (R*C)]`` to
  ``ranks[(c // C) % R]`` (chunks a rank "sends" to itself need no transfer).

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

import numpy as np

from tacos.errors import TacosError, describe, whole_number
from tacos.limits import MAX_BUFFER_BYTES, MAX_CHUNK_DELIVERIES

Placement = tuple[int, int, int]
"""(node, chunk, contributions bit set over rank positions)."""


class CollectiveKind(StrEnum):
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_REDUCE = "all-reduce"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    ALL_TO_ALL = "all-to-all"

    @classmethod
    def parse(cls, text: str) -> CollectiveKind:
        """Accept ``all-gather``, ``allgather``, ``all_gather``, ``alltoall`` and so on."""
        wanted = text.strip().lower().replace("_", "-")
        for kind in cls:
            if wanted in (kind.value, kind.value.replace("-", "")):
                return kind
        known = ", ".join(k.value for k in cls)
        raise TacosError(f"unknown collective {text!r}: use one of {known}")

    @property
    def reduces(self) -> bool:
        """Whether data is combined by reduction (RS, AR, Reduce)."""
        return self in (
            CollectiveKind.REDUCE_SCATTER,
            CollectiveKind.ALL_REDUCE,
            CollectiveKind.REDUCE,
        )

    @property
    def rooted(self) -> bool:
        """Whether the collective has a root rank (Broadcast, Reduce, Gather, Scatter)."""
        return self in (
            CollectiveKind.BROADCAST,
            CollectiveKind.REDUCE,
            CollectiveKind.GATHER,
            CollectiveKind.SCATTER,
        )


@dataclass(frozen=True)
class Collective:
    """What to synthesize: kind, participating NPU ids, chunking, and the root if any.

    ``root`` defaults to ``ranks[0]`` for rooted kinds and must be None otherwise.
    """

    kind: CollectiveKind
    ranks: tuple[int, ...]
    chunks_per_rank: int = 1
    chunk_bytes: int = 2**20
    root: int | None = None

    def __post_init__(self) -> None:
        if len(self.ranks) < 2:
            raise TacosError(f"{self.kind} needs at least 2 ranks, got {len(self.ranks)}")
        if len(set(self.ranks)) != len(self.ranks):
            raise TacosError(f"ranks of the {self.kind} repeat: {list(self.ranks)}")
        if self.chunks_per_rank < 1:
            raise TacosError(f"chunks per NPU must be >= 1, got {self.chunks_per_rank}")
        if self.chunk_bytes < 1:
            raise TacosError(f"chunk size must be >= 1 byte, got {self.chunk_bytes}")
        buffer_bytes = self.num_chunks * self.chunk_bytes
        if buffer_bytes > MAX_BUFFER_BYTES:
            raise TacosError(
                f"{self.num_chunks} chunks of {self.chunk_bytes} bytes make a {buffer_bytes}-byte "
                f"buffer, more than the formats hold (at most {MAX_BUFFER_BYTES}); use smaller "
                "chunks (--chunk-size)"
            )
        deliveries = self.num_ranks * self.num_chunks
        if deliveries > MAX_CHUNK_DELIVERIES:
            raise TacosError(
                f"{self.chunks_per_rank} chunks per NPU on {self.num_ranks} ranks make "
                f"{deliveries} chunk deliveries, more than one machine can synthesize "
                f"({MAX_CHUNK_DELIVERIES}); use fewer, larger chunks "
                "(--chunks-per-npu, --chunk-size)"
            )
        if self.kind.rooted:
            if self.root is None:
                object.__setattr__(self, "root", self.ranks[0])
            elif self.root not in self.ranks:
                raise TacosError(f"root {self.root} is not one of the ranks {list(self.ranks)}")
        elif self.root is not None:
            raise TacosError(f"{self.kind} has no root; drop --root")

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    @property
    def num_chunks(self) -> int:
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            return self.chunks_per_rank
        if self.kind is CollectiveKind.ALL_TO_ALL:
            return self.num_ranks * self.num_ranks * self.chunks_per_rank
        return self.num_ranks * self.chunks_per_rank

    def owner(self, chunk: int) -> int:
        """The rank a chunk belongs to: its source, or its destination when it is reduced.

        For Broadcast and Reduce that is the root; for All-to-All the sending rank.
        """
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            assert self.root is not None
            return self.root
        if self.kind is CollectiveKind.ALL_TO_ALL:
            return self.ranks[chunk // (self.num_ranks * self.chunks_per_rank)]
        return self.ranks[chunk // self.chunks_per_rank]

    def destination(self, chunk: int) -> int:
        """All-to-All and Scatter: the one rank that must receive ``chunk``."""
        if self.kind is CollectiveKind.ALL_TO_ALL:
            return self.ranks[(chunk // self.chunks_per_rank) % self.num_ranks]
        return self.ranks[chunk // self.chunks_per_rank]

    def rank_index(self, npu: int) -> int:
        """Position of ``npu`` in :attr:`ranks`."""
        return self.ranks.index(npu)

    def initial_data(self) -> list[Placement]:
        """Where the data is before the collective (the precondition)."""
        kind, chunks = self.kind, range(self.num_chunks)
        if kind.reduces:
            return [(rank, c, 1 << i) for i, rank in enumerate(self.ranks) for c in chunks]
        if kind in (CollectiveKind.BROADCAST, CollectiveKind.SCATTER):
            assert self.root is not None
            return [(self.root, c, self._bit(self.root)) for c in chunks]
        return [(self.owner(c), c, self._bit(self.owner(c))) for c in chunks]

    def final_data(self) -> list[Placement]:
        """What must be where after the collective (the postcondition)."""
        kind, chunks, everyone = self.kind, range(self.num_chunks), (1 << self.num_ranks) - 1
        if kind is CollectiveKind.ALL_REDUCE:
            return [(rank, c, everyone) for rank in self.ranks for c in chunks]
        if kind in (CollectiveKind.REDUCE_SCATTER, CollectiveKind.REDUCE):
            return [(self.owner(c), c, everyone) for c in chunks]
        if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST):
            return [(rank, c, self._bit(self.owner(c))) for rank in self.ranks for c in chunks]
        if kind is CollectiveKind.GATHER:
            assert self.root is not None
            return [(self.root, c, self._bit(self.owner(c))) for c in chunks]
        source = self.root if kind is CollectiveKind.SCATTER else None
        return [
            (self.destination(c), c, self._bit(self.owner(c) if source is None else source))
            for c in chunks
        ]

    def _bit(self, rank: int) -> int:
        return 1 << self.ranks.index(rank)

    def spread_arrays(self, *, final: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`initial_data` (or, with ``final``, :meth:`final_data`) as arrays, in the
        same order, for the spreading kinds, whose every placement carries one rank's data.

        Returns ``(node, chunk, position)``: the contribution is ``1 << position``
        (``ranks[position]``'s data). A 4096-rank All-Gather has 16.7 million final
        placements, too many for a list of tuples; verifiers at scale read these.
        """
        kind = self.kind
        if kind.reduces:
            raise TacosError(f"{kind} combines contributions; use final_data()")
        ranks = np.asarray(self.ranks, np.int64)
        chunks = np.arange(self.num_chunks, dtype=np.int64)
        per_rank = self.chunks_per_rank
        root = -1 if self.root is None else self.ranks.index(self.root)
        if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            owner = np.full(self.num_chunks, root, np.int64)
        elif kind is CollectiveKind.ALL_TO_ALL:
            owner = chunks // (self.num_ranks * per_rank)
        else:
            owner = chunks // per_rank
        if not final:
            if kind in (CollectiveKind.BROADCAST, CollectiveKind.SCATTER):
                return np.full(self.num_chunks, ranks[root]), chunks, np.full(self.num_chunks, root)
            return ranks[owner], chunks, owner
        if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST):
            nodes = np.repeat(ranks, self.num_chunks)
            return nodes, np.tile(chunks, self.num_ranks), np.tile(owner, self.num_ranks)
        if kind is CollectiveKind.GATHER:
            return np.full(self.num_chunks, ranks[root]), chunks, owner
        if kind is CollectiveKind.SCATTER:
            return ranks[chunks // per_rank], chunks, np.full(self.num_chunks, root)
        return ranks[(chunks // per_rank) % self.num_ranks], chunks, owner

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind.value,
            "ranks": list(self.ranks),
            "chunks_per_rank": self.chunks_per_rank,
            "chunk_bytes": self.chunk_bytes,
        }
        if self.root is not None:
            data["root"] = self.root
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "collective") -> Collective:
        try:
            root = data.get("root")
            ranks = data["ranks"]
            if not isinstance(ranks, list):
                raise TypeError(f"ranks is {describe(ranks)}, not a list")
            return cls(
                CollectiveKind.parse(str(data["kind"])),
                tuple(whole_number(r, f"{source}: ranks") for r in ranks),
                whole_number(data["chunks_per_rank"], f"{source}: chunks_per_rank"),
                whole_number(data["chunk_bytes"], f"{source}: chunk_bytes"),
                None if root is None else whole_number(root, f"{source}: root"),
            )
        except (KeyError, TypeError, AttributeError) as err:
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
