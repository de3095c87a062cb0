"""ASTRA-sim analytical network configs (``network.yml``): the model and its YAML.

What the file means, as ASTRA-sim's analytical backend reads it
(astra-network-analytical: ``NetworkParser``, the basic topologies and the
congestion-unaware ``MultiDimTopology``):

* ``topology``, ``npus_count``, ``bandwidth``, ``latency``: lists with one entry
  per dimension. Names are ``Ring``, ``FullyConnected`` and ``Switch`` (case
  matters); ``npus_count`` > 1, bandwidth > 0 in GB/s of 2**30 bytes, latency
  >= 0 in ns. Lists of different lengths are an error.
* NPU ids: dimension 0 varies fastest, ``id = sum(coord[d] * prod(npus_count[:d]))``.
  A dimension's groups are the NPUs that differ only in that coordinate.
* ``Ring``: bidirectional (the backend's default), a cable between neighbours and
  between the last and the first (a ring of two is a single cable). The
  congestion-aware backend sends a message clockwise (to increasing ids) unless
  anticlockwise is strictly shorter (``Ring::route``; :func:`ring_path`).
* ``FullyConnected``: a directed link for every ordered pair in the group.
* ``Switch``: one switch per group with a cable to each NPU of the group. The
  switches are numbered after all NPUs, dimension by dimension, groups in the
  order of their first NPU; for one dimension that is ASTRA-sim's own switch id.

:func:`parse_network` reads a file into :class:`AnalyticalNetwork` dimensions
(checked as ASTRA-sim checks them) and :func:`network_yaml` writes one; the
topology reader (:mod:`tacos.importers.astrasim`) and the bundle writer
(:mod:`tacos.exporters.astra_config`) build on both.

ASTRA-sim also reads JSON files, and users hand them over as networks:

* ASTRA-sim 1.0's analytical network (``topologies-per-dim``, ``units-count``,
  ``links-count``, ``link-bandwidth`` in GB/s, ``link-latency`` in ns, per
  dimension) describes the same dimensions: :func:`parse_v1_network` reads it.
  ``links-count`` per NPU beyond a dimension's own (Ring 2, also for two NPUs;
  FullyConnected n - 1; Switch 1) is parallel links, whose bandwidth adds up.
* The ns-3 frontend's ``logical-dims`` (or ``physical-dims``), the system
  configuration and the remote-memory configuration describe no links:
  :func:`json_config_kind` names them, for an error saying which file to give.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tacos.errors import TacosError, describe
from tacos.limits import MAX_LINKS, MAX_NODES, check_count
from tacos.yamlfile import parse_yaml

KINDS = ("Ring", "FullyConnected", "Switch")
ASTRA_SIM_STRUCTURE = "astra-sim"
"""``Topology.structure.kind`` of a network read from several ASTRA-sim dimensions."""
KEYS = ("topology", "npus_count", "bandwidth", "latency")


@dataclass(frozen=True)
class AnalyticalNetwork:
    """One dimension of ASTRA-sim's analytical network."""

    kind: str  # "Ring", "FullyConnected" or "Switch"
    npus: int
    bandwidth_GBps: float
    latency_ns: float

    def to_yaml(self) -> str:
        return network_yaml([self])


def network_yaml(dims: Sequence[AnalyticalNetwork]) -> str:
    """A network.yml of these dimensions (dimension 0 first, as ASTRA-sim lists them)."""

    def row(values: Sequence[object]) -> str:
        return "[ " + ", ".join(map(str, values)) + " ]"

    return (
        f"topology: {row([d.kind for d in dims])}\n"
        f"npus_count: {row([d.npus for d in dims])}\n"
        f"bandwidth: {row([repr(d.bandwidth_GBps) for d in dims])}  # GB/s\n"
        f"latency: {row([repr(d.latency_ns) for d in dims])}  # ns\n"
    )


def dimension_pairs(kinds: Sequence[str], sizes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Per dimension, the directed (src, dst) node pairs its links join, in ASTRA-sim's numbering.

    NPUs first (dimension 0 fastest), then one switch per group of each Switch
    dimension, dimension by dimension, groups in the order of their first NPU.
    Each cable is listed as its two directions one after the other.
    """
    total = math.prod(sizes)
    switch = total
    pairs: list[list[tuple[int, int]]] = []
    for d, (kind, size) in enumerate(zip(kinds, sizes, strict=True)):
        stride = math.prod(sizes[:d])
        mine: list[tuple[int, int]] = []
        for first in range(total):
            if (first // stride) % size:
                continue  # not the first NPU of its group in this dimension
            group = [first + k * stride for k in range(size)]
            if kind == "Switch":
                for npu in group:
                    mine += [(npu, switch), (switch, npu)]
                switch += 1
            elif kind == "Ring":
                for k in range(size if size > 2 else 1):
                    a, b = group[k], group[(k + 1) % size]
                    mine += [(a, b), (b, a)]
            else:
                mine += [(a, b) for a in group for b in group if a != b]
        pairs.append(mine)
    return pairs


def ring_path(size: int, src: int, dst: int) -> list[int]:
    """The NPUs a message visits from ``src`` to ``dst`` (both included) on a Ring of
    ``size``, as ASTRA-sim's congestion-aware backend routes it: clockwise unless
    anticlockwise is strictly shorter, so half-way round goes clockwise."""
    clockwise = (dst - src) % size
    step = -1 if size - clockwise < clockwise else 1
    path = [src]
    while path[-1] != dst:
        path.append((path[-1] + step) % size)
    return path


def parse_network(text: str, source: str) -> list[AnalyticalNetwork]:
    """The dimensions of a network.yml, checked as ASTRA-sim checks them."""
    node, data = parse_yaml(text, source)
    if not (isinstance(node, yaml.MappingNode) and isinstance(data, dict)):
        raise TacosError(f"{source}: expected a mapping with the keys {', '.join(KEYS)}")
    value_nodes = {
        key.value: value for key, value in node.value if isinstance(key, yaml.ScalarNode)
    }
    for key in KEYS:
        if key not in data:
            raise TacosError(
                f"{source}: missing key {key!r}; an ASTRA-sim network lists "
                f"{', '.join(KEYS)} with one entry per dimension"
            )
        if not isinstance(data[key], list):
            raise TacosError(
                f"{source}: line {_line(value_nodes[key])}: {key!r} must be a list with one "
                f"entry per dimension, e.g. {key}: [ ... ]"
            )
    count = len(data["topology"])
    if count == 0:
        raise TacosError(f"{source}: line {_line(value_nodes['topology'])}: 'topology' is empty")
    for key in KEYS[1:]:
        if len(data[key]) != count:
            raise TacosError(
                f"{source}: line {_line(value_nodes[key])}: {key!r} has {len(data[key])} "
                f"entries but 'topology' has {count}; give one entry per dimension"
            )
    dims = []
    for d in range(count):

        def where(key: str, d: int = d) -> str:
            return f"{source}: line {_line(value_nodes[key], d)}: {key}[{d}]"

        kind = data["topology"][d]
        if kind not in KINDS:
            raise TacosError(
                f"{where('topology')}: unknown topology {describe(kind)}; ASTRA-sim's analytical "
                f"backend knows {', '.join(KINDS)}"
            )
        npus = int(_number(data["npus_count"][d], where("npus_count"), whole=True))
        bandwidth = _number(data["bandwidth"][d], where("bandwidth"))
        latency = _number(data["latency"][d], where("latency"))
        if npus < 2:
            raise TacosError(f"{where('npus_count')}: {npus} NPUs; a dimension needs at least 2")
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise TacosError(f"{where('bandwidth')}: {bandwidth} GB/s must be positive")
        if not (math.isfinite(latency) and latency >= 0):
            raise TacosError(f"{where('latency')}: {latency} ns must be >= 0")
        dims.append(AnalyticalNetwork(kind, npus, bandwidth, latency))
    _check_size(dims, source)
    return dims


def _check_size(dims: Sequence[AnalyticalNetwork], source: str) -> None:
    """Refuse networks too big to build, from the counts alone (before any link exists)."""
    total = 1
    for dim in dims:
        total *= dim.npus
        check_count(total, MAX_NODES, "NPUs (the product of npus_count)", source)
    per_npu = {"Ring": 2, "Switch": 2}
    links = sum(total * per_npu.get(dim.kind, dim.npus - 1) for dim in dims)
    check_count(links, MAX_LINKS, "directed links", source)


def _line(node: yaml.Node, item: int | None = None) -> int:
    """1-based line of a value, or of one item of a block list."""
    if item is not None and isinstance(node, yaml.SequenceNode) and item < len(node.value):
        node = node.value[item]
    return int(node.start_mark.line) + 1


def _number(value: Any, where: str, *, whole: bool = False) -> float:
    """A number as ASTRA-sim's YAML reader takes it: quoted or not, never a boolean."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise TacosError(f"{where}: {describe(value)} is not a number") from None
    if whole and not number.is_integer():
        raise TacosError(f"{where}: {describe(value)} is not a whole number")
    return number


V1_KEYS = ("topologies-per-dim", "units-count", "links-count", "link-bandwidth", "link-latency")
"""The keys of an ASTRA-sim 1.0 analytical network JSON that define its links."""
_NOT_NETWORKS = (
    (
        ("logical-dims", "physical-dims"),
        "an ASTRA-sim ns-3 frontend configuration (its dims group NPUs; the links are "
        "elsewhere); give the ns-3 topology file its network config names (.txt)",
    ),
    (
        ("scheduling-policy", "all-reduce-implementation", "preferred-dataset-splits"),
        "an ASTRA-sim system configuration; give the network configuration (network .yml)",
    ),
    (
        ("memory-type",),
        "an ASTRA-sim remote memory configuration; give the network configuration (network .yml)",
    ),
)


def json_config_kind(data: Any) -> str | None:
    """What an ASTRA-sim JSON that describes no network is, and which file to give instead."""
    if isinstance(data, dict):
        for keys, what in _NOT_NETWORKS:
            if any(key in data for key in keys):
                return what
    return None


def is_v1_network(data: Any) -> bool:
    return isinstance(data, dict) and "topologies-per-dim" in data


def parse_v1_network(data: dict[str, Any], source: str) -> list[AnalyticalNetwork]:
    """The dimensions of an ASTRA-sim 1.0 analytical network JSON."""
    for key in V1_KEYS:
        if not isinstance(data.get(key), list):
            raise TacosError(
                f"{source}: {key!r} must be a list with one entry per dimension (an ASTRA-sim "
                f"1.0 network lists {', '.join(V1_KEYS)})"
            )
    count = len(data["topologies-per-dim"])
    declared = data.get("dimensions-count", count)
    for key in (*V1_KEYS[1:], "dimensions-count"):
        length = declared if key == "dimensions-count" else len(data[key])
        if length != count:
            raise TacosError(
                f"{source}: {key!r} gives {length} dimensions but 'topologies-per-dim' has "
                f"{count}; give one entry per dimension"
            )
    if count == 0:
        raise TacosError(f"{source}: 'topologies-per-dim' is empty")
    dims = []
    for d in range(count):
        kind = data["topologies-per-dim"][d]
        if kind not in KINDS:
            raise TacosError(
                f"{source}: topologies-per-dim[{d}]: unknown topology {describe(kind)}; "
                f"use one of {', '.join(KINDS)}"
            )
        npus = int(_number(data["units-count"][d], f"{source}: units-count[{d}]", whole=True))
        if npus < 2:
            raise TacosError(
                f"{source}: units-count[{d}]: {npus} NPUs; a dimension needs 2 or more"
            )
        links = _number(data["links-count"][d], f"{source}: links-count[{d}]", whole=True)
        own = {"Ring": 2, "Switch": 1}.get(kind, npus - 1)  # 1.0's rings count 2 per NPU
        if links < own or links % own:
            raise TacosError(
                f"{source}: links-count[{d}]: {links:g} links per NPU; a {kind} of {npus} NPUs "
                f"has a multiple of {own}"
            )
        bandwidth = _number(data["link-bandwidth"][d], f"{source}: link-bandwidth[{d}]")
        latency = _number(data["link-latency"][d], f"{source}: link-latency[{d}]")
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise TacosError(f"{source}: link-bandwidth[{d}]: {bandwidth} GB/s must be positive")
        if not (math.isfinite(latency) and latency >= 0):
            raise TacosError(f"{source}: link-latency[{d}]: {latency} ns must be >= 0")
        dims.append(AnalyticalNetwork(kind, npus, bandwidth * links / own, latency))
    _check_size(dims, source)
    return dims
