"""Read a training workload (``PREFIX.<rank>.et``) into the collectives it runs.

Every COMM_COLL_NODE is checked as ASTRA-sim master would run it with a custom
collective (:mod:`tacos.formats.workload` has the facts), and the ranks' nodes are
matched into :class:`~tacos.formats.workload.CollectiveCall`\\ s: on each
communicator group, the k-th collective of every member rank, in file order, is one
collective (ASTRA-sim numbers a group's collectives in issue order, which the data
dependencies of a well-formed workload make the same on every rank). Each error
names the file, the node and the fix:

* a rank file missing, or a rank count that differs from the network's NPUs;
* a collective type ASTRA-sim cannot run custom, a missing or zero ``comm_size``;
* a group that is not in the group file or not a subset of the network, a rank
  issuing a collective on a group it is not in, members disagreeing on what the
  k-th collective is;
* node ids that disagree across ranks in a way ASTRA-sim's per-node map cannot
  follow: one id naming collectives of different kinds or sizes on different
  ranks. (Different ids for one collective are fine: ASTRA-sim's own
  microbenchmarks number their node by rank. One id for the same collective on
  different groups, as data-parallel groups of a hybrid-parallel step have, is fine
  when the groups list their NPUs in the same order: the one ET of that id names
  positions in the group.)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TypeVar

from tacos.errors import TacosError, describe
from tacos.formats.chakra import CollectiveCommType, Node, NodeType, get_attr
from tacos.formats.workload import (
    COMM_GROUP_ATTRIBUTE,
    CUSTOM_KINDS,
    INVOLVED_DIM_ATTRIBUTE,
    WHOLE_NETWORK,
    CollectiveCall,
    CommGroup,
    Workload,
    parse_comm_groups,
)
from tacos.importers.chakra import EtSet, load_et_set
from tacos.inputfile import require_file

T = TypeVar("T")
Issued = tuple[int, Node, CollectiveCall]
"""(index of the node in its rank's file, the node, what it asks for with its own id)."""


def read_workload(
    prefix: str | Path, num_npus: int, comm_groups_file: str | Path | None = None
) -> Workload:
    """The collectives of the workload ``PREFIX.<rank>.et`` for a network of ``num_npus``."""
    et_set = load_et_set(prefix)
    _check_rank_count(et_set, num_npus)
    groups = {WHOLE_NETWORK: CommGroup(WHOLE_NETWORK, tuple(range(num_npus)))}
    if comm_groups_file is not None:
        groups |= parse_comm_groups(
            _read_text(Path(comm_groups_file)), str(comm_groups_file), num_npus
        )
    issued: dict[int, dict[int, list[Issued]]] = defaultdict(lambda: defaultdict(list))
    for rank, (_, nodes) in sorted(et_set.traces.items()):
        for index, node in enumerate(nodes):
            if node.type == NodeType.COMM_COLL_NODE:
                call = _node_call(et_set, rank, node, groups, comm_groups_file)
                issued[call.group.id][rank].append((index, node, call))
    matched = [
        pair
        for group_id in sorted(issued)
        for pair in _match_ranks(et_set, groups[group_id], issued[group_id])
    ]
    matched.sort(key=lambda pair: (pair[0], pair[1].node_ids[0][0]))  # file order of a member
    calls = [call for _, call in matched]
    _check_node_ids(et_set, calls)
    files = tuple(et_set.paths[rank] for rank in range(et_set.num_ranks))
    return Workload(
        et_set.prefix,
        files,
        tuple(calls),
        None if comm_groups_file is None else Path(comm_groups_file),
    )


def _read_text(path: Path) -> str:
    require_file(path, "communicator-group")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read the communicator-group file: {err}") from None


def _check_rank_count(et_set: EtSet, num_npus: int) -> None:
    if et_set.num_ranks < num_npus:
        missing = et_set.prefix.with_name(f"{et_set.prefix.name}.{et_set.num_ranks}.et")
        raise TacosError(
            f"{missing}: missing: the network has {num_npus} NPUs and ASTRA-sim runs one "
            f"trace per NPU, but the workload has ranks 0..{et_set.num_ranks - 1} only; "
            "add the missing rank files or use a network of as many NPUs"
        )
    if et_set.num_ranks > num_npus:
        raise TacosError(
            f"{et_set.path(num_npus)}: the workload has {et_set.num_ranks} ranks but the "
            f"network has {num_npus} NPUs; use a network with one NPU per rank"
        )


def _node_call(
    et_set: EtSet,
    rank: int,
    node: Node,
    groups: dict[int, CommGroup],
    comm_groups_file: str | Path | None,
) -> CollectiveCall:
    """What ``node`` on ``rank`` asks for, checked as ASTRA-sim would run it custom."""
    where = f"{et_set.path(rank)}: node {node.id} ({describe(node.name)})"
    comm_type = _attribute(node, "comm_type", int, where)
    if comm_type not in CUSTOM_KINDS:
        name = (
            CollectiveCommType.Name(comm_type)  # type: ignore[arg-type]
            if comm_type in CollectiveCommType.values()
            else f"comm_type {comm_type}"
        )
        runs = ", ".join(CollectiveCommType.Name(t) for t in CUSTOM_KINDS)  # type: ignore[arg-type]
        raise TacosError(
            f"{where}: ASTRA-sim cannot run a {name} as a custom collective (it runs {runs}); "
            "replace the node or leave this workload to ASTRA-sim's native algorithms"
        )
    size = _attribute(node, "comm_size", int, where)
    if size < 1:
        raise TacosError(f"{where}: comm_size is {size}; a collective moves at least one byte")
    group = groups[WHOLE_NETWORK]
    group_name = _optional_attribute(node, COMM_GROUP_ATTRIBUTE, str, where)
    if group_name not in (None, "", "0"):
        group = _named_group(str(group_name), groups, comm_groups_file, where)
        if rank not in group.members:
            raise TacosError(
                f"{where}: rank {rank} issues a collective on {group.describe()}, whose "
                f"members are {list(group.members)}; fix the node's pg_name or the group file"
            )
    dims = _optional_attribute(node, INVOLVED_DIM_ATTRIBUTE, list, where)
    if dims is not None and not all(isinstance(d, bool) for d in dims):
        raise TacosError(f"{where}: involved_dim must be a bool_list, as ASTRA-sim reads it")
    involved = None if dims is None else tuple(dims)
    return CollectiveCall(
        CUSTOM_KINDS[comm_type], size, group, involved, ((rank, node.id),), node.name
    )


def _named_group(
    name: str, groups: dict[int, CommGroup], comm_groups_file: str | Path | None, where: str
) -> CommGroup:
    if comm_groups_file is None:
        raise TacosError(
            f"{where}: runs on communicator group {describe(name)}; pass the group file "
            "(ASTRA-sim's --comm-group-configuration) with --comm-groups FILE"
        )
    if not name.isdigit() or int(name) not in groups:
        raise TacosError(
            f"{where}: communicator group {describe(name)} is not in {comm_groups_file}; "
            f"it defines {sorted(g for g in groups if g != WHOLE_NETWORK)}"
        )
    return groups[int(name)]


def _match_ranks(
    et_set: EtSet, group: CommGroup, by_rank: dict[int, list[Issued]]
) -> list[tuple[int, CollectiveCall]]:
    """Pair the k-th collective of every member of ``group`` into one call; each comes with
    the index of its node in the first member's file."""
    reference = min(by_rank)
    count = len(by_rank[reference])
    for rank in group.members:
        if len(by_rank.get(rank, ())) != count:
            raise TacosError(
                f"{et_set.path(rank)}: issues {len(by_rank.get(rank, ()))} collectives on "
                f"{group.describe()} but rank {reference} issues {count}; every member of a "
                "group must issue the same collectives"
            )
    calls: list[tuple[int, CollectiveCall]] = []
    for index in range(count):
        file_index, first_node, first = by_rank[reference][index]
        for rank in group.members:
            _, node, call = by_rank[rank][index]
            if call.signature != first.signature:
                raise TacosError(
                    f"{et_set.path(rank)}: node {node.id}, collective #{index} of "
                    f"{group.describe()}, runs {call.describe()}, but rank {reference}'s "
                    f"(node {first_node.id}) runs {first.describe()}; every member must issue "
                    "the same collectives in the same order"
                )
        node_ids = tuple((rank, by_rank[rank][index][1].id) for rank in group.members)
        call = CollectiveCall(
            first.kind, first.comm_bytes, group, first.involved_dims, node_ids, first.name
        )
        calls.append((file_index, call))
    return calls


def _check_node_ids(et_set: EtSet, calls: list[CollectiveCall]) -> None:
    """One node id must name one collective (up to its group's NPUs): ASTRA-sim's per-node
    map is keyed by node id alone, for every rank."""
    named: dict[int, tuple[CollectiveCall, int]] = {}
    for call in calls:
        for rank, node_id in call.node_ids:
            other, other_rank = named.setdefault(node_id, (call, rank))
            if other.shape == call.shape:
                continue
            if other.shape[:-1] == call.shape[:-1]:
                raise TacosError(
                    f"{et_set.path(rank)}: node {node_id} runs {call.describe()} and node "
                    f"{node_id} of rank {other_rank} runs it on {other.group.describe()}, but "
                    "the two groups list their NPUs in different orders, and the one ET of a "
                    "node id names positions in the group; list both groups in ascending order"
                )
            raise TacosError(
                f"{et_set.path(rank)}: node {node_id} runs {call.describe()}, but node "
                f"{node_id} of rank {other_rank} runs {other.describe()}; ASTRA-sim maps a "
                "node id to one custom collective on every rank, so give each collective its "
                "own id, the same on every rank"
            )


def _attribute(node: Node, name: str, kind: type[T], where: str) -> T:
    value = _optional_attribute(node, name, kind, where)
    if value is None:
        raise TacosError(f"{where}: attribute {name!r} is missing; ASTRA-sim needs it")
    return value


def _optional_attribute(node: Node, name: str, kind: type[T], where: str) -> T | None:
    """The attribute's value if present, checked to be a ``kind`` (bools are not ints)."""
    try:
        value = get_attr(node, name)
    except KeyError:
        return None
    except ValueError as err:
        raise TacosError(f"{where}: {err}") from None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TacosError(
            f"{where}: attribute {name!r} must be {kind.__name__}, got {describe(value)}"
        )
    return value
