"""htsim fat-tree files (``.topo``, ASTRA-sim's htsim backend) as Topologies.

htsim (Broadcom/csg-htsim, ``FatTreeTopology::load`` and ``set_custom_params``,
the version ASTRA-sim pins) reads a header and one block per tier::

    Nodes 8          hosts (our NPUs)
    Tiers 3          2 (leaf-spine) or 3 (ToR, Agg, Core)
    Podsize 4        hosts per pod
    Tier 0           the ToR switches; Tier 1 Agg, Tier 2 Core
    Downlink_speed_Gbps 200   links going down from this tier (both directions)
    Downlink_Latency_ns 1000  their propagation delay
    Radix_Down 2     downward ports; Radix_Up upward ports (not on the top tier)
    Bundle 2         parallel links to each switch below (Tier 0: must be 1)
    Oversubscribed 1, Switch_Latency_ns 0, Queue_Up/Queue_Down (bytes, ignored here)

Keys are case-insensitive; ``#`` starts a comment. From these, as htsim does:
ToRs per pod = Podsize / Radix_Down[0]; ToR uplinks = Nodes * speed[0] /
(speed[1] * Oversubscribed[0]); Aggs per pod = ToR uplinks / (pods *
Radix_Down[1]); Core switches = Agg uplinks / Radix_Down[2]. Host ``h`` hangs off
ToR ``h // Radix_Down[0]``; a ToR links to every Agg of its pod (with two tiers,
to every Agg) ``Bundle[1]`` times; Agg ``a`` links to Cores ``a % aggs_per_pod +
aggs_per_pod * l`` ``Bundle[2]`` times each.

Node numbering: hosts ``0..Nodes-1``, then ToRs, Aggs and Cores in htsim's
order. A switch's latency is added to the links leaving it, which charges it
once per switch a message crosses, as htsim's switch pipe does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tacos.errors import TacosError
from tacos.importers.base import TopologyImport, bits_per_second_to_GBps
from tacos.limits import MAX_NODES, check_count
from tacos.topology import Link, Topology

FORMAT_NAME = "htsim fat tree"
HEADER_KEYS = ("nodes", "tiers", "podsize")
TIER_KEYS = ("downlink_speed_gbps", "downlink_latency_ns", "radix_down", "radix_up", "bundle",
             "oversubscribed", "switch_latency_ns", "queue_up", "queue_down")  # fmt: skip
TIER_NAMES = ("ToR", "Agg", "Core")
LINK_NAMES = ("host-ToR", "ToR-Agg", "Agg-Core")


@dataclass
class _Tier:
    values: dict[str, int] = field(default_factory=dict)
    line: int = 0

    def get(self, key: str, default: int = 0) -> int:
        return self.values.get(key, default)


def read_topology(text: str, source: str) -> TopologyImport:
    """The fat tree an htsim topology file describes; errors name the file and line."""
    header, tiers = _parse(text, source)
    return _build(header, tiers, source)


def _parse(text: str, source: str) -> tuple[dict[str, int], list[_Tier]]:
    header: dict[str, int] = {}
    tiers: dict[int, _Tier] = {}
    current: _Tier | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        key = words[0].lower()
        where = f"{source}: line {number}"
        if len(words) != 2:
            raise TacosError(f"{where}: expected 'Key value', got {line.strip()!r}")
        known = TIER_KEYS if current else HEADER_KEYS
        if key != "tier" and key not in known:
            place = "in a Tier block" if current else "before Tier 0"
            raise TacosError(
                f"{where}: unknown key {words[0]!r} {place}; htsim knows {', '.join(known)}"
            )
        value = _whole(words[1], f"{where}: {words[0]}")
        if key == "tier":
            if value in tiers:
                raise TacosError(f"{where}: Tier {value} is given twice")
            if value > 2:
                raise TacosError(f"{where}: Tier {value}: htsim has tiers 0, 1 and 2")
            current = tiers[value] = _Tier(line=number)
        elif current is None:
            header[key] = value
        elif key in current.values:
            raise TacosError(f"{where}: {words[0]} is set twice for this tier")
        else:
            current.values[key] = value
    for key in HEADER_KEYS:
        if not header.get(key):
            raise TacosError(
                f"{source}: missing {key.capitalize()} (a positive number) in the header"
            )
    count = header["tiers"]
    if count not in (2, 3):
        raise TacosError(f"{source}: Tiers {count}: htsim builds 2 or 3 tiers")
    for tier in range(3):
        if tier >= count and tier in tiers:
            raise TacosError(
                f"{source}: line {tiers[tier].line}: Tier {tier}, but Tiers is {count}"
            )
        if tier < count and tier not in tiers:
            raise TacosError(f"{source}: no 'Tier {tier}' block; Tiers is {count}")
    blocks = [tiers[tier] for tier in range(count)]
    for tier, block in enumerate(blocks):
        required = ["downlink_speed_gbps", "downlink_latency_ns", "radix_down"]
        required += ["radix_up"] if tier < count - 1 else []
        for key in required:
            if not block.get(key):
                raise TacosError(f"{source}: line {block.line}: Tier {tier} needs a positive {key}")
        if tier == count - 1 and "radix_up" in block.values:
            raise TacosError(f"{source}: line {block.line}: the top tier has no uplinks (radix_up)")
    return header, blocks


def _build(header: dict[str, int], tiers: list[_Tier], source: str) -> TopologyImport:
    """Switch counts and wiring exactly as htsim's ``set_custom_params``/``init_network``."""
    hosts, podsize = header["nodes"], header["podsize"]
    speed = [t.get("downlink_speed_gbps") for t in tiers]
    bundle = [t.get("bundle", 1) for t in tiers]
    down = [t.get("radix_down") for t in tiers]
    up = [t.get("radix_up") for t in tiers]
    oversub = [t.get("oversubscribed", 1) for t in tiers]

    def require(condition: bool, problem: str) -> None:
        if not condition:
            raise TacosError(f"{source}: {problem} (htsim rejects this fat tree)")

    check_count(hosts, MAX_NODES, "hosts (Nodes)", source)
    for tier in range(len(tiers)):
        require(bundle[tier] >= 1, f"Tier {tier} Bundle must be at least 1")
        require(oversub[tier] >= 1, f"Tier {tier} Oversubscribed must be at least 1")
    require(hosts % podsize == 0, f"Nodes {hosts} is not a multiple of Podsize {podsize}")
    require(bundle[0] == 1, "Tier 0 Bundle must be 1")
    for tier in range(len(tiers)):
        require(
            down[tier] % bundle[tier] == 0,
            f"Tier {tier} Radix_Down is not a multiple of its Bundle",
        )
        if tier + 1 < len(tiers):
            problem = f"Tier {tier} Radix_Up is not a multiple of Tier {tier + 1} Bundle"
            require(up[tier] % bundle[tier + 1] == 0, problem)
    pods = hosts // podsize
    require(podsize % down[0] == 0, f"Podsize {podsize} is not a multiple of Tier 0 Radix_Down")
    tors_per_pod = podsize // down[0]
    require(
        down[0] // up[0] == oversub[0], "Tier 0 Radix_Down / Radix_Up differs from Oversubscribed"
    )
    tor_uplinks, rest = divmod(hosts * speed[0], speed[1] * oversub[0])
    require(rest == 0, "the ToR uplink count is not a whole number")
    require(tor_uplinks % (pods * down[1]) == 0, "ToR uplinks do not fill whole Agg switches")
    aggs_per_pod = tor_uplinks // (pods * down[1])
    require(aggs_per_pod * bundle[1] == up[0], "Tier 0 Radix_Up does not match the Agg switches")
    cores = 0
    if len(tiers) == 3:
        agg_uplinks, rest = divmod(tor_uplinks * speed[1], speed[2] * oversub[1])
        require(
            rest == 0 and agg_uplinks % down[2] == 0, "Agg uplinks do not fill whole Core switches"
        )
        cores = agg_uplinks // down[2]
        require(cores % aggs_per_pod == 0, "Core switches are not a multiple of Aggs per pod")
        require(
            cores * bundle[2] // aggs_per_pod == up[1], "Tier 1 Radix_Up does not match the Cores"
        )

    tors, aggs = tors_per_pod * pods, aggs_per_pod * pods
    first_tor, first_agg = hosts, hosts + tors
    first_core = first_agg + aggs
    switch_us = [t.get("switch_latency_ns") / 1000.0 for t in tiers]

    def cables(lower: int, upper: int, tier: int, copies: int) -> list[Link]:
        """``copies`` cables between a switch of ``tier`` and a node of the tier below."""
        bandwidth = bits_per_second_to_GBps(speed[tier] * 1e9)
        latency_us = tiers[tier].get("downlink_latency_ns") / 1000.0
        leaving_lower_us = switch_us[tier - 1] if tier else 0.0  # hosts are not switches
        up_link = Link(lower, upper, bandwidth, latency_us + leaving_lower_us)
        down_link = Link(upper, lower, bandwidth, latency_us + switch_us[tier])
        return [up_link, down_link] * copies

    links: list[Link] = []
    for host in range(hosts):
        links += cables(host, first_tor + host // down[0], 0, 1)
    for tor in range(tors):
        pod = tor // tors_per_pod if len(tiers) == 3 else 0  # leaf-spine: every ToR, every Agg
        for agg in range(pod * aggs_per_pod, (pod + 1) * aggs_per_pod if len(tiers) == 3 else aggs):
            links += cables(first_tor + tor, first_agg + agg, 1, bundle[1])
    if len(tiers) == 3:
        for agg in range(aggs):
            for k in range(up[1] // bundle[2]):
                core = agg % aggs_per_pod + aggs_per_pod * k
                links += cables(first_agg + agg, first_core + core, 2, bundle[2])
    counts = [tors, aggs, cores][: len(tiers)]
    switches = ", ".join(f"{n} {name}" for n, name in zip(counts, TIER_NAMES, strict=False))
    notes = [f"{pods} pod(s) of {podsize} hosts; {switches} switches, numbered after the hosts"]
    notes += [f"{LINK_NAMES[tier]} links bundled {b}x" for tier, b in enumerate(bundle) if b > 1]
    topology = Topology(hosts, tuple(links), sum(counts), Path(source).stem)
    return TopologyImport(topology, FORMAT_NAME, notes=tuple(notes))


def _whole(word: str, where: str) -> int:
    if not (word.isascii() and word.isdigit()):  # isdigit alone accepts "²", which int refuses
        raise TacosError(f"{where}: {word!r} is not a whole number >= 0")
    return int(word)
