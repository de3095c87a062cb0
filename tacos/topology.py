"""Network topologies: NPUs, switches and directed links with an alpha-beta cost.

A :class:`Topology` numbers its nodes ``0 .. num_nodes-1``; the first
``num_npus`` are NPUs (they own and receive collective data) and the rest are
switches (they only forward). Every link is directed and carries its own
bandwidth and latency, so heterogeneous and asymmetric networks need nothing
special: a bidirectional cable is simply two links.

Units follow ASTRA-sim and the TACOS paper: bandwidth in GB/s with
1 GB = 2**30 bytes, latency and times in microseconds.

Example:
    >>> topo = Topology.ring(4)
    >>> topo.num_npus, len(topo.links)
    (4, 8)
    >>> topo.links[0].transfer_time_us(2**20)  # 0.5 us + 1 MiB at 50 GB/s
    20.03125
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from tacos import clusters
from tacos.errors import TacosError, describe
from tacos.inputfile import require_file
from tacos.jsonfile import parse_json
from tacos.limits import MAX_LINK_TIME_US, MAX_LINKS, MAX_NODES, check_count
from tacos.linkmodel import CostModel

GIB = 2**30
Direction = Literal["out", "in"]
"""Of links and a node set: ``out`` counts links leaving it (data spreads), ``in`` entering."""
DEFAULT_BANDWIDTH_GBPS = 50.0
DEFAULT_LATENCY_US = 0.5
TOPOLOGY_FORMAT = "tacos-topology"
TOPOLOGY_VERSION = 1
CSV_HEADER = ("src", "dst", "bandwidth_GBps", "latency_us")
TOPOLOGY_FILE_SUFFIXES = (".csv", ".json")
"""tacos's own topology files; other tools' files are formats (:mod:`tacos.registry`)."""


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link ``src -> dst``; it carries one chunk at a time."""

    src: int
    dst: int
    bandwidth_GBps: float
    latency_us: float

    def transfer_time_us(self, nbytes: int) -> float:
        """Time the link is busy moving ``nbytes``: latency + size / bandwidth.

        This is the single link model shared by the synthesizer, the simulator
        and the bounds, so that their times agree to the last bit.
        """
        return self.latency_us + nbytes / (self.bandwidth_GBps * GIB) * 1e6


@dataclass(frozen=True)
class Structure:
    """How a generated topology is built, so that tools read it instead of parsing names.

    ``kind`` is its generator: ``ring``, ``fully-connected``, ``switch``, ``mesh``,
    ``torus``, ``hypercube``, ``fat-tree``, ``dgx`` or ``xgmi``, or ``astra-sim``
    for a network read from several ASTRA-sim dimensions. ``dims`` are the
    sizes of the dimensions its links run along, dimension 0 fastest as
    :meth:`Topology.grid` numbers nodes: a mesh's or torus's grid sizes, ``D``
    twos for ``hypercube:D`` (its bits), an ASTRA-sim network's ``npus_count``;
    the other kinds have none.

    >>> Topology.grid((4, 2), wrap=True).structure
    Structure(kind='torus', dims=(4, 2))
    >>> from_spec("hypercube:3").structure.dims
    (2, 2, 2)
    """

    kind: str
    dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class Topology:
    """NPUs ``0..num_npus-1``, switches after them, and directed links.

    Link ids are positions in :attr:`links`; schedules refer to links by id.
    Parallel links between the same pair are allowed (several cables).
    ``original_ids`` maps each node to its id before failed parts were removed
    (:func:`tacos.failures.without_failures`); empty means unchanged.
    ``structure`` says how a generator built it (None: a file or a changed network).
    ``cost`` is how its links and NPUs spend time (:mod:`tacos.linkmodel`).
    """

    num_npus: int
    links: tuple[Link, ...]
    num_switches: int = 0
    name: str = ""
    original_ids: tuple[int, ...] = ()
    structure: Structure | None = None
    cost: CostModel = CostModel()

    def __post_init__(self) -> None:
        if self.num_npus < 1:
            raise TacosError(f"{_called(self.name)}: needs at least one NPU")
        if self.num_switches < 0:
            raise TacosError(f"{_called(self.name)}: negative switch count")
        for index, link in enumerate(self.links):
            _check_link(link, index, self.num_nodes, self.name)
        if self.original_ids and len(self.original_ids) != self.num_nodes:
            raise TacosError(f"{_called(self.name)}: original_ids must name every node")
        if (
            self.structure
            and self.structure.dims
            and math.prod(self.structure.dims) != self.num_npus
        ):
            raise TacosError(
                f"{_called(self.name)}: structure dims {list(self.structure.dims)} do not "
                f"multiply to its {self.num_npus} NPUs"
            )

    def label(self, node: int) -> int:
        """The id a user knows ``node`` by (its id before failures were removed)."""
        return self.original_ids[node] if self.original_ids else node

    # ----------------------------------------------------------------- shape
    @property
    def num_nodes(self) -> int:
        return self.num_npus + self.num_switches

    @property
    def npus(self) -> range:
        return range(self.num_npus)

    def is_switch(self, node: int) -> bool:
        return node >= self.num_npus

    @cached_property
    def out_links(self) -> tuple[tuple[int, ...], ...]:
        """Link ids leaving each node, in id order."""
        return _incidence(self.num_nodes, (link.src for link in self.links))

    @cached_property
    def in_links(self) -> tuple[tuple[int, ...], ...]:
        """Link ids entering each node, in id order."""
        return _incidence(self.num_nodes, (link.dst for link in self.links))

    def link_times_us(self, nbytes: int) -> list[float]:
        """Per-link busy time for one message of ``nbytes`` (indexed by link id).

        Every time derived from the topology comes through here, so a latency near the
        largest float or a bandwidth near zero is refused here, before it can turn a
        schedule's times into infinities that no verifier would accept.
        """
        times = [link.transfer_time_us(nbytes) for link in self.links]
        if times and not max(times) <= MAX_LINK_TIME_US:  # also catches inf and nan
            index = next(i for i, t in enumerate(times) if not t <= MAX_LINK_TIME_US)
            link = self.links[index]
            raise TacosError(
                f"{_called(self.name)} link {index} ({link.src}->{link.dst}): moving "
                f"{nbytes} bytes at {link.bandwidth_GBps:g} GB/s after {link.latency_us:g} us "
                f"takes more than {MAX_LINK_TIME_US:g} us; use realistic values"
            )
        return times

    def link_busy_times_us(self, nbytes: int) -> list[float]:
        """Per link, how long one message of ``nbytes`` keeps it from the next one.

        The paper's link model holds a link until the message arrives (these are
        :meth:`link_times_us`); the pipelined one frees it after serialization.
        """
        arrival = self.link_times_us(nbytes)
        if self.cost.link_model == "paper":
            return arrival
        return [self.cost.busy_us(link, nbytes) for link in self.links]

    def reduce_time_us(self, nbytes: int) -> float:
        """How long an NPU takes to reduce ``nbytes`` into its own copy (0: free).

        Refused, as link times are, when it would exceed any realistic time.
        """
        reduce_us = self.cost.reduce_us(nbytes)
        if not reduce_us <= MAX_LINK_TIME_US:
            raise TacosError(
                f"{_called(self.name)}: reducing {nbytes} bytes at "
                f"{self.cost.reduce_bandwidth_GBps:g} GB/s takes more than "
                f"{MAX_LINK_TIME_US:g} us; use a realistic reduce bandwidth"
            )
        return reduce_us

    def with_cost(self, cost: CostModel) -> Topology:
        """The same network timed by ``cost``."""
        return replace(self, cost=cost)

    def transposed(self) -> Topology:
        """Every link reversed, ids kept: link ``i`` of the result is link ``i`` backwards."""
        reversed_links = tuple(
            Link(link.dst, link.src, link.bandwidth_GBps, link.latency_us) for link in self.links
        )
        return Topology(
            self.num_npus, reversed_links, self.num_switches, self.name + "^T", cost=self.cost
        )

    def components_over(self, min_bandwidth_GBps: float) -> list[int]:
        """Per node, the least node id it is joined to by links of at least that bandwidth
        (either way): the servers, pods or racks that the fast links make."""
        parent = list(range(self.num_nodes))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for link in self.links:
            if link.bandwidth_GBps >= min_bandwidth_GBps:
                a, b = find(link.src), find(link.dst)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        return [find(x) for x in range(self.num_nodes)]

    def members_only(self, members: Sequence[int]) -> Topology:
        """The network as a collective of ``members`` alone sees it: ``members[i]`` is NPU
        ``i``, and every other NPU only forwards (a switch, after the existing ones).

        A simulator such as ASTRA-sim routes a message between two members through the
        others' links without running anything on them, which is what a switch is here;
        the original ids stay available through :meth:`label`.
        """
        chosen = set(members)
        order = [*members, *(n for n in range(self.num_nodes) if n not in chosen)]
        new_id = {old: new for new, old in enumerate(order)}
        links = tuple(
            Link(new_id[link.src], new_id[link.dst], link.bandwidth_GBps, link.latency_us)
            for link in self.links
        )
        original = tuple(self.label(n) for n in order)
        name = f"{self.name} for NPUs {list(members)}"
        return Topology(
            len(members), links, self.num_nodes - len(members), name, original, cost=self.cost
        )

    def describe(self) -> str:
        kinds = f"{self.num_npus} NPUs"
        if self.num_switches:
            kinds += f", {self.num_switches} switch{'es' if self.num_switches > 1 else ''}"
        return f"{self.name or 'topology'} ({kinds}, {len(self.links)} directed links)"

    # ---------------------------------------------------------- validation
    def check_ranks(self, ranks: Sequence[int]) -> None:
        """Raise unless every rank is an NPU and every rank reaches every other."""
        for rank in ranks:
            if not 0 <= rank < self.num_npus:
                raise TacosError(
                    f"rank {rank} is not an NPU of {self.describe()}; "
                    f"ranks must be in 0..{self.num_npus - 1}"
                )
        self.check_connected(ranks)

    def check_connected(self, ranks: Sequence[int] | None = None) -> None:
        """Raise unless every rank can reach every other rank (switches may relay).

        Strong connectivity among ``ranks`` is checked with one forward and one
        backward search from the first rank, so it costs O(nodes + links).
        """
        ranks = list(self.npus if ranks is None else ranks)
        if len(ranks) < 2:
            return
        root = ranks[0]
        reach_from_root = _reachable(root, self.out_links, self.links, forward=True)
        reach_to_root = _reachable(root, self.in_links, self.links, forward=False)
        for rank in ranks[1:]:
            if not reach_from_root[rank]:
                raise TacosError(
                    f"{_called(self.name)} is disconnected: NPU {self.label(rank)} cannot be "
                    f"reached from NPU {self.label(root)}; add links so that every NPU reaches "
                    "every other"
                )
            if not reach_to_root[rank]:
                raise TacosError(
                    f"{_called(self.name)} is disconnected: NPU {self.label(root)} cannot be "
                    f"reached from NPU {self.label(rank)}; add links so that every NPU reaches "
                    "every other"
                )

    # ----------------------------------------------------------- generators
    @classmethod
    def from_edges(
        cls,
        num_npus: int,
        edges: Iterable[tuple[int, int]],
        *,
        bandwidth_GBps: float = DEFAULT_BANDWIDTH_GBPS,
        latency_us: float = DEFAULT_LATENCY_US,
        num_switches: int = 0,
        name: str = "",
        bidirectional: bool = True,
        structure: Structure | None = None,
    ) -> Topology:
        """Build a homogeneous topology from node pairs; duplicates are dropped."""
        seen: set[tuple[int, int]] = set()
        links = []
        for u, v in edges:
            for a, b in ((u, v), (v, u)) if bidirectional else ((u, v),):
                if a != b and (a, b) not in seen:
                    seen.add((a, b))
                    links.append(Link(a, b, bandwidth_GBps, latency_us))
        return cls(num_npus, tuple(links), num_switches, name, structure=structure)

    @classmethod
    def ring(cls, n: int, **kw: Any) -> Topology:
        """Bidirectional ring of ``n`` NPUs."""
        _require(n >= 2, f"ring:{n} needs at least 2 NPUs")
        kw.setdefault("name", f"ring:{n}")
        kw.setdefault("structure", Structure("ring"))
        return cls.from_edges(n, ((i, (i + 1) % n) for i in range(n)), **kw)

    @classmethod
    def fully_connected(cls, n: int, **kw: Any) -> Topology:
        """Every NPU has a direct link to every other NPU."""
        _require(n >= 2, f"fully-connected:{n} needs at least 2 NPUs")
        kw.setdefault("name", f"fully-connected:{n}")
        kw.setdefault("structure", Structure("fully-connected"))
        return cls.from_edges(n, itertools.combinations(range(n), 2), **kw)

    @classmethod
    def grid(cls, dims: Sequence[int], *, wrap: bool, **kw: Any) -> Topology:
        """N-dimensional mesh (``wrap=False``) or torus (``wrap=True``), dimension 0 fastest."""
        _require(all(d >= 1 for d in dims), f"grid dimensions must be >= 1, got {list(dims)}")
        n = math.prod(dims)
        _require(n >= 2, f"grid {list(dims)} has fewer than 2 NPUs")
        kind = "torus" if wrap else "mesh"
        kw.setdefault("name", f"{kind}{len(dims)}d:" + "x".join(map(str, dims)))
        kw.setdefault("structure", Structure(kind, tuple(dims)))
        strides = [math.prod(dims[:i]) for i in range(len(dims))]
        edges = []
        for node in range(n):
            for dim, size in enumerate(dims):
                coord = (node // strides[dim]) % size
                if coord + 1 < size:
                    edges.append((node, node + strides[dim]))
                elif wrap and size > 2:
                    edges.append((node, node - coord * strides[dim]))
        return cls.from_edges(n, edges, **kw)

    @classmethod
    def switch(cls, n: int, **kw: Any) -> Topology:
        """``n`` NPUs, each with one link to and one from a single switch (node ``n``)."""
        _require(n >= 2, f"switch:{n} needs at least 2 NPUs")
        kw.setdefault("name", f"switch:{n}")
        kw.setdefault("structure", Structure("switch"))
        return cls.from_edges(n, ((i, n) for i in range(n)), num_switches=1, **kw)

    @classmethod
    def hypercube(cls, dim: int, **kw: Any) -> Topology:
        """``2**dim`` NPUs, linked when their ids differ in exactly one bit."""
        _require(1 <= dim <= 20, f"hypercube:{dim} needs 1 <= dimension <= 20")
        n = 2**dim
        kw.setdefault("name", f"hypercube:{dim}")
        kw.setdefault("structure", Structure("hypercube", (2,) * dim))
        edges = ((u, u ^ (1 << b)) for u in range(n) for b in range(dim) if u < u ^ (1 << b))
        return cls.from_edges(n, edges, **kw)

    # ------------------------------------------------------------ networkx
    def to_networkx(self) -> nx.MultiDiGraph:
        """A MultiDiGraph: node attr ``kind`` ('npu'/'switch'), edge key = link id."""
        graph = nx.MultiDiGraph(name=self.name)
        for node in range(self.num_nodes):
            graph.add_node(node, kind="switch" if self.is_switch(node) else "npu")
        for index, link in enumerate(self.links):
            graph.add_edge(
                link.src,
                link.dst,
                key=index,
                bandwidth_GBps=link.bandwidth_GBps,
                latency_us=link.latency_us,
            )
        return graph

    @classmethod
    def from_networkx(
        cls,
        graph: nx.Graph,
        *,
        bandwidth_GBps: float = DEFAULT_BANDWIDTH_GBPS,
        latency_us: float = DEFAULT_LATENCY_US,
        name: str | None = None,
    ) -> Topology:
        """Any networkx graph: nodes with ``kind='switch'`` become switches.

        Undirected edges become two links. Edge attributes ``bandwidth_GBps`` and
        ``latency_us`` override the defaults. NPUs are numbered in sorted label
        order (insertion order when labels do not sort), switches after them.
        """
        labels = list(graph.nodes)
        with contextlib.suppress(TypeError):
            labels = sorted(labels)
        npus = [x for x in labels if graph.nodes[x].get("kind", "npu") != "switch"]
        switches = [x for x in labels if graph.nodes[x].get("kind", "npu") == "switch"]
        index = {label: i for i, label in enumerate(npus + switches)}
        links = []
        edges = graph.edges(data=True)
        for u, v, data in edges:
            pairs = [(u, v)] if graph.is_directed() else [(u, v), (v, u)]
            for a, b in pairs:
                links.append(
                    Link(
                        index[a],
                        index[b],
                        float(data.get("bandwidth_GBps", bandwidth_GBps)),
                        float(data.get("latency_us", latency_us)),
                    )
                )
        return cls(len(npus), tuple(links), len(switches), name or str(graph.name or ""))

    # ------------------------------------------------------------ JSON form
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": TOPOLOGY_FORMAT,
            "version": TOPOLOGY_VERSION,
            "name": self.name,
            "npus": self.num_npus,
            "switches": self.num_switches,
        }
        if self.original_ids:
            data["original_ids"] = list(self.original_ids)
        if self.structure is not None:
            data["structure"] = {"kind": self.structure.kind, "dims": list(self.structure.dims)}
        if not self.cost.is_default:
            data["cost"] = self.cost.to_dict()
        data["links"] = [[lk.src, lk.dst, lk.bandwidth_GBps, lk.latency_us] for lk in self.links]
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "topology") -> Topology:
        """Inverse of :meth:`to_dict`; errors name ``source`` and the bad field."""
        if not isinstance(data, dict):
            raise TacosError(f"{source}: expected a JSON object with 'npus' and 'links'")
        if data.get("format", TOPOLOGY_FORMAT) != TOPOLOGY_FORMAT:
            raise TacosError(
                f"{source}: format is {describe(data.get('format'))}, not {TOPOLOGY_FORMAT!r}"
            )
        version = data.get("version", TOPOLOGY_VERSION)
        if version != TOPOLOGY_VERSION:
            raise TacosError(
                f"{source}: topology version {describe(version)} is not supported "
                f"(this tacos reads version {TOPOLOGY_VERSION}); upgrade tacos"
            )
        for key in ("npus", "links"):
            if key not in data:
                raise TacosError(f"{source}: missing field {key!r}")
        unknown = sorted(str(key) for key in data if key not in _JSON_FIELDS)
        if unknown:
            raise TacosError(
                f"{source}: unknown field {unknown[0][:40]!r}; a topology has "
                + ", ".join(_JSON_FIELDS)
            )
        if not isinstance(data["links"], list):
            raise TacosError(
                f"{source}: links must be a list of [src, dst, bandwidth_GBps, latency_us]"
            )
        npus = _as_int(data["npus"], f"{source}: npus")
        switches = _as_int(data.get("switches", 0), f"{source}: switches")
        check_count(npus + switches, MAX_NODES, "nodes (npus + switches)", source)
        check_count(len(data["links"]), MAX_LINKS, "links", source)
        links = []
        for i, row in enumerate(data["links"]):
            if not (isinstance(row, list) and len(row) == 4):
                raise TacosError(
                    f"{source}: links[{i}] must be [src, dst, bandwidth_GBps, latency_us]"
                )
            links.append(_parse_link(row, f"{source}: links[{i}]"))
        original = data.get("original_ids", [])
        if not isinstance(original, list):
            raise TacosError(f"{source}: original_ids must be a list of node ids")
        name = str(data.get("name", ""))
        try:
            return cls(
                npus,
                tuple(links),
                switches,
                name,
                tuple(_as_int(x, f"{source}: original_ids") for x in original),
                _structure_from_json(data.get("structure"), f"{source}: structure"),
                CostModel.from_dict(data.get("cost", {}), f"{source}: cost"),
            )
        except TacosError as err:  # the checks of the whole name the topology, not the file
            if str(err).startswith(source):
                raise
            raise TacosError(f"{source}: {err}") from None


_JSON_FIELDS = (
    "format", "version", "name", "npus", "switches", "original_ids", "structure", "cost",
    "links",
)  # fmt: skip


def _structure_from_json(value: Any, where: str) -> Structure | None:
    """The optional ``structure`` field (files written before it existed have none)."""
    if value is None:
        return None
    if not (isinstance(value, dict) and isinstance(value.get("kind"), str)):
        raise TacosError(f'{where}: expected {{"kind": "torus", "dims": [4, 4]}}')
    unknown = sorted(str(key) for key in value if key not in ("kind", "dims"))
    if unknown:
        raise TacosError(f"{where}: unknown field {unknown[0][:40]!r}; use kind and dims")
    dims = value.get("dims", [])
    if not isinstance(dims, list):
        raise TacosError(f"{where}: dims must be a list of dimension sizes")
    sizes = tuple(_as_int(size, f"{where}: dims") for size in dims)
    if any(size < 1 for size in sizes):
        raise TacosError(f"{where}: dims must be sizes of at least 1, got {list(sizes)}")
    return Structure(value["kind"], sizes)


# ------------------------------------------------------------------ loading
_SPEC = re.compile(r"^(?P<kind>[a-z0-9-]+):(?P<args>[0-9x]+)(?:,(?P<options>.*))?$")
_GRID_KINDS = {
    "mesh2d": (2, False),
    "torus2d": (2, True),
    "mesh3d": (3, False),
    "torus3d": (3, True),
    "mesh": (None, False),
    "torus": (None, True),
}
SPEEDS_IN_OPTIONS = ("dgx", "xgmi")
"""Spec kinds whose every tier's speed is an option of the spec itself (``dgx:2x8,nic=25``),
not ``bandwidth_GBps``/``latency_us``; they are also the kinds that take options."""

SPEC_KINDS = (
    "ring:N", "fully-connected:N", "switch:N", "mesh2d:AxB", "torus2d:AxB",
    "mesh3d:AxBxC", "torus3d:AxBxC", "mesh:AxBx..", "torus:AxBx..", "hypercube:D",
    *clusters.CLUSTER_KINDS,
)  # fmt: skip


def is_spec(text: str) -> bool:
    """Whether ``text`` has the shape of a spec (``kind:sizes[,options]``), valid or not."""
    return _SPEC.match(text.strip().lower()) is not None


def from_spec(
    spec: str,
    *,
    bandwidth_GBps: float = DEFAULT_BANDWIDTH_GBPS,
    latency_us: float = DEFAULT_LATENCY_US,
) -> Topology:
    """Generate a topology from a spec string such as ``torus2d:4x4`` or ``dgx:4x8,nic=25``.

    Cluster specs (``fat-tree``, ``dgx``, ``xgmi``) are laid out by :mod:`tacos.clusters`;
    ``dgx`` and ``xgmi`` set every tier's bandwidth and latency in their options.

    >>> from_spec("mesh2d:2x3").num_npus
    6
    >>> from_spec("dgx:2x8").describe()
    'dgx:2x8 (16 NPUs, 30 switches, 160 directed links)'
    """
    _check_positive(bandwidth_GBps, "bandwidth", "--bandwidth")
    _check_nonnegative(latency_us, "latency", "--latency")
    match = _SPEC.match(spec.strip().lower())
    if not match:
        raise TacosError(
            f"unknown topology {spec!r}: use a file (.csv, .json, ASTRA-sim .yml, ns-3 .txt, "
            f"htsim .topo) or one of {', '.join(SPEC_KINDS)}"
        )
    kind, args = match["kind"], match["args"]
    if "" in args.split("x"):
        raise TacosError(f"{spec!r}: sizes are numbers joined by single x, e.g. {kind}:4x4")
    numbers = [int(x) for x in args.split("x")]
    options = clusters.parse_options(spec, match["options"] or "")
    if options and kind not in SPEEDS_IN_OPTIONS:
        raise TacosError(f"{spec!r}: {kind} takes no options; drop what follows the comma")
    kw: dict[str, Any] = {"bandwidth_GBps": bandwidth_GBps, "latency_us": latency_us}
    if kind == "fat-tree":
        _require(len(numbers) == 1, f"{spec!r}: fat-tree takes one number, e.g. fat-tree:4")
        return _from_layout(clusters.fat_tree(numbers[0], **kw), f"fat-tree:{numbers[0]}", kind)
    if kind in SPEEDS_IN_OPTIONS:
        _require(len(numbers) == 2, f"{spec!r}: {kind} takes NODESxGPUS, e.g. {kind}:2x8")
        build = clusters.dgx if kind == "dgx" else clusters.xgmi
        return _from_layout(build(numbers[0], numbers[1], options), spec.strip().lower(), kind)
    _check_spec_size(kind, numbers, spec)
    if kind in ("ring", "fully-connected", "hypercube", "switch"):
        _require(len(numbers) == 1, f"{spec!r}: {kind} takes one number, e.g. {kind}:8")
        if kind == "ring":
            return Topology.ring(numbers[0], **kw)
        if kind == "hypercube":
            return Topology.hypercube(numbers[0], **kw)
        if kind == "switch":
            return Topology.switch(numbers[0], **kw)
        return Topology.fully_connected(numbers[0], **kw)
    if kind in _GRID_KINDS:
        ndims, wrap = _GRID_KINDS[kind]
        if ndims is not None and len(numbers) != ndims:
            example = "x".join(["4"] * ndims)
            raise TacosError(f"{spec!r}: {kind} needs {ndims} sizes, e.g. {kind}:{example}")
        return Topology.grid(numbers, wrap=wrap, **kw)
    raise TacosError(
        f"unknown topology kind {kind!r} in {spec!r}: use one of {', '.join(SPEC_KINDS)}"
    )


def _check_spec_size(kind: str, numbers: Sequence[int], spec: str) -> None:
    """Refuse a generated network too big to hold, from its sizes alone (nothing built yet)."""
    if kind in ("fat-tree", "dgx", "xgmi", "hypercube"):
        return  # checked by their own builders
    npus = math.prod(numbers)
    check_count(npus, MAX_NODES, "NPUs", spec.strip())
    per_npu = npus - 1 if kind == "fully-connected" else 2 * max(len(numbers), 1)
    check_count(npus * per_npu, MAX_LINKS, "directed links", spec.strip())


def _from_layout(layout: clusters.Layout, name: str, kind: str) -> Topology:
    links = tuple(Link(*row) for row in layout.links)
    return Topology(layout.num_npus, links, layout.num_switches, name, structure=Structure(kind))


def load_topology(
    spec_or_path: str,
    *,
    bandwidth_GBps: float = DEFAULT_BANDWIDTH_GBPS,
    latency_us: float = DEFAULT_LATENCY_US,
) -> Topology:
    """A spec string or a tacos topology file (.csv or .json), checked for connectivity.

    Other tools' files (ASTRA-sim, ns-3, htsim) are formats: :func:`tacos.load_topology`
    (the format registry's) reads those too.
    """
    if Path(spec_or_path).suffix.lower() in TOPOLOGY_FILE_SUFFIXES:
        topology = read_topology_file(spec_or_path)
    else:
        topology = from_spec(spec_or_path, bandwidth_GBps=bandwidth_GBps, latency_us=latency_us)
    topology.check_connected()
    return topology


def read_topology_file(path: str | Path) -> Topology:
    """A tacos topology file (.csv or .json) as it is, connected or not."""
    path = Path(path)
    if not path.is_file():
        raise TacosError(f"{path}: no such topology file")
    text = _read_text(path)
    return (
        read_csv(text, str(path)) if path.suffix.lower() == ".csv" else read_json(text, str(path))
    )


def read_csv(text: str, source: str = "<csv>") -> Topology:
    """CSV edge list: header ``src,dst,bandwidth_GBps,latency_us``, one directed link per row.

    NPUs are ``0..max id``; every id in that range must appear in some link.
    """
    rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"))))  # Excel writes a BOM
    rows = [r for r in rows if r and not r[0].lstrip().startswith("#")]
    if not rows or tuple(c.strip() for c in rows[0]) != CSV_HEADER:
        raise TacosError(f"{source}: line 1: the header must be {','.join(CSV_HEADER)}")
    links = []
    for line_no, row in enumerate(rows[1:], start=2):
        if len(row) != 4:
            raise TacosError(f"{source}: line {line_no}: expected 4 fields, got {len(row)}")
        links.append(_parse_link([c.strip() for c in row], f"{source}: line {line_no}"))
    if not links:
        raise TacosError(f"{source}: no links after the header")
    num_nodes = 1 + max(max(lk.src, lk.dst) for lk in links)
    used = {lk.src for lk in links} | {lk.dst for lk in links}
    if len(used) < num_nodes:  # every id below the largest needs a link: say which one lacks it
        missing = min(set(range(len(used) + 1)) - used)
        raise TacosError(f"{source}: NPU ids must be 0..{num_nodes - 1}; {missing} has no link")
    return Topology(num_nodes, tuple(links), 0, Path(source).stem)


def read_json(text: str, source: str = "<json>") -> Topology:
    return Topology.from_dict(parse_json(text, source), source)


def write_csv(topology: Topology) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for lk in topology.links:
        writer.writerow([lk.src, lk.dst, repr(lk.bandwidth_GBps), repr(lk.latency_us)])
    return out.getvalue()


# ------------------------------------------------------------------ helpers
def _read_text(path: Path) -> str:
    require_file(path, "topology")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read: {err}") from None


def _parse_link(fields: Sequence[Any], where: str) -> Link:
    src = _as_int(fields[0], f"{where}: src")
    dst = _as_int(fields[1], f"{where}: dst")
    bandwidth = _as_float(fields[2], f"{where}: bandwidth_GBps")
    latency = _as_float(fields[3], f"{where}: latency_us")
    _check_positive(bandwidth, f"{where}: bandwidth_GBps", "a positive number")
    _check_nonnegative(latency, f"{where}: latency_us", "a number >= 0")
    return Link(src, dst, bandwidth, latency)


def _called(name: str) -> str:
    """How an error names a topology: by its name, if it has one."""
    return f"topology {name!r}" if name else "the topology"


def _check_link(link: Link, index: int, num_nodes: int, name: str) -> None:
    where = f"{_called(name)} link {index} ({link.src}->{link.dst})"
    for end in (link.src, link.dst):
        if not (isinstance(end, int) and 0 <= end < num_nodes):
            raise TacosError(f"{where}: node {end} is not in 0..{num_nodes - 1}")
    if link.src == link.dst:
        raise TacosError(f"{where}: a link must join two different nodes")
    _check_positive(link.bandwidth_GBps, f"{where}: bandwidth", "a positive number")
    _check_nonnegative(link.latency_us, f"{where}: latency", "a number >= 0")


def _check_positive(value: float, what: str, fix: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise TacosError(f"{what} must be positive and finite, got {value}; use {fix}")


def _check_nonnegative(value: float, what: str, fix: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise TacosError(f"{what} must be >= 0 and finite, got {value}; use {fix}")


def _as_int(value: Any, where: str) -> int:
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise TacosError(f"{where}: {describe(value)} is not a whole number") from None


def _as_float(value: Any, where: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise TacosError(f"{where}: {describe(value)} is not a number") from None


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TacosError(message)


def _incidence(num_nodes: int, ends: Iterable[int]) -> tuple[tuple[int, ...], ...]:
    table: list[list[int]] = [[] for _ in range(num_nodes)]
    for link_id, node in enumerate(ends):
        table[node].append(link_id)
    return tuple(tuple(ids) for ids in table)


def _reachable(
    root: int, incidence: Sequence[Sequence[int]], links: Sequence[Link], *, forward: bool
) -> list[bool]:
    seen = [False] * len(incidence)
    seen[root] = True
    queue = deque([root])
    while queue:
        node = queue.popleft()
        for link_id in incidence[node]:
            nxt = links[link_id].dst if forward else links[link_id].src
            if not seen[nxt]:
                seen[nxt] = True
                queue.append(nxt)
    return seen
