"""Failed NPUs and links, and tenant groups: parsing user input and shrinking topologies.

A failed NPU takes its links with it; the survivors are renumbered ``0..`` in
their original order (switches after them) so that every format sees a dense
rank space, and :attr:`Topology.original_ids` keeps the way back. Users always
name NPUs by their original ids, in failures and in tenant groups alike.

Example:
    >>> from tacos.topology import from_spec
    >>> survivors = without_failures(from_spec("ring:6"), failed_npus=[2])
    >>> survivors.num_npus, survivors.original_ids
    (5, (0, 1, 3, 4, 5))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from tacos.errors import TacosError, whole_number
from tacos.jsonfile import load_json
from tacos.limits import MAX_NODES
from tacos.topology import Link, Topology

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*$", re.ASCII)
_LINK = re.compile(r"^\s*(\d+)\s*([->])\s*(\d+)\s*$", re.ASCII)


def parse_ids(text: str, what: str = "NPU list") -> list[int]:
    """``"3,7"`` or ``"0-3,8"`` (ranges inclusive) to a sorted list without repeats."""
    ids: set[int] = set()
    for part in text.split(","):
        if not part.strip():
            continue
        match = _RANGE.match(part)
        if not match:
            raise TacosError(f"{what} {text!r}: {part.strip()!r} is not an id or a range like 0-7")
        low = int(match[1])
        high = int(match[2]) if match[2] else low
        if high < low:
            raise TacosError(f"{what} {text!r}: range {part.strip()!r} runs backwards")
        if high >= MAX_NODES:
            raise TacosError(
                f"{what} {part.strip()[:40]!r}: id {high} is beyond any network tacos can hold "
                f"({MAX_NODES} nodes); give the ids of your network's NPUs"
            )
        ids.update(range(low, high + 1))
    return sorted(ids)


def parse_links(text: str) -> list[tuple[int, int]]:
    """``"0-1,4-5"`` (cables: both directions) or ``"0>1"`` (one direction) to directed pairs."""
    pairs: list[tuple[int, int]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = _LINK.match(part)
        if not match:
            raise TacosError(
                f"link list {text!r}: {part.strip()!r} is not like 0-1 (both ways) or 0>1"
            )
        u, v = int(match[1]), int(match[3])
        pairs.append((u, v))
        if match[2] == "-":
            pairs.append((v, u))
    return pairs


def _npu_id(value: object, where: str) -> int:
    """An NPU id from a JSON file: a whole number from 0 (not ``3.5``, ``"3"`` or ``true``)."""
    npu = whole_number(value, where)
    if not 0 <= npu < MAX_NODES:
        raise TacosError(f"{where}: NPU id {npu} is not in 0..{MAX_NODES - 1}")
    return npu


def parse_groups(text: str) -> list[list[int]]:
    """Tenant groups: ``"0-7;8-15"``, or a JSON file holding ``[[0, 1], [2, 3]]``."""
    path = Path(text)
    if path.suffix.lower() == ".json":
        data = load_json(path, "groups")
        groups = data.get("groups") if isinstance(data, dict) else data
        if not (isinstance(groups, list) and all(isinstance(g, list) for g in groups)):
            raise TacosError(f'{text}: expected a list of NPU-id lists (or {{"groups": ...}})')
        if not groups:
            raise TacosError(
                f"{text}: no groups; list each tenant's NPU ids, e.g. [[0, 1], [2, 3]]"
            )
        members = [
            sorted({_npu_id(x, f"{text}: group {index}") for x in group})
            for index, group in enumerate(groups)
        ]
    else:
        members = [parse_ids(part, "group") for part in text.split(";")]
    for index, group in enumerate(members):
        if not group:
            raise TacosError(
                f"groups {text[:60]!r}: group {index} is empty; give each tenant its NPUs, "
                'e.g. "0-7;8-15"'
            )
    return members


def without_failures(
    topology: Topology,
    failed_npus: Iterable[int] = (),
    failed_links: Iterable[tuple[int, int]] = (),
) -> Topology:
    """The topology minus failed NPUs (with their links) and failed directed links.

    Raises TacosError for an NPU or a link that does not exist.
    """
    failed = set(failed_npus)
    for npu in sorted(failed):
        if not 0 <= npu < topology.num_npus:
            raise TacosError(
                f"failed NPU {npu} does not exist: NPUs are 0..{topology.num_npus - 1}"
            )
    broken = set(failed_links)
    existing = {(link.src, link.dst) for link in topology.links}
    for u, v in sorted(broken - existing):
        raise TacosError(f"failed link {u}->{v} does not exist in {topology.describe()}")
    if len(failed) >= topology.num_npus - 1:
        raise TacosError("fewer than 2 NPUs survive the failures")
    if not failed and not broken:
        return topology
    survivors = [n for n in range(topology.num_nodes) if n not in failed]
    new_id = {old: new for new, old in enumerate(survivors)}
    links = tuple(
        Link(new_id[link.src], new_id[link.dst], link.bandwidth_GBps, link.latency_us)
        for link in topology.links
        if link.src not in failed and link.dst not in failed and (link.src, link.dst) not in broken
    )
    original = tuple(topology.label(n) for n in survivors)
    described = f"{topology.name} minus {_describe(failed, broken)}"
    return Topology(
        topology.num_npus - len(failed),
        links,
        topology.num_switches,
        described,
        original,
        cost=topology.cost,
    )


def to_current_ids(topology: Topology, npus: Sequence[int], what: str) -> list[int]:
    """Map original NPU ids (as users name them) to the topology's current ids."""
    current = {topology.label(n): n for n in topology.npus}
    missing = [n for n in npus if n not in current]
    if missing:
        raise TacosError(f"{what} names NPU {missing[0]}, which does not exist or has failed")
    return [current[n] for n in npus]


def _describe(failed: set[int], broken: set[tuple[int, int]]) -> str:
    parts = []
    if failed:
        parts.append("NPUs " + ",".join(map(str, sorted(failed))))
    if broken:
        parts.append("links " + ",".join(f"{u}>{v}" for u, v in sorted(broken)))
    return " and ".join(parts)
