"""ns-3 topology files (ASTRA-sim's ns-3 backend) as Topologies.

The format, as ``SetupNetwork`` in astra-network-ns3 reads it with ``>>`` (so
only the order of whitespace-separated fields matters, not the lines)::

    node_count switch_count link_count
    switch ids (switch_count of them)
    src dst rate delay error_rate        (link_count times)

Every node that is not a switch is an NPU. Each link line is one cable: ns-3
installs a device at both ends with the same rate and delay, so it becomes two
directed links. Rates use ns-3's DataRate spelling (``400Gbps``, ``25Gb/s``,
``10GBps``, bits unless ``B``); delays ns-3's Time spelling (``0.0005ms``,
``500ns``; a bare number is seconds). The error rate (packet loss) is not
modelled.

ns-3 may give switches ids between NPU ids; a Topology numbers NPUs first. The
NPUs keep their order and become ``0..P-1``, the switches follow in id order,
and :attr:`TopologyImport.file_ids` keeps each node's ns-3 id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from tacos.errors import TacosError
from tacos.importers.base import TopologyImport, bits_per_second_to_GBps, cable
from tacos.topology import Link, Topology

FORMAT_NAME = "ns-3 topology"

_BITS = {"bps": 1, "b/s": 1, "Bps": 8, "B/s": 8}
_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
RATE_UNITS: dict[str, float] = {"": 1}
RATE_UNITS.update(
    (prefix + unit, scale * bits)
    for prefix, scale in _DECIMAL.items()
    for unit, bits in _BITS.items()
)
RATE_UNITS.update(  # ns-3 spells binary prefixes only with "/s": Gib/s, GiB/s
    (prefix + unit, scale * bits)
    for prefix, scale in _BINARY.items()
    for unit, bits in _BITS.items()
    if "/" in unit
)
"""ns-3 DataRate suffix -> bits per second per unit (a bare number is bits/s)."""
TIME_UNITS_US = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3, "ps": 1e-6, "fs": 1e-9, "min": 6e7,
                 "h": 3.6e9, "": 1e6}  # fmt: skip
"""ns-3 Time suffix -> microseconds per unit (a bare number is seconds)."""
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<unit>.*)$", re.ASCII
)

Token = tuple[int, str]
"""(1-based line, text)."""


_CONFIG_LINE = re.compile(r"^\s*TOPOLOGY_FILE\s+(?P<path>\S+)", re.MULTILINE)
_WORKLOAD_FIRST_WORDS = ("MICRO", "DATA", "HYBRID", "MODEL", "DISTRIBUTED")


def _refuse_other_txt(text: str, source: str) -> None:
    """Other .txt files users hand over as networks: name them and the file to give instead."""
    config = _CONFIG_LINE.search(text)
    if config:
        raise TacosError(
            f"{source}: this is an ns-3 simulation config, not a topology; give the topology "
            f"file its TOPOLOGY_FILE names ({config['path']})"
        )
    first = text.split(maxsplit=1)[0] if text.split() else ""
    if first.upper().startswith(_WORKLOAD_FIRST_WORDS):
        raise TacosError(
            f"{source}: this is an ASTRA-sim text workload ({first}), not a network; give an "
            "ns-3 topology .txt, an ASTRA-sim network .yml or an htsim .topo"
        )


def read_topology(text: str, source: str) -> TopologyImport:
    """The topology of an ns-3 topology file; errors name the file and line."""
    _refuse_other_txt(text, source)
    reader = _Reader(source, _tokens(text))
    node_count = reader.whole("the node count", minimum=1)
    switch_count = reader.whole("the switch count", minimum=0)
    link_count = reader.whole("the link count", minimum=0)
    switches: set[int] = set()
    for _ in range(switch_count):
        line, switch = reader.node_id("a switch id", node_count)
        if switch in switches:
            raise TacosError(f"{source}: line {line}: switch {switch} is listed twice")
        switches.add(switch)
    _check_npu_count(source, node_count - len(switches), link_count, len(text))
    npus = [node for node in range(node_count) if node not in switches]
    if not npus:
        raise TacosError(f"{source}: line 1: all {node_count} nodes are switches; no NPU is left")
    file_ids = tuple(npus + sorted(switches))
    our_id = {old: new for new, old in enumerate(file_ids)}
    links: list[Link] = []
    lossy = 0
    for _ in range(link_count):
        line, src = reader.node_id("a link's source", node_count)
        dst = reader.node_id("a link's destination", node_count)[1]
        if src == dst:
            raise TacosError(f"{source}: line {line}: link from node {src} to itself")
        bandwidth = bits_per_second_to_GBps(reader.quantity("a rate", RATE_UNITS, "400Gbps"))
        latency_us = reader.quantity("a delay", TIME_UNITS_US, "0.0005ms")
        if reader.quantity("an error rate", {"": 1.0}, "0") > 0:
            lossy += 1
        if not bandwidth > 0:
            raise TacosError(f"{source}: line {line}: the rate must be positive")
        links += cable(our_id[src], our_id[dst], bandwidth, latency_us)
    reader.expect_end(f"the {link_count} links line 1 announces")
    notes = []
    renumbered = file_ids != tuple(range(node_count))
    if renumbered:
        notes.append(f"NPUs renumbered 0..{len(npus) - 1} in ns-3 id order, switches after them")
    if lossy:
        notes.append(f"{lossy} link(s) have a packet error rate, which is not modelled")
    topology = Topology(len(npus), tuple(links), switch_count, Path(source).stem)
    return TopologyImport(topology, FORMAT_NAME, file_ids if renumbered else None, tuple(notes))


def _check_npu_count(source: str, npus: int, links: int, text_chars: int) -> None:
    """Refuse an NPU count no file this long can connect, before listing the NPUs.

    Every NPU needs a link to be reachable, a link touches two nodes and takes more
    than two characters of the file, so the node count on line 1 cannot make the
    reader allocate more than the file's size justifies.
    """
    if npus > 2 * min(links, text_chars) + 1:
        raise TacosError(
            f"{source}: line 1: {npus} NPUs cannot all be connected by the links this "
            "file has room for; fix the node count on line 1"
        )


def _tokens(text: str) -> Iterator[Token]:
    for number, line in enumerate(text.splitlines(), start=1):
        for word in line.split():
            yield number, word


class _Reader:
    """Takes the whitespace-separated fields in order, as ns-3's ``>>`` does."""

    def __init__(self, source: str, tokens: Iterator[Token]) -> None:
        self.source = source
        self.tokens = tokens
        self.line = 1

    def take(self, what: str) -> str:
        token = next(self.tokens, None)
        if token is None:
            raise TacosError(
                f"{self.source}: line {self.line}: the file ends where {what} was expected; "
                "the counts on line 1 promise more"
            )
        self.line, word = token
        return word

    def whole(self, what: str, *, minimum: int) -> int:
        word = self.take(what)
        if not _is_whole(word) or int(word) < minimum:
            raise TacosError(
                f"{self.source}: line {self.line}: {what} must be a whole number >= {minimum}, "
                f"got {word!r}"
            )
        return int(word)

    def node_id(self, what: str, node_count: int) -> tuple[int, int]:
        word = self.take(what)
        if not _is_whole(word) or int(word) >= node_count:
            raise TacosError(
                f"{self.source}: line {self.line}: {what} {word!r} is not a node id in "
                f"0..{node_count - 1}"
            )
        return self.line, int(word)

    def quantity(self, what: str, units: Mapping[str, float], example: str) -> float:
        """A number with a unit suffix, scaled by ``units`` (a bare number when '' is a key)."""
        word = self.take(what)
        match = _QUANTITY.match(word)
        if not match or match["unit"] not in units:
            known = ", ".join(unit for unit in units if unit)
            raise TacosError(
                f"{self.source}: line {self.line}: {what} {word!r} is not understood; "
                f"write e.g. {example}" + (f" (units: {known})" if known else "")
            )
        value = float(match["number"]) * units[match["unit"]]
        if not (math.isfinite(value) and value >= 0):
            raise TacosError(
                f"{self.source}: line {self.line}: {what} {word!r} must be a finite number >= 0"
            )
        return value

    def expect_end(self, what: str) -> None:
        token = next(self.tokens, None)
        if token is not None:
            raise TacosError(
                f"{self.source}: line {token[0]}: unexpected {token[1]!r} after {what}; "
                "fix the link count on line 1"
            )


def _is_whole(word: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts ``²``, which ``int`` then refuses."""
    return word.isascii() and word.isdigit()
