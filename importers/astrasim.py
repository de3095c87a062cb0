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

from tacos.formats.astrasim import (
    ASTRA_SIM_STRUCTURE,
    AnalyticalNetwork,
    dimension_pairs,
    parse_network,
)
from tacos.importers.base import TopologyImport
from tacos.topology import Link, Structure, Topology

FORMAT_NAME = "ASTRA-sim analytical network"


def read_network(text: str, source: str) -> TopologyImport:
    """The topology a network.yml describes; errors name the file, line and key."""
    dims = parse_network(text, source)
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
    return TopologyImport(build_topology(dims, Path(source).stem), FORMAT_NAME, notes=tuple(notes))


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
