"""Switched, hierarchical cluster layouts: k-ary fat trees, NVSwitch/rail clusters, xGMI nodes.

Real training clusters are not meshes: GPUs sit on a fast switch or mesh inside
a server, each GPU reaches the network through its own NIC, and NICs plug into
leaf switches joined by spines. This module lays such clusters out as plain
node counts and directed links; :func:`tacos.topology.from_spec` turns them
into Topologies. GPUs are NPUs (ids first, node by node); NICs, NVSwitches,
leaves, spines and fat-tree switches are forwarding nodes (switches) after them.
Every cable is two directed links with the same bandwidth (GB/s, 2^30 bytes)
and latency (us).

Spec strings (options after commas, any order)::

    fat-tree:K                   Al-Fares k-ary fat tree: K^3/4 hosts, K pods of K/2 edge
                                 and K/2 aggregation switches, (K/2)^2 cores; every link
                                 --bandwidth / --latency. K even, >= 2.
    dgx:NODESxGPUS[,opts]        NVSwitch servers: each GPU has a link to its server's
                                 NVSwitch and one to its own NIC; NICs of rail r (GPU r of
                                 every server) plug into rail r's leaf switches; every
                                 leaf has a link to every spine.
    xgmi:NODESxGPUS[,opts]       direct-connect servers (AMD MI250/MI300-like): the GPUs of
                                 a server are fully connected; each GPU has a NIC into one
                                 network switch shared by all servers.

Options (bandwidth in GB/s, latency in us):

    nvlink, nvlink-latency       GPU <-> NVSwitch (dgx)                  400, 0.25
    xgmi, xgmi-latency           GPU <-> GPU inside a server (xgmi)      50, 0.5
    pcie, pcie-latency           GPU <-> its NIC                         64, 0.25
    nic, nic-latency             NIC <-> leaf (dgx) or the switch (xgmi) 50 (dgx) 25 (xgmi), 1
    rails                        dgx: leaf groups; GPU g uses rail g mod rails   GPUS
    nodes-per-leaf               dgx: servers on one leaf of a rail      32
    spines                       dgx: spine switches (when there is more than one leaf)  4
    oversubscription             dgx: leaf downlink / uplink bandwidth   1
    spine-latency                dgx: leaf <-> spine                     1

A leaf's uplink to each spine carries (NICs on the leaf x nic) /
(oversubscription x spines), so ``oversubscription=1`` is a full-bisection
network and 2 halves the spine tier.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.limits import MAX_LINKS, MAX_NODES, check_count

LinkRow = tuple[int, int, float, float]
"""``(src, dst, bandwidth_GBps, latency_us)`` of one directed link."""


@dataclass(frozen=True)
class Layout:
    """A cluster as node counts and directed links (GPUs first, then forwarding nodes)."""

    num_npus: int
    num_switches: int
    links: tuple[LinkRow, ...]


_DGX_DEFAULTS = {
    "nvlink": 400.0,
    "nvlink-latency": 0.25,
    "pcie": 64.0,
    "pcie-latency": 0.25,
    "nic": 50.0,
    "nic-latency": 1.0,
    "nodes-per-leaf": 32,
    "spines": 4,
    "oversubscription": 1.0,
    "spine-latency": 1.0,
}
_XGMI_DEFAULTS = {
    "xgmi": 50.0,
    "xgmi-latency": 0.5,
    "pcie": 64.0,
    "pcie-latency": 0.25,
    "nic": 25.0,
    "nic-latency": 1.0,
}
_WHOLE = frozenset({"rails", "nodes-per-leaf", "spines"})
"""Options that count things and so must be whole numbers."""

CLUSTER_KINDS = ("fat-tree:K", "dgx:NODESxGPUS[,option=value...]", "xgmi:NODESxGPUS[,...]")


def fat_tree(k: int, bandwidth_GBps: float, latency_us: float) -> Layout:
    """The k-ary fat tree of Al-Fares et al. (SIGCOMM 2008), hosts as NPUs."""
    if k < 2 or k % 2:
        raise TacosError(f"fat-tree:{k}: K must be an even number >= 2 (ports per switch)")
    half = k // 2
    hosts = k**3 // 4
    # cables: host-edge, edge-aggregation and aggregation-core, two links each
    _check_size(f"fat-tree:{k}", hosts + k * k + half * half, 2 * (hosts + 2 * k * half * half))
    edge = [hosts + pod * half + i for pod in range(k) for i in range(half)]
    aggregation = [hosts + k * half + pod * half + i for pod in range(k) for i in range(half)]
    core = [hosts + k * k + i for i in range(half * half)]
    cables = []
    for host in range(hosts):
        cables.append((host, edge[host // half]))
    for pod in range(k):
        for i in range(half):
            for j in range(half):
                cables.append((edge[pod * half + i], aggregation[pod * half + j]))
                # aggregation switch j of every pod reaches cores j*half .. j*half+half-1
                cables.append((aggregation[pod * half + j], core[j * half + i]))
    rows = tuple(_both_ways(cables, bandwidth_GBps, latency_us))
    return Layout(hosts, k * k + half * half, rows)


def dgx(nodes: int, gpus: int, options: Mapping[str, float]) -> Layout:
    """NVSwitch servers with one NIC per GPU on rail-optimized leaves and a spine tier."""
    spec = f"dgx:{nodes}x{gpus}"
    opts = _options(spec, options, {**_DGX_DEFAULTS, "rails": gpus})
    _check_servers(spec, nodes, gpus)
    rails = int(opts["rails"])
    if not 1 <= rails <= gpus or gpus % rails:
        raise TacosError(f"{spec}: rails={rails} must divide the {gpus} GPUs of a server")
    per_leaf = int(opts["nodes-per-leaf"])
    _require_positive(spec, "nodes-per-leaf", per_leaf)
    leaves_per_rail = math.ceil(nodes / per_leaf)
    leaves = rails * leaves_per_rail
    spines = int(opts["spines"]) if leaves > 1 else 0
    if leaves > 1:
        _require_positive(spec, "spines", spines)
    if opts["oversubscription"] < 1:
        raise TacosError(f"{spec}: oversubscription must be >= 1 (downlink / uplink bandwidth)")
    npus = nodes * gpus
    _check_size(spec, 2 * npus + nodes + leaves + spines, 6 * npus + 2 * leaves * spines)
    nic_of = npus  # NIC of GPU g is node npus + g
    nvswitch_of = 2 * npus  # NVSwitch of server n is node 2*npus + n
    first_leaf = 2 * npus + nodes
    first_spine = first_leaf + leaves
    rows: list[LinkRow] = []
    for server in range(nodes):
        for local in range(gpus):
            gpu = server * gpus + local
            rows += _cable(gpu, nvswitch_of + server, opts["nvlink"], opts["nvlink-latency"])
            rows += _cable(gpu, nic_of + gpu, opts["pcie"], opts["pcie-latency"])
            leaf = first_leaf + (local % rails) * leaves_per_rail + server // per_leaf
            rows += _cable(nic_of + gpu, leaf, opts["nic"], opts["nic-latency"])
    for leaf in range(leaves):
        down = (gpus // rails) * min(per_leaf, nodes - (leaf % leaves_per_rail) * per_leaf)
        uplink = down * opts["nic"] / (opts["oversubscription"] * max(spines, 1))
        for spine in range(spines):
            rows += _cable(first_leaf + leaf, first_spine + spine, uplink, opts["spine-latency"])
    return Layout(npus, npus + nodes + leaves + spines, tuple(rows))


def xgmi(nodes: int, gpus: int, options: Mapping[str, float]) -> Layout:
    """Servers whose GPUs are fully connected, each GPU with a NIC into one shared switch."""
    spec = f"xgmi:{nodes}x{gpus}"
    opts = _options(spec, options, _XGMI_DEFAULTS)
    _check_servers(spec, nodes, gpus)
    npus = nodes * gpus
    _check_size(spec, 2 * npus + 1, npus * (gpus - 1) + 4 * npus)
    switch = 2 * npus
    rows: list[LinkRow] = []
    for server in range(nodes):
        first = server * gpus
        for a in range(first, first + gpus):
            for b in range(a + 1, first + gpus):
                rows += _cable(a, b, opts["xgmi"], opts["xgmi-latency"])
    for gpu in range(npus):
        rows += _cable(gpu, npus + gpu, opts["pcie"], opts["pcie-latency"])
        rows += _cable(npus + gpu, switch, opts["nic"], opts["nic-latency"])
    return Layout(npus, npus + 1, tuple(rows))


def parse_options(spec: str, text: str) -> dict[str, float]:
    """``name=value,name=value`` as numbers (names checked later by the builder)."""
    options: dict[str, float] = {}
    for item in text.split(",") if text else []:
        name, sep, value = item.partition("=")
        if not sep:
            raise TacosError(f"{spec!r}: option {item!r} must be name=value, e.g. nic=25")
        if name.strip() in options:
            raise TacosError(f"{spec!r}: option {name.strip()} is given twice; give it once")
        try:
            number = float(value)
        except ValueError:
            raise TacosError(f"{spec!r}: option {name} needs a number, got {value!r}") from None
        if not math.isfinite(number) or number < 0:
            raise TacosError(f"{spec!r}: option {name} must be a finite number >= 0")
        options[name.strip()] = number
    return options


# ------------------------------------------------------------------ helpers
def _options(
    spec: str, given: Mapping[str, float], defaults: Mapping[str, float]
) -> dict[str, float]:
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TacosError(
            f"{spec}: unknown option {unknown[0]!r}; {spec.split(':')[0]} takes "
            + ", ".join(sorted(defaults))
        )
    opts = {**defaults, **given}
    for name, value in opts.items():
        if name in _WHOLE and value != int(value):
            raise TacosError(f"{spec}: {name}={value:g} must be a whole number")
        if name not in _WHOLE and not name.endswith("latency") and name != "oversubscription":
            _require_positive(spec, name, value)
    return opts


def _check_servers(spec: str, nodes: int, gpus: int) -> None:
    if nodes < 1 or gpus < 1 or nodes * gpus < 2:
        kind = spec.split(":")[0]
        raise TacosError(f"{spec}: needs at least 1 server and 2 GPUs in all, e.g. {kind}:2x8")


def _check_size(spec: str, nodes: int, links: int) -> None:
    """Refuse a layout too big to build, before any of it is built."""
    check_count(nodes, MAX_NODES, "nodes", spec)
    check_count(links, MAX_LINKS, "directed links", spec)


def _require_positive(spec: str, name: str, value: float) -> None:
    if not value > 0:
        raise TacosError(f"{spec}: {name} must be positive, got {value:g}")


def _cable(a: int, b: int, bandwidth_GBps: float, latency_us: float) -> list[LinkRow]:
    return [(a, b, bandwidth_GBps, latency_us), (b, a, bandwidth_GBps, latency_us)]


def _both_ways(
    cables: list[tuple[int, int]], bandwidth_GBps: float, latency_us: float
) -> Iterator[LinkRow]:
    for a, b in cables:
        yield from _cable(a, b, bandwidth_GBps, latency_us)
