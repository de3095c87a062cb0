"""ASTRA-sim configuration of a bundle: network, system, remote memory, run script, manifest.

Facts measured on ASTRA-sim's analytical backend (the prebuilt c459ab6 build)
that shape these files:

* A network is a list of dimensions, each a Ring, FullyConnected or Switch of
  ``npus_count`` NPUs with one bandwidth (GB/s, 2**30 bytes) and latency (ns),
  dimension 0 numbering NPUs fastest. :func:`analytical_dims` recognises
  topologies that are exactly such dimensions with uniform links per
  dimension (one dimension; tori, meshes of sides 2, hypercubes and imported
  multi-dimensional networks by their structure) and returns None otherwise
  (the user then supplies a network file through ``ASTRA_SIM_NETWORK``). The
  Congestion_Aware binary runs one dimension only, so ``run.sh`` runs
  Congestion_Unaware on networks of several (measured: it replays our tori
  to a few ns, since the traces already keep each link's messages in order).
* Custom collectives come from ``all-reduce-implementation-custom``,
  ``all-gather-implementation-custom`` and ``all-to-all-implementation-custom``
  (a one-element list holding a path
  prefix, resolved against the working directory); a workload COMM_COLL_NODE of
  the matching type triggers them. ASTRA-sim runs whatever trace the all-reduce
  key names, so other collectives ride on it (the "custom" route for them).
* ``reduce-scatter-implementation-custom`` exists on ASTRA-sim master (2026)
  only: c459ab6 ignores it and silently runs a native reduce-scatter when one is
  listed, and hangs (no NPU finishes) when none is. So a Reduce-Scatter
  bundle lists no native reduce-scatter, and ``run.sh`` reruns a custom run in
  which no NPU finished on the all-reduce key (route ``carrier``), which
  both builds run as synthesized.
* The standalone ("p2p") route runs the traces directly as the workload with no
  key, but ASTRA-sim then keeps at most one send in flight per NPU, so a
  schedule whose NPUs send on several links at once takes longer there; the
  manifest predicts both routes (``tacos.simulate`` with ``sends_in_flight=1``).
* ``preferred-dataset-splits`` must be present and 1 (K splits replay the
  traces K times). The binary writes ``./log/``, so ``run.sh`` runs it in a
  temporary directory. A run where some rank prints no ``finished`` line has
  deadlocked although the exit code is 0: ``run.sh`` checks for that.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Final

from tacos.collective import CollectiveKind
from tacos.formats.astrasim import AnalyticalNetwork, dimension_pairs, network_yaml
from tacos.formats.chakra import CollectiveCommType, as_traced
from tacos.linkmodel import CostModel
from tacos.schedule import Schedule
from tacos.synthesizer.list_scheduling import replayed
from tacos.topology import Link, Topology
from tacos.transfers import TransferTable

ET_PREFIX = "tacos"
WORKLOAD_PREFIX = "collective"
CARRIER_PREFIX = "carrier"
BUNDLE_FORMAT = "tacos-astra-sim-bundle"
NATIVE_KEYS = {
    CollectiveKind.ALL_REDUCE: ("all-reduce-implementation-custom", CollectiveCommType.ALL_REDUCE),
    CollectiveKind.ALL_GATHER: ("all-gather-implementation-custom", CollectiveCommType.ALL_GATHER),
    CollectiveKind.ALL_TO_ALL: ("all-to-all-implementation-custom", CollectiveCommType.ALL_TO_ALL),
    CollectiveKind.REDUCE_SCATTER: (
        "reduce-scatter-implementation-custom",
        CollectiveCommType.REDUCE_SCATTER,
    ),
}
"""Collectives ASTRA-sim has a custom-implementation key for, with the COMM_COLL type."""
CARRIER_KEY = NATIVE_KEYS[CollectiveKind.ALL_REDUCE]
"""Other collectives ride on the all-reduce key (ASTRA-sim runs any trace it names)."""
NEWER_KEYS = {CollectiveKind.REDUCE_SCATTER: "reduce-scatter-implementation"}
"""Custom keys older ASTRA-sim builds ignore, with the native key that would then run."""


def analytical_dims(topology: Topology) -> tuple[AnalyticalNetwork, ...] | None:
    """The ASTRA-sim network dimensions equal to ``topology``, if there are any."""
    one = analytical_network(topology)
    if one is not None:
        return (one,)
    sizes = [size for size in (topology.structure.dims if topology.structure else ()) if size > 1]
    if len(sizes) < 2 or math.prod(sizes) != topology.num_npus:
        return None
    by_pair = {(link.src, link.dst): link for link in topology.links}
    if len(by_pair) != len(topology.links):
        return None
    choices = [_kinds_that_differ(size, topology.num_switches > 0) for size in sizes]
    for kinds in itertools.product(*choices):
        per_dim = dimension_pairs(kinds, sizes)
        if sum(map(len, per_dim)) != len(topology.links):
            continue
        speeds = [_one_speed([by_pair.get(pair) for pair in pairs]) for pairs in per_dim]
        if all(speeds):
            return tuple(
                AnalyticalNetwork(kind, size, speed[0], speed[1] * 1000.0)
                for kind, size, speed in zip(kinds, sizes, speeds, strict=True)
                if speed is not None
            )
    return None


def _kinds_that_differ(size: int, switches: bool) -> list[str]:
    """Dimension kinds that join ``size`` NPUs differently (a Ring of 3 is fully connected)."""
    return ["Ring"] + ["FullyConnected"] * (size > 3) + ["Switch"] * switches


def _one_speed(links: list[Link | None]) -> tuple[float, float] | None:
    """The (bandwidth, latency) all ``links`` share; None if one is missing or they differ."""
    speeds = {None if link is None else (link.bandwidth_GBps, link.latency_us) for link in links}
    return speeds.pop() if len(speeds) == 1 else None


def analytical_network(topology: Topology) -> AnalyticalNetwork | None:
    """The one-dimensional ASTRA-sim network equal to ``topology``, if there is one."""
    speeds = {(link.bandwidth_GBps, link.latency_us) for link in topology.links}
    if len(speeds) != 1:
        return None
    bandwidth, latency_us = speeds.pop()
    n = topology.num_npus
    pairs = {(link.src, link.dst) for link in topology.links}
    if len(pairs) != len(topology.links):
        return None
    kind = None
    if topology.num_switches == 0:
        # Counted before compared: the set of every pair of 5,000 NPUs is gigabytes.
        if len(pairs) == n * (n - 1) and all(u != v for u, v in pairs):
            kind = "FullyConnected" if n > 2 else "Ring"
        elif n > 2 and pairs == {(i, (i + d) % n) for i in range(n) for d in (1, n - 1)}:
            kind = "Ring"
    elif topology.num_switches == 1:
        hub = n
        if pairs == {(i, hub) for i in range(n)} | {(hub, i) for i in range(n)}:
            kind = "Switch"
    if kind is None:
        return None
    return AnalyticalNetwork(kind, n, bandwidth, latency_us * 1000.0)


def system_config(custom_key: str | None = None, without: str | None = None) -> dict[str, Any]:
    """system.json: FIFO scheduling, one dataset split, optionally the custom collective
    (and ``without`` a native key that an older ASTRA-sim would run instead of it)."""
    config: dict[str, Any] = {
        "scheduling-policy": "FIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1,
        "all-reduce-implementation": ["ring"],
        "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"],
        "all-to-all-implementation": ["direct"],
        "collective-optimization": "baseline",
        "local-mem-bw": 50,
        "boost-mode": 0,
    }
    if custom_key:
        config[custom_key] = [f"et/{ET_PREFIX}"]
    config.pop(without or "", None)
    return config


REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


@dataclass
class BundlePlan:
    """Everything in a bundle besides the traces, derived from the schedule."""

    schedule: Schedule
    custom_key: str
    comm_type: int
    default_route: str
    network: tuple[AnalyticalNetwork, ...] | None
    predicted_ns: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def carrier(self) -> bool:
        """Whether the custom key is one older ASTRA-sim builds ignore (route ``carrier``)."""
        return self.schedule.collective.kind in NEWER_KEYS

    def manifest(self) -> dict[str, Any]:
        spec = self.schedule.collective
        return {
            "format": BUNDLE_FORMAT,
            "version": 1,
            "collective": spec.kind.value,
            "npus": self.schedule.topology.num_npus,
            "ranks": list(spec.ranks),
            "chunks": spec.num_chunks,
            "chunk_bytes": spec.chunk_bytes,
            "transfers": len(self.schedule.transfers),
            "default_route": self.default_route,
            "custom_key": self.custom_key,
            "network": _network_kinds(self.network),
            "predicted_time_ns": self.predicted_ns,
            "schedule_time_us": self.schedule.collective_time_us,
            "original_npu_ids": [
                self.schedule.topology.label(n) for n in self.schedule.topology.npus
            ],
            "tenants": self.schedule.meta.get("tenants"),
        }

    def text_files(self) -> dict[str, str]:
        newer = NEWER_KEYS.get(self.schedule.collective.kind)
        files = {
            "system.json": _json_text(system_config(self.custom_key, without=newer)),
            "system_p2p.json": _json_text(system_config()),
            "memory.json": _json_text(REMOTE_MEMORY),
            "manifest.json": _json_text(self.manifest()),
            "run.sh": run_script(self.schedule.topology.num_npus, self.default_route),
            "README.md": self.readme(),
        }
        if self.carrier:
            files["system_carrier.json"] = _json_text(system_config(CARRIER_KEY[0]))
        if self.network:
            files["network.yml"] = network_yaml(self.network)
        return files

    def readme(self) -> str:
        spec = self.schedule.collective
        routes = "\n".join(
            f"- `./run.sh {route}`: predicted {ns / 1000:.6g} us"
            for route, ns in self.predicted_ns.items()
        )
        network = (
            "`network.yml` is a "
            + " x ".join(f"{dim.kind} of {dim.npus} NPUs" for dim in self.network)
            + "."
            if self.network
            else "This topology has no ASTRA-sim analytical equivalent: set ASTRA_SIM_NETWORK."
        )
        carrier = (
            f"\n`{self.custom_key}` needs ASTRA-sim master (2026); where no NPU finishes "
            "(older builds ignore the key), `./run.sh custom` reruns the traces on "
            f"`{CARRIER_KEY[0]}` (`./run.sh carrier`), which every build runs.\n"
            if self.carrier
            else ""
        )
        return (
            f"# TACOS {spec.kind} for ASTRA-sim\n\n"
            f"{spec.num_ranks} ranks, {spec.num_chunks} chunks of {spec.chunk_bytes} bytes, "
            f"{len(self.schedule.transfers)} transfers; schedule time "
            f"{self.schedule.collective_time_us:.6g} us.\n\n"
            f"Run `./run.sh` (route `{self.default_route}`), or choose a route:\n\n{routes}\n\n"
            "`custom` plugs `et/tacos.<rank>.et` into ASTRA-sim through "
            f"`{self.custom_key}` and a one-node workload; `p2p` runs the same traces as the "
            "workload itself, where ASTRA-sim keeps one send in flight per NPU.\n"
            f"{network} Set ASTRA_SIM_BIN to pick the binary "
            "(default AstraSim_Analytical_Congestion_Aware on PATH; on a network of several "
            "dimensions its Congestion_Unaware sibling).\n"
            f"Times follow the {self.schedule.topology.cost.describe()} cost model.\n" + carrier
        )


def _replayed_ns(schedule: Schedule, cost: CostModel, sends_in_flight: int | None) -> float:
    """The collective's time in ns as :func:`tacos.simulate.simulate` replays it under
    ``cost`` with ``sends_in_flight`` ports, compiled on big schedules in the default cost
    model (:func:`~tacos.synthesizer.list_scheduling.replayed`; a 512-GPU one-port bundle
    spent 90 of its 150 s in the two replays in Python)."""
    table = TransferTable.from_transfers(schedule.transfers)
    topology = schedule.topology.with_cost(cost)
    _, end = replayed(table, topology, schedule.collective.chunk_bytes, sends_in_flight)
    return float(end.max(initial=0.0)) * 1000.0


def plan_bundle(schedule: Schedule) -> BundlePlan:
    """Choose keys and routes, recognise the network and predict each route's time."""
    kind = schedule.collective.kind
    custom_key, comm_type = NATIVE_KEYS.get(kind, CARRIER_KEY)
    default_route = "custom" if kind in NATIVE_KEYS else "p2p"
    cost, nbytes = schedule.topology.cost, schedule.collective.chunk_bytes
    traced = as_traced(cost, nbytes)
    predicted = {
        "custom": _replayed_ns(schedule, traced, schedule.sends_in_flight),
        "p2p": _replayed_ns(schedule, traced, 1),
    }
    network = analytical_dims(schedule.topology)
    plan = BundlePlan(schedule, custom_key, int(comm_type), default_route, network, predicted)
    if traced != cost:
        plan.notes.append(
            f"a reduction of {nbytes} bytes takes {cost.reduce_us(nbytes):.6g} us; Chakra "
            f"COMP nodes last whole microseconds, so ASTRA-sim runs it in "
            f"{traced.reduce_us(nbytes):.6g} us (the predictions use that)"
        )
    if kind not in NATIVE_KEYS:
        plan.notes.append(
            f"ASTRA-sim has no custom key for {kind}; run.sh defaults to the p2p route, and "
            f"'./run.sh custom' carries the traces on {custom_key}"
        )
    if network is not None and len(network) > 1:
        plan.notes.append(
            f"network.yml has {len(network)} dimensions: run.sh runs "
            "AstraSim_Analytical_Congestion_Unaware (Congestion_Aware runs one)"
        )
    if network is None:
        plan.notes.append(
            "no ASTRA-sim analytical network matches this topology; "
            "set ASTRA_SIM_NETWORK=/path/to/network.yml before run.sh"
        )
    return plan


def _network_kinds(dims: tuple[AnalyticalNetwork, ...] | None) -> str | list[str] | None:
    """The manifest's ``network``: a kind for one dimension, a list of kinds for several."""
    if dims is None:
        return None
    return dims[0].kind if len(dims) == 1 else [dim.kind for dim in dims]


def _json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


RUN_SCRIPT = """#!/usr/bin/env bash
# Replay this TACOS schedule on ASTRA-sim's analytical backend.
#   ./run.sh            route "{default_route}"
#   ./run.sh custom     et/tacos.<rank>.et as ASTRA-sim's custom collective (system.json)
#   ./run.sh carrier    the same on the all-reduce key (system_carrier.json), if the bundle has it
#   ./run.sh p2p        et/tacos.<rank>.et run directly as the workload (system_p2p.json)
# ASTRA_SIM_BIN      the binary (default: AstraSim_Analytical_Congestion_Aware on PATH; on a
#                    network of several dimensions its Congestion_Unaware sibling)
# ASTRA_SIM_NETWORK  a network file to use instead of network.yml
# Exits 1 if any of the {npus} NPUs does not finish (ASTRA-sim itself exits 0 on a deadlock).
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
route="${{1:-{default_route}}}"
case "$route" in
  custom|p2p) ;;
  carrier)
    if [ ! -f "$here/system_carrier.json" ]; then
      echo "run.sh: this bundle has no carrier route" >&2
      exit 2
    fi ;;
  *) echo "usage: $0 [custom|carrier|p2p]" >&2; exit 2 ;;
esac
{pick_network_and_binary}
# ASTRA-sim writes ./log/ and resolves the custom prefix (et/...) against its working directory.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ln -s "$here/et" "$work/et"
cd "$work"

replay() {{  # replay ROUTE: run ASTRA-sim, print its output, set $finished
  case "$1" in
    custom) workload="$here/workload/{workload_prefix}"; system="$here/system.json" ;;
    carrier) workload="$here/workload/{carrier_prefix}"; system="$here/system_carrier.json" ;;
    p2p) workload="$here/et/{et_prefix}"; system="$here/system_p2p.json" ;;
  esac
  set +e
  "$bin" --workload-configuration="$workload" --system-configuration="$system" \\
    --network-configuration="$network" --remote-memory-configuration="$here/memory.json" \\
    > "$work/stdout" 2>&1
  status=$?
  set -e
  cat "$work/stdout"
  if [ "$status" -ne 0 ]; then
    echo "run.sh: ASTRA-sim failed with exit code $status" >&2
    exit "$status"
  fi
  finished=$(grep -c "finished," "$work/stdout" || true)
}}

replay "$route"
if [ "$finished" -eq 0 ] && [ "$route" = custom ] && [ -f "$here/system_carrier.json" ]; then
  echo "run.sh: no NPU finished: this ASTRA-sim ignores the custom key of system.json" \\
    "(builds before 2026 do); rerunning the traces on the all-reduce key (route carrier)" >&2
  replay carrier
fi
if [ "$finished" -ne {npus} ]; then
  echo "run.sh: only $finished of {npus} NPUs finished: the simulation deadlocked" >&2
  exit 1
fi
"""


PICK_NETWORK_AND_BINARY: Final = """network="${ASTRA_SIM_NETWORK:-$here/network.yml}"
if [ ! -f "$network" ]; then
  echo "run.sh: $network does not exist; set ASTRA_SIM_NETWORK to an ASTRA-sim network file" >&2
  exit 2
fi
# Congestion_Aware runs one dimension only; count them in the npus_count list
# (flow style: [ 4, 8 ]; block style: one "- 4" line each).
dims=$(awk '
  /^[[:space:]]*npus_count[[:space:]]*:/ {
    listed = 1
    if (index($0, "[")) { print split($0, items, ","); exit }
    next
  }
  listed && /^[[:space:]]*-/ { count++; next }
  listed { exit }
  END { if (count) print count }' "$network")
dims=${dims:-1}
bin="${ASTRA_SIM_BIN:-DEFAULT_BINARY}"
if [ "$dims" -gt 1 ]; then
  case "$bin" in *Congestion_Aware) bin="${bin%Congestion_Aware}Congestion_Unaware" ;; esac
fi"""
"""run.sh's lines that check the network file and pick the binary: every bundle's script
shares them, so a network given in ASTRA_SIM_NETWORK gets the binary for its dimensions."""


def pick_network_and_binary(default_binary: str = "AstraSim_Analytical_Congestion_Aware") -> str:
    """:data:`PICK_NETWORK_AND_BINARY` with ``default_binary`` when ASTRA_SIM_BIN is unset."""
    return PICK_NETWORK_AND_BINARY.replace("DEFAULT_BINARY", default_binary)


def run_script(npus: int, default_route: str) -> str:
    """The bundle's run.sh: picks a route, runs ASTRA-sim from a scratch directory, checks it."""
    return RUN_SCRIPT.format(
        pick_network_and_binary=pick_network_and_binary(),
        npus=npus,
        default_route=default_route,
        workload_prefix=WORKLOAD_PREFIX,
        carrier_prefix=CARRIER_PREFIX,
        et_prefix=ET_PREFIX,
    )
