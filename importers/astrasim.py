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

from tacos.formats.astrasim import AnalyticalNetwork, parse_network
from tacos.importers.base import TopologyImport, cable
from tacos.topology import Link, Topology

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
    """NPUs numbered as ASTRA-sim numbers them, then one switch per Switch group."""
    sizes = [dim.npus for dim in dims]
    total = math.prod(sizes)
    links: list[Link] = []
    switch = total
    for d, dim in enumerate(dims):
        stride = math.prod(sizes[:d])
        latency_us = dim.latency_ns / 1000.0
        for first in range(total):
            if (first // stride) % dim.npus:
                continue  # not the first NPU of its group in this dimension
            group = [first + k * stride for k in range(dim.npus)]
            if dim.kind == "Switch":
                for npu in group:
                    links += cable(npu, switch, dim.bandwidth_GBps, latency_us)
                switch += 1
            elif dim.kind == "Ring":
                neighbours = range(dim.npus if dim.npus > 2 else 1)
                for k in neighbours:
                    links += cable(
                        group[k], group[(k + 1) % dim.npus], dim.bandwidth_GBps, latency_us
                    )
            else:
                links += [
                    Link(a, b, dim.bandwidth_GBps, latency_us)
                    for a in group
                    for b in group
                    if a != b
                ]
    return Topology(total, tuple(links), switch - total, name)
