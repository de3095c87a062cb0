"""ASTRA-sim analytical network configs (``network.yml``) as Topologies.

The file and what ASTRA-sim makes of it (dimensions, NPU numbering, what a
Ring, FullyConnected and Switch dimension connect) are described, and read, in
:mod:`tacos.formats.astrasim`; this module builds the Topology: NPUs numbered
as ASTRA-sim numbers them, then one switch per Switch group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from tacos.errors import TacosError
from tacos.formats.astrasim import (
    ASTRA_SIM_STRUCTURE,
    AnalyticalNetwork,
    dimension_pairs,
    is_v1_network,
    json_config_kind,
    parse_network,
    parse_v1_network,
)
from tacos.importers.base import TopologyImport
from tacos.jsonfile import parse_json
from tacos.schedule import SCHEDULE_FORMAT
from tacos.topology import Link, Structure, Topology, read_json

FORMAT_NAME = "ASTRA-sim analytical network"
V1_FORMAT_NAME = "ASTRA-sim 1.0 analytical network (JSON)"


def read_network(text: str, source: str) -> TopologyImport:
    """The topology a network.yml describes; errors name the file, line and key."""
    dims = parse_network(text, source)
    return TopologyImport(
        build_topology(dims, Path(source).stem), FORMAT_NAME, notes=tuple(_describe(dims))
    )


def read_json_network(text: str, source: str) -> TopologyImport:
    """A JSON network: ASTRA-sim 1.0's analytical network, or tacos's own topology JSON.

    Other ASTRA-sim JSON files (ns-3 ``logical-dims``, system, remote memory)
    describe no links: the error says what the file is and which to give.
    """
    data = parse_json(text, source)
    if isinstance(data, dict) and data.get("format") == SCHEDULE_FORMAT:
        raise TacosError(
            f"{source}: this is a tacos schedule, not a topology; tacos verify, tacos simulate "
            "and tacos-export --schedule read it"
        )
    other = json_config_kind(data)
    if other is not None:
        raise TacosError(f"{source}: this is {other}")
    if is_v1_network(data):
        dims = parse_v1_network(data, source)
        notes = tuple(_describe(dims)) + (
            "ASTRA-sim 1.0 format: nic-, router- and hbm- settings are not modelled",
        )
        return TopologyImport(build_topology(dims, Path(source).stem), V1_FORMAT_NAME, notes=notes)
    return TopologyImport(read_json(text, source), "tacos topology")


def _describe(dims: Sequence[AnalyticalNetwork]) -> list[str]:
    notes = [
        f"dimension {d}: {dim.kind} of {dim.npus} NPUs, {dim.bandwidth_GBps:g} GB/s, "
        f"{dim.latency_ns:g} ns"
        for d, dim in enumerate(dims)
    ]
    if len(dims) > 1:
        notes.append(
            "ASTRA-sim's congestion-aware backend runs one dimension only; "
            "use its congestion-unaware backend for this network"
        )
    return notes


def build_topology(dims: Sequence[AnalyticalNetwork], name: str = "") -> Topology:
    """NPUs numbered as ASTRA-sim numbers them, then one switch per Switch group.

    A network of several dimensions records their sizes (``structure``), so the
    bundle writer can give ASTRA-sim the same network back.
    """
    sizes = [dim.npus for dim in dims]
    per_dim = dimension_pairs([dim.kind for dim in dims], sizes)
    links = [
        Link(a, b, dim.bandwidth_GBps, dim.latency_ns / 1000.0)
        for dim, pairs in zip(dims, per_dim, strict=True)
        for a, b in pairs
    ]
    total = math.prod(sizes)
    switches = max((max(pair) for pairs in per_dim for pair in pairs), default=0) + 1 - total
    structure = Structure(ASTRA_SIM_STRUCTURE, tuple(sizes)) if len(dims) > 1 else None
    return Topology(total, tuple(links), max(switches, 0), name, structure=structure)
