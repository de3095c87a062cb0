"""Read a set of per-rank Chakra ETs (``PREFIX.<rank>.et``) and pair its messages.

ASTRA-sim pairs a COMM_SEND_NODE on rank ``s`` with a COMM_RECV_NODE on rank
``d`` when their (tag, src, dst, size) agree, in issue order; an unpaired node
makes the simulation hang silently. :func:`match_messages` performs the same
pairing offline and names the first node that would hang.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

from tacos.chakra_io import GlobalMetadata, Node, NodeType, get_attr, read_et
from tacos.errors import TacosError

_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et$")


@dataclass(frozen=True)
class EtSet:
    """The traces of ranks ``0..n-1``: ``traces[rank] = (metadata, nodes)``."""

    prefix: Path
    traces: dict[int, tuple[GlobalMetadata, list[Node]]]

    @property
    def num_ranks(self) -> int:
        return len(self.traces)


@dataclass(frozen=True)
class Message:
    """A matched send/receive pair: node ids are positions in each rank's node list."""

    src: int
    dst: int
    tag: int
    size: int
    send_node: int
    recv_node: int


def load_et_set(prefix: str | Path) -> EtSet:
    """Read ``PREFIX.0.et``, ``PREFIX.1.et``, ...; the ranks must be contiguous from 0."""
    prefix = Path(prefix)
    folder = prefix.parent if str(prefix.parent) else Path(".")
    ranks = sorted(
        int(m["rank"])
        for p in (folder.iterdir() if folder.is_dir() else ())
        if (m := _RANK_FILE.match(p.name)) and m["stem"] == prefix.name
    )
    if not ranks:
        raise TacosError(f"{prefix}: no files {prefix.name}.<rank>.et in {folder}")
    if ranks != list(range(len(ranks))):
        missing = sorted(set(range(ranks[-1] + 1)) - set(ranks))
        raise TacosError(f"{prefix}: rank files must be contiguous from 0; {missing[0]} is missing")
    traces = {}
    for rank in ranks:
        path = folder / f"{prefix.name}.{rank}.et"
        try:
            traces[rank] = read_et(path)
        except OSError as err:
            raise TacosError(f"{path}: cannot read: {err}") from None
    return EtSet(prefix, traces)


def match_messages(et_set: EtSet) -> list[Message]:
    """Pair every send with a receive as ASTRA-sim does; raise naming the first orphan."""
    sends: dict[tuple[int, int, int, int], deque[int]] = defaultdict(deque)
    recvs: dict[tuple[int, int, int, int], deque[int]] = defaultdict(deque)
    for rank, (_, nodes) in et_set.traces.items():
        for node in nodes:
            if node.type == NodeType.COMM_SEND_NODE:
                key = _message_key(node, rank, et_set, sender=True)
                sends[key].append(node.id)
            elif node.type == NodeType.COMM_RECV_NODE:
                key = _message_key(node, rank, et_set, sender=False)
                recvs[key].append(node.id)
    messages = []
    for key in sorted(set(sends) | set(recvs)):
        tag, src, dst, size = key
        pending_sends, pending_recvs = sends.get(key, deque()), recvs.get(key, deque())
        if len(pending_sends) != len(pending_recvs):
            side, rank, extra = (
                ("send", src, pending_sends[len(pending_recvs)])
                if len(pending_sends) > len(pending_recvs)
                else ("receive", dst, pending_recvs[len(pending_sends)])
            )
            raise TacosError(
                f"{et_set.prefix}.{rank}.et: node {extra} ({side} {src}->{dst}, tag {tag}, "
                f"{size} bytes) has no matching {'receive' if side == 'send' else 'send'}; "
                "ASTRA-sim would wait for it forever"
            )
        for send_node, recv_node in zip(pending_sends, pending_recvs, strict=True):
            messages.append(Message(src, dst, tag, size, send_node, recv_node))
    return messages


def _message_key(
    node: Node, rank: int, et_set: EtSet, *, sender: bool
) -> tuple[int, int, int, int]:
    """(tag, src, dst, size); the rank's own end defaults to the file's rank, as in ASTRA-sim."""
    where = f"{et_set.prefix}.{rank}.et: node {node.id}"
    src = _int_attr(node, "comm_src", where, default=rank if sender else None)
    dst = _int_attr(node, "comm_dst", where, default=None if sender else rank)
    tag = _int_attr(node, "comm_tag", where, default=0)
    size = _int_attr(node, "comm_size", where, default=None)
    for peer in (src, dst):
        if not 0 <= peer < et_set.num_ranks:
            raise TacosError(f"{where}: peer {peer} is outside ranks 0..{et_set.num_ranks - 1}")
    return (tag, src, dst, size)


def _int_attr(node: Node, name: str, where: str, *, default: int | None) -> int:
    """An integer attribute; ``default`` when absent (an error when there is no default)."""
    try:
        value = get_attr(node, name)
    except KeyError:
        if default is None:
            raise TacosError(f"{where}: attribute {name!r} is missing") from None
        return default
    except ValueError as err:
        raise TacosError(f"{where}: {err}") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TacosError(f"{where}: attribute {name!r} must be an integer, got {value!r}")
    return value
