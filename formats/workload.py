"""Training workloads as ASTRA-sim runs them: per-rank Chakra ETs whose COMM_COLL_NODEs are
collectives, and the communicator groups they run on.

What ASTRA-sim master (518bd51: ``Workload::issue_coll_comm``, ``CommunicatorGroup``,
``CustomAlgorithm``) makes of a COMM_COLL_NODE, which this model follows:

* ``comm_type`` ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL go through the
  collective lookup (per-node custom ET, then the type's custom key, then the native
  algorithm). BROADCAST only waits the node's duration, and the other types abort, so
  only those four can run a custom collective (:data:`CUSTOM_KINDS`).
* ``comm_size`` is the bytes of each rank's buffer: for All-Gather the rank's input (the
  output is the group size times that), for the others the whole buffer (ASTRA-sim's
  ``Ring`` sends ``comm_size / ranks`` per step). :func:`chunk_bytes` turns it into our
  chunks.
* ``pg_name`` (a string) names a communicator group of the ``--comm-group-configuration``
  JSON, ``{"1": [0, 1, 2, 3], ...}``; empty or ``"0"`` means every NPU. A custom ET on a
  group is opened as ``PREFIX.<position>.et``, the position being the rank's index in the
  *sorted* member list, while the ET's peers are indexes into the list *as the file gives
  it*; :class:`CommGroup` keeps both.
* ``involved_dim`` (a bool list, one per network dimension; absent means all) restricts a
  collective without a group to the network dimensions marked true: one collective per
  set of NPUs that differ only along those dimensions. ASTRA-sim's custom path ignores
  it, so the custom ET itself must do that (:func:`dimension_groups`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from tacos.collective import CollectiveKind
from tacos.errors import TacosError, describe
from tacos.formats.chakra import CollectiveCommType

CUSTOM_KINDS: Final[Mapping[int, CollectiveKind]] = MappingProxyType(
    {
        CollectiveCommType.ALL_REDUCE: CollectiveKind.ALL_REDUCE,
        CollectiveCommType.ALL_GATHER: CollectiveKind.ALL_GATHER,
        CollectiveCommType.REDUCE_SCATTER: CollectiveKind.REDUCE_SCATTER,
        CollectiveCommType.ALL_TO_ALL: CollectiveKind.ALL_TO_ALL,
    }
)
"""COMM_COLL_NODE ``comm_type`` values ASTRA-sim can run as a custom collective."""
COMM_GROUP_ATTRIBUTE: Final = "pg_name"
INVOLVED_DIM_ATTRIBUTE: Final = "involved_dim"
WHOLE_NETWORK: Final = 0
"""Group id of the collectives without a communicator group (``pg_name`` empty or "0")."""


@dataclass(frozen=True)
class CommGroup:
    """A communicator group: its id and its NPUs in the order the group file lists them."""

    id: int
    members: tuple[int, ...]

    @property
    def file_positions(self) -> tuple[int, ...]:
        """For each member (in :attr:`members` order), the index of the ET file it opens."""
        order = sorted(self.members)
        return tuple(order.index(npu) for npu in self.members)

    def describe(self) -> str:
        return "every NPU" if self.id == WHOLE_NETWORK else f"communicator group {self.id}"


@dataclass(frozen=True)
class CollectiveCall:
    """One collective of the workload: the COMM_COLL_NODE every member rank issues for it.

    ``node_ids`` pairs each member rank with the node's id in its file (ASTRA-sim's
    per-node map is keyed by that id); ``involved_dims`` is None when the node has none.
    """

    kind: CollectiveKind
    comm_bytes: int
    group: CommGroup
    involved_dims: tuple[bool, ...] | None
    node_ids: tuple[tuple[int, int], ...]
    name: str

    @property
    def signature(self) -> tuple[CollectiveKind, int, CommGroup, tuple[bool, ...] | None]:
        """What makes two calls the same collective (and so the same algorithm)."""
        return (self.kind, self.comm_bytes, self.group, self.involved_dims)

    @property
    def shape(self) -> tuple[CollectiveKind, int, tuple[bool, ...] | None, tuple[int, ...]]:
        """What must agree for two calls to run one custom ET (which names group positions):
        the signature, except which NPUs form the group."""
        return (self.kind, self.comm_bytes, self.involved_dims, self.group.file_positions)

    def describe(self) -> str:
        return f"{self.kind} of {self.comm_bytes} bytes on {self.group.describe()}"


@dataclass(frozen=True)
class Workload:
    """A workload ET set ``PREFIX.<rank>.et``, its files, and the collectives in it."""

    prefix: Path
    files: tuple[Path, ...]
    collectives: tuple[CollectiveCall, ...]
    comm_groups_file: Path | None = None

    @property
    def num_ranks(self) -> int:
        return len(self.files)


def chunk_bytes(kind: CollectiveKind, comm_bytes: int, ranks: int, chunks_per_rank: int) -> int:
    """Bytes per chunk of ``kind`` over ``ranks`` ranks moving a ``comm_bytes`` buffer.

    All-Gather's ``comm_size`` is one rank's input (``chunks_per_rank`` chunks); the other
    kinds' is the whole buffer, ``ranks * chunks_per_rank`` chunks. Rounded up, so a size
    that does not divide moves at most a few bytes more than ASTRA-sim's native algorithm.
    """
    parts = chunks_per_rank if kind is CollectiveKind.ALL_GATHER else ranks * chunks_per_rank
    return max(1, math.ceil(comm_bytes / parts))


def dimension_groups(
    dims: Sequence[int], involved: Sequence[bool], where: str
) -> list[tuple[int, ...]]:
    """The NPU sets a collective over the ``involved`` dimensions of a ``dims`` network runs on.

    NPUs are numbered as ASTRA-sim numbers them (dimension 0 fastest); each set holds the
    NPUs that differ only along involved dimensions, in id order.
    """
    if len(involved) < len(dims):
        raise TacosError(
            f"{where}: involved_dim has {len(involved)} entries but the network has "
            f"{len(dims)} dimensions; give one per dimension"
        )
    chosen = [d for d in range(len(dims)) if involved[d]]
    if not chosen:
        raise TacosError(f"{where}: involved_dim marks no dimension of the network as involved")
    groups: dict[tuple[int, ...], list[int]] = {}
    for npu in range(math.prod(dims)):
        coords, rest = [], npu
        for size in dims:
            coords.append(rest % size)
            rest //= size
        key = tuple(c for d, c in enumerate(coords) if d not in chosen)
        groups.setdefault(key, []).append(npu)
    return [tuple(group) for group in groups.values()]


def parse_comm_groups(text: str, source: str, num_npus: int) -> dict[int, CommGroup]:
    """ASTRA-sim's communicator-group JSON: ``{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}``.

    Ids are positive integers (0 is every NPU); each group lists two or more distinct NPUs
    of the network.
    """
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as err:
        raise TacosError(
            f"{source}: line {err.lineno}: not JSON ({err.msg}); a communicator-group file "
            'maps group ids to NPU lists, e.g. {"1": [0, 1], "2": [2, 3]}'
        ) from None
    if not isinstance(data, dict):
        raise TacosError(
            f"{source}: expected a mapping of group ids to NPU lists, got {describe(data)}"
        )
    groups = {}
    for key, members in data.items():
        where = f"{source}: group {describe(key)}"
        if not (key.isdigit() and int(key) > 0):
            raise TacosError(f"{where}: group ids are positive integers (0 is every NPU)")
        if not (isinstance(members, list) and members):
            raise TacosError(f"{where}: expected a list of NPU ids, got {describe(members)}")
        for npu in members:
            if not isinstance(npu, int) or isinstance(npu, bool):
                raise TacosError(f"{where}: {describe(npu)} is not an NPU id")
            if not 0 <= npu < num_npus:
                raise TacosError(
                    f"{where}: NPU {npu} is not in the network (NPUs 0..{num_npus - 1}); "
                    "a group must be a subset of the network's NPUs"
                )
        if len(set(members)) != len(members):
            raise TacosError(f"{where}: lists an NPU twice; list each member once")
        if len(members) < 2:
            raise TacosError(f"{where}: has one NPU; a collective needs two or more")
        groups[int(key)] = CommGroup(int(key), tuple(members))
    return groups
