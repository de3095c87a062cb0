"""A whole training workload as a ready-to-run ASTRA-sim bundle, with synthesized collectives.

``tacos-export --format chakra --workload PREFIX --topology NET -o DIR`` reads the
workload's traces (:mod:`tacos.importers.workload`), synthesizes one algorithm per
distinct collective (kind, bytes, group, involved dimensions) and writes a bundle that
runs the workload on ASTRA-sim with those algorithms or with ASTRA-sim's own:

* **Where a collective runs.** A collective on every NPU is synthesized on NET; one on
  a communicator group on NET with the group's NPUs as its ranks and every other NPU
  forwarding only (:meth:`~tacos.topology.Topology.members_only`), since ASTRA-sim
  routes a group's messages through the whole network but runs the custom ET on the
  members alone. One node on several groups is one ET that all of them run at once,
  predicted and chosen for all of them together (:mod:`.workload_groups`). A
  collective whose ``involved_dim`` leaves out network dimensions is one collective
  per group of NPUs along the involved ones, synthesized together on a shared
  timeline (ASTRA-sim's custom path ignores ``involved_dim``, so the ET must).
* **Chunks.** Unless ``--chunks-per-npu`` fixes them, each collective is synthesized
  with 1, 2, 4 and 8 chunks per NPU (as long as chunks stay at least
  :data:`MIN_CHUNK_BYTES`) and the fastest is kept, fewest chunks on ties.
* **Once per schedule.** Schedules are cached by what decides them (kind, ranks,
  groups, chunk count and size), so identical collectives, and sizes that round to the
  same chunks, share one synthesis and one ET set.
* **Which algorithm.** ``--algorithm`` as for single collectives: ``best`` (default)
  keeps the faster of TACOS and every classic algorithm that applies, per collective.
* **How ASTRA-sim finds the ETs** (``--astra-sim-build``): master's
  ``per-node-custom-implementation`` maps every workload node to its ET; c459ab6 has
  only one key per collective type (and none for Reduce-Scatter, and no group-relative
  ranks), so it takes workloads whose collectives of each type share one algorithm.
  ``auto`` (default) uses the per-type keys when they suffice and the per-node map
  otherwise; the manifest and README say which builds the bundle runs on.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters.astra_config import REMOTE_MEMORY, analytical_network
from tacos.exporters.base import ExportResult
from tacos.exporters.workload_config import (
    AWARE_BINARY,
    NATIVE_ALGORITHMS,
    PER_NODE_FILE,
    PER_NODE_KEY,
    UNAWARE_BINARY,
    per_node_yaml,
    run_script,
    workload_system,
)
from tacos.exporters.workload_groups import (
    MAX_CANDIDATE_GROUPS,
    Router,
    sharing_groups,
    together_time_us,
)
from tacos.exporters.workload_measure import CUSTOM, measure, write_custom_et
from tacos.formats.arguments import ArgumentAdder
from tacos.formats.astrasim import AnalyticalNetwork, network_yaml
from tacos.formats.workload import (
    CUSTOM_KINDS,
    WHOLE_NETWORK,
    CollectiveCall,
    CommGroup,
    Workload,
    chunk_bytes,
    dimension_groups,
)
from tacos.importers.astrasim import build_topology
from tacos.output import (
    atomic_directory,
    check_directory_target,
    write_bytes_atomic,
    write_text_atomic,
)
from tacos.replicas import ROUNDED_DIGITS
from tacos.schedule import Schedule, merge_tenants
from tacos.synthesizer import synthesize_tenants
from tacos.topology import Topology

WORKLOAD_FORMAT: Final = "tacos-astra-sim-workload"
BUILDS: Final = ("auto", "master", "c459ab6")
CHUNK_CANDIDATES: Final = (1, 2, 4, 8)
MIN_CHUNK_BYTES: Final = 4096
"""Smaller chunks only add per-message latency; 1 chunk per NPU is always tried."""
WORKLOAD_NAME: Final = "workload"
"""The bundle's copy of the workload is ``workload/workload.<rank>.et``."""
COMM_GROUPS_FILE: Final = "comm_groups.json"
NO_NETWORK_NOTE: Final = (
    "no ASTRA-sim analytical network matches this topology; "
    "set ASTRA_SIM_NETWORK=/path/to/network.yml before run.sh"
)

SynthesisKey = tuple[CollectiveKind, tuple[int, ...], tuple[tuple[int, ...], ...], int, int]
"""What decides a schedule: kind, members (network NPU ids, in group-file order), the
groups synthesized together (positions among the members), chunks per NPU, chunk bytes."""


@dataclass(frozen=True)
class WorkloadOptions:
    """The workload bundle's options (see :func:`add_arguments`); seed, algorithm and
    chunks per NPU (None: chosen per collective) are the synthesis options."""

    comm_groups: Path | None = None
    native: str = "ring"
    astra_sim_build: str = "auto"
    chunks_per_npu: int | None = None
    seed: int = 0
    algorithm: str = "best"
    force: bool = False
    measure_with: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorkloadOptions:
        return cls(
            args.comm_groups,
            args.native,
            args.astra_sim_build,
            args.chunks_per_npu,
            args.seed,
            args.algorithm,
            args.force,
            args.measure_with,
        )


def _binary(text: str) -> Path:
    """``--measure-with``: a path with a ``/`` in it (``./astra_sim``) is taken from where the
    command runs, since the measurements run in a scratch folder; a bare name is looked up
    on PATH."""
    return Path(text).absolute() if "/" in text else Path(text)


def add_arguments(parser: ArgumentAdder) -> None:
    parser.add_argument(
        "--workload",
        metavar="PREFIX",
        help="a Chakra workload PREFIX.<rank>.et: synthesize its collectives and write an "
        "ASTRA-sim bundle that runs it with them and with ASTRA-sim's own (--topology NET)",
    )
    parser.add_argument(
        "--comm-groups",
        type=Path,
        metavar="FILE",
        help="the workload's communicator groups, {\"1\": [0, 1, ...]} (ASTRA-sim's "
        "--comm-group-configuration)",
    )
    parser.add_argument(
        "--native",
        choices=NATIVE_ALGORITHMS,
        default="ring",
        help="ASTRA-sim's own algorithm in system_native.json (default ring)",
    )
    parser.add_argument(
        "--astra-sim-build",
        choices=BUILDS,
        default="auto",
        help="master: per-node-custom-implementation; c459ab6: one custom ET per collective "
        "type (an error if that is not enough); auto (default): per type when that is enough",
    )
    parser.add_argument(
        "--measure-with",
        type=_binary,
        metavar="BINARY",
        help="run each collective on every NPU alone on this ASTRA-sim binary, with each "
        "native algorithm and with its synthesized ET, and leave it to the native algorithm "
        "where that is faster",
    )


def check_target(out: Path, options: WorkloadOptions) -> None:
    check_directory_target(out, force=options.force)


@dataclass(frozen=True)
class CustomEt:
    """One synthesized algorithm, written once as ``<prefix>.<position>.et``: synthesized
    for ``group``, run at once by every group of ``runners`` (:mod:`.workload_groups`),
    which together take ``predicted_time_us``."""

    prefix: str
    key: SynthesisKey
    schedule: Schedule
    group: CommGroup
    runners: tuple[CommGroup, ...]
    predicted_time_us: float


@dataclass(frozen=True)
class WorkloadPlan:
    """Every collective of the workload with its custom ET, and how ASTRA-sim finds them."""

    workload: Workload
    topology: Topology
    network: list[AnalyticalNetwork] | None
    options: WorkloadOptions
    ets: list[CustomEt]
    calls: list[tuple[CollectiveCall, CustomEt | None]]
    per_node: bool
    builds: tuple[str, ...]
    natives: dict[CollectiveKind, str]
    """The native algorithm system.json gives each kind (for calls left native, None ETs)."""
    measured: dict[object, dict[str, int | None]]
    """ASTRA-sim's times of each measured call signature (``--measure-with``)."""

    @property
    def custom_calls(self) -> list[tuple[CollectiveCall, CustomEt]]:
        return [(call, et) for call, et in self.calls if et is not None]

    def summary(self) -> str:
        keys = "per-node ETs" if self.per_node else "one ET per collective type"
        native = len(self.calls) - len(self.custom_calls)
        left = f" ({native} left to ASTRA-sim's native, measured faster)" if native else ""
        return (
            f"{self.workload.num_ranks} ranks, {len(self.calls)} collectives{left}, "
            f"{len(self.ets)} synthesized algorithms, {keys} (runs on ASTRA-sim "
            f"{' and '.join(self.builds)})"
        )

    def system_files(self) -> dict[str, str]:
        """system.json (synthesized), system_native.json, and the per-node map if used."""
        dims = len(self.network) if self.network else 1
        native = workload_system(self.options.native, dims, {})
        calls = self.custom_calls
        if self.per_node:
            custom: dict[str, Any] = {PER_NODE_KEY: PER_NODE_FILE}
        else:
            custom = {f"{call.kind}-implementation-custom": [et.prefix] for call, et in calls}
        files = {
            "system.json": _json_text(workload_system(self.natives, dims, custom)),
            "system_native.json": _json_text(native),
        }
        if self.per_node:
            prefixes = {node: et.prefix for call, et in calls for _, node in call.node_ids}
            files[PER_NODE_FILE] = per_node_yaml(prefixes)
        return files

    def manifest(self) -> dict[str, Any]:
        return {
            "format": WORKLOAD_FORMAT,
            "version": 1,
            "workload": str(self.workload.prefix),
            "ranks": self.workload.num_ranks,
            "topology": self.topology.name,
            "network": [vars(d) for d in self.network] if self.network else None,
            "custom_keys": "per-node" if self.per_node else "per-type",
            "runs_on": list(self.builds),
            "native": self.options.native,
            "algorithm": self.options.algorithm,
            "seed": self.options.seed,
            "ets": [_et_entry(et) for et in self.ets],
            "collectives": [
                _call_entry(call, et, self.natives, self.measured.get(call.signature))
                for call, et in self.calls
            ],
        }

    def text_files(self) -> dict[str, str]:
        binary = AWARE_BINARY if self.network is None or len(self.network) == 1 else UNAWARE_BINARY
        files = {
            **self.system_files(),
            "memory.json": _json_text(REMOTE_MEMORY),
            "manifest.json": _json_text(self.manifest()),
            "README.md": self.readme(),
            "run.sh": run_script(
                workload=WORKLOAD_NAME,
                npus=self.workload.num_ranks,
                binary=binary,
                native=self.options.native,
                keys=PER_NODE_KEY if self.per_node else "one custom ET per collective type",
                builds="ASTRA-sim " + " or ".join(self.builds),
                comm_groups=COMM_GROUPS_FILE if self.workload.comm_groups_file else None,
            ),
        }
        if self.network:
            files["network.yml"] = network_yaml(self.network)
        return files

    def readme(self) -> str:
        rows = "\n".join(
            f"| `{et.prefix}` | {et.key[0]} | {len(et.key[1])} | {et.key[3]} x {et.key[4]} B | "
            f"{et.schedule.meta.get('algorithm', 'tacos')} | {et.predicted_time_us:.6g} |"
            for et in self.ets
        )
        network = (
            "`network.yml` is the network."
            if self.network
            else "This network has no ASTRA-sim analytical form: set ASTRA_SIM_NETWORK."
        )
        return (
            f"# TACOS collectives for the workload {self.workload.prefix.name}\n\n"
            f"{self.summary()}.\n\n"
            "Run `./run.sh` to simulate the workload with the synthesized collectives and "
            f"with ASTRA-sim's `{self.options.native}` and print each rank's end-to-end time "
            "and the ratio; `./run.sh tacos` or `./run.sh native` runs one. "
            f"{network} `manifest.json` lists every collective (its node ids, bytes, group, "
            "ET and predicted time).\n\n"
            "| ET | collective | ranks | chunks per NPU x bytes | algorithm | predicted us |\n"
            f"|---|---|---|---|---|---|\n{rows}\n"
        )


def plan_workload(
    workload: Workload,
    topology: Topology,
    options: WorkloadOptions = WorkloadOptions(),
    network: list[AnalyticalNetwork] | None = None,
) -> WorkloadPlan:
    """Synthesize every collective of ``workload`` on ``topology`` and choose the keys.

    ``network`` is the topology as ASTRA-sim dimensions (recognised from the topology when
    None); it decides ``involved_dim`` groups and the bundle's network.yml.
    """
    if workload.num_ranks != topology.num_npus:
        raise TacosError(
            f"{workload.prefix}: {workload.num_ranks} ranks for {topology.describe()}; "
            "use a network with one NPU per rank"
        )
    network = network or analytical_dimensions(topology)
    cache: dict[SynthesisKey, Schedule] = {}
    chosen: dict[object, tuple[SynthesisKey, CommGroup, float]] = {}
    synthesized_for = _id_sharers(workload.collectives)
    runners_of = sharing_groups(workload.collectives, synthesized_for)
    route = Router(topology, network)
    for synthesized, runners in zip(synthesized_for, runners_of, strict=True):
        if (synthesized.signature, runners) not in chosen:
            chosen[(synthesized.signature, runners)] = _best_key(
                workload, synthesized, runners, topology, network, options, cache, route
            )
    picked = [
        chosen[(synthesized.signature, runners)]
        for synthesized, runners in zip(synthesized_for, runners_of, strict=True)
    ]
    measured = {}
    if options.measure_with is not None:
        schedules = [cache[key] for key, _, _ in picked]
        measured = _measure(workload, schedules, network, options)
    natives = _fallback_natives(workload.collectives, measured, options.native)
    ets: dict[tuple[SynthesisKey, tuple[CommGroup, ...]], CustomEt] = {}
    calls: list[tuple[CollectiveCall, CustomEt | None]] = []
    for call, runners, (key, group, predicted_us) in zip(
        workload.collectives, runners_of, picked, strict=True
    ):
        if _native_is_faster(measured.get(call.signature), natives[call.kind]):
            calls.append((call, None))
            continue
        if (key, runners) not in ets:
            prefix = f"et/{len(ets):03d}-{call.kind}"
            ets[(key, runners)] = CustomEt(prefix, key, cache[key], group, runners, predicted_us)
        calls.append((call, ets[(key, runners)]))
    per_node, builds = _custom_keys(workload, calls, options.astra_sim_build)
    return WorkloadPlan(
        workload,
        topology,
        network,
        options,
        list(ets.values()),
        calls,
        per_node,
        builds,
        natives,
        measured,
    )


def _measure(
    workload: Workload,
    schedules: Sequence[Schedule],
    network: list[AnalyticalNetwork] | None,
    options: WorkloadOptions,
) -> dict[object, dict[str, int | None]]:
    """ASTRA-sim's times of every distinct collective on every NPU, each call's with its
    algorithm in ``schedules`` (see :mod:`tacos.exporters.workload_measure`);
    collectives on groups are not measured."""
    assert options.measure_with is not None
    if network is None:
        raise TacosError(
            f"--measure-with needs a network ASTRA-sim can run, and {workload.prefix}'s "
            "topology has no analytical form; give --topology a network.yml"
        )
    measured: dict[object, dict[str, int | None]] = {}
    for call, schedule in zip(workload.collectives, schedules, strict=True):
        if call.group.id == WHOLE_NETWORK and call.signature not in measured:
            measured[call.signature] = measure(options.measure_with, call, schedule, network)
    return measured


def _fallback_natives(
    calls: Sequence[CollectiveCall], measured: dict[object, dict[str, int | None]], native: str
) -> dict[CollectiveKind, str]:
    """Per kind, the native algorithm for the calls left native: the one that, with each
    measured call taking the faster of it and its ET, gives the least total time."""
    natives = {}
    for kind in CUSTOM_KINDS.values():
        times = [measured[c.signature] for c in calls if c.kind is kind and c.signature in measured]

        def total(algorithm: str, times: list[dict[str, int | None]] = times) -> float:
            return sum(min(_ns(t[CUSTOM]), _ns(t[algorithm])) for t in times)

        natives[kind] = min(NATIVE_ALGORITHMS, key=total) if times else native
    return natives


def _native_is_faster(times: dict[str, int | None] | None, algorithm: str) -> bool:
    return times is not None and _ns(times[algorithm]) < _ns(times[CUSTOM])


def _ns(time: int | None) -> float:
    """A measured time, a hang counting as never finishing."""
    return float("inf") if time is None else float(time)


def export_workload(
    workload: Workload,
    topology: Topology,
    out: Path,
    options: WorkloadOptions = WorkloadOptions(),
    network: list[AnalyticalNetwork] | None = None,
) -> tuple[ExportResult, WorkloadPlan]:
    """Write the bundle for ``workload`` on ``topology`` to the directory ``out``, atomically.

    Layout (paths inside are relative, so the folder can be moved)::

        run.sh                     ./run.sh [tacos|native]; ASTRA_SIM_BIN picks the binary
        workload/workload.<r>.et   the workload, as given
        et/NNN-<kind>.<pos>.et     each synthesized algorithm, per position in its group
        per_node.yml               workload node id -> ET (per-node keys)
        system.json                synthesized collectives; system_native.json: ASTRA-sim's
        network.yml, memory.json, comm_groups.json (if given), manifest.json, README.md
    """
    plan = plan_workload(workload, topology, options, network)
    nodes = 0
    with atomic_directory(out, force=options.force) as scratch:
        for et in plan.ets:
            nodes += write_custom_et(scratch, et.prefix, et.schedule, et.group)
        for rank, path in enumerate(workload.files):
            copy = scratch / "workload" / f"{WORKLOAD_NAME}.{rank}.et"
            write_bytes_atomic(copy, _read_bytes(path))
        if workload.comm_groups_file is not None:
            write_bytes_atomic(scratch / COMM_GROUPS_FILE, _read_bytes(workload.comm_groups_file))
        for name, text in plan.text_files().items():
            write_text_atomic(scratch / name, text)
        (scratch / "run.sh").chmod(0o755)
        written = sorted(p.relative_to(scratch) for p in scratch.rglob("*") if p.is_file())
    notes = [] if plan.network else [NO_NETWORK_NOTE]
    result = ExportResult([out / p for p in written], workload.num_ranks, nodes, notes)
    return result, plan


def _id_sharers(calls: Sequence[CollectiveCall]) -> list[CollectiveCall]:
    """For each call, the first call it shares node ids with, directly or through others.

    ASTRA-sim maps a node id to one ET on every rank, so calls sharing ids (the same
    collective on different groups) run one ET (:mod:`.workload_groups`).
    """
    root = list(range(len(calls)))

    def find(index: int) -> int:
        while root[index] != index:
            index = root[index]
        return index

    owner: dict[int, int] = {}
    for index, call in enumerate(calls):
        for _, node_id in call.node_ids:
            first = find(owner.setdefault(node_id, index))
            mine = find(index)
            root[max(first, mine)] = min(first, mine)
    return [calls[find(index)] for index in range(len(calls))]


def analytical_dimensions(topology: Topology) -> list[AnalyticalNetwork] | None:
    """``topology`` as ASTRA-sim analytical dimensions: a Ring, FullyConnected or Switch, or
    a torus (mesh, hypercube) whose every dimension is a ring of uniform links; else None."""
    one = analytical_network(topology)
    if one is not None:
        return [one]
    speeds = {(link.bandwidth_GBps, link.latency_us) for link in topology.links}
    if topology.structure is None or not topology.structure.dims or len(speeds) != 1:
        return None
    bandwidth, latency_us = speeds.pop()
    dims = [
        AnalyticalNetwork("Ring", n, bandwidth, latency_us * 1000) for n in topology.structure.dims
    ]
    same = sorted(_link_ends(build_topology(dims))) == sorted(_link_ends(topology))
    return dims if same else None


def _link_ends(topology: Topology) -> list[tuple[int, int]]:
    return [(link.src, link.dst) for link in topology.links]


def _best_key(
    workload: Workload,
    call: CollectiveCall,
    runners: tuple[CommGroup, ...],
    topology: Topology,
    network: list[AnalyticalNetwork] | None,
    options: WorkloadOptions,
    cache: dict[SynthesisKey, Schedule],
    route: Router,
) -> tuple[SynthesisKey, CommGroup, float]:
    """Synthesize ``call`` for each chunk count tried and each of the first groups that run
    it (:data:`~.workload_groups.MAX_CANDIDATE_GROUPS`; cached), until one's algorithm
    takes no longer with all of ``runners`` running it than on its own group: the key,
    group and time of the one fastest with all of them (fewest chunks, then the
    earlier group, on ties)."""
    rank, node_id = call.node_ids[0]
    where = f"{workload.files[rank]}: node {node_id}"
    tenants = _tenants(call, network, where)
    best: tuple[SynthesisKey, CommGroup, float] | None = None
    for count in _chunk_counts(call, len(tenants[0]), options):
        size = chunk_bytes(call.kind, call.comm_bytes, len(tenants[0]), count)
        for group in runners[:MAX_CANDIDATE_GROUPS]:
            key = (call.kind, group.members, tenants, count, size)
            if key not in cache:
                whole = group.id == WHOLE_NETWORK
                net = topology if whole else topology.members_only(group.members)
                cache[key] = _synthesize(net, key, options, where)
            time_us = together_time_us(cache[key], topology, runners, route)
            if best is None or time_us < best[2]:
                best = (key, group, time_us)
            if time_us <= round(cache[key].collective_time_us, ROUNDED_DIGITS):
                break  # every group runs it as fast as its own group: no other to try
    assert best is not None
    return best


def _tenants(
    call: CollectiveCall, network: list[AnalyticalNetwork] | None, where: str
) -> tuple[tuple[int, ...], ...]:
    """The rank groups ``call`` runs (positions among its members; one, unless
    ``involved_dim`` leaves out network dimensions of a collective on every NPU)."""
    everyone = (tuple(range(len(call.group.members))),)
    involved = call.involved_dims
    if call.group.id != WHOLE_NETWORK or involved is None:
        return everyone
    if network is None:
        if all(involved):
            return everyone
        raise TacosError(
            f"{where}: involved_dim {list(involved)} needs the network's dimensions, and this "
            "topology has no ASTRA-sim form; give --topology a network.yml"
        )
    groups = dimension_groups([d.npus for d in network], involved, where)
    return tuple(groups) if len(groups) > 1 else everyone


def _chunk_counts(call: CollectiveCall, ranks: int, options: WorkloadOptions) -> list[int]:
    if options.chunks_per_npu is not None:
        return [options.chunks_per_npu]
    return [
        count
        for count in CHUNK_CANDIDATES
        if count == 1 or chunk_bytes(call.kind, call.comm_bytes, ranks, count) >= MIN_CHUNK_BYTES
    ]


def _synthesize(net: Topology, key: SynthesisKey, options: WorkloadOptions, where: str) -> Schedule:
    kind, _, tenants, count, size = key
    if len(tenants) > 1 and options.algorithm not in ("tacos", "best"):
        raise TacosError(
            f"{where}: involved_dim makes this {len(tenants)} collectives sharing the network, "
            f"which TACOS synthesizes together but {options.algorithm} does not; use "
            "--algorithm tacos or best"
        )
    collectives = [Collective(kind, group, count, size) for group in tenants]
    schedules = synthesize_tenants(net, collectives, seed=options.seed, algorithm=options.algorithm)
    return merge_tenants(schedules)


def _custom_keys(
    workload: Workload, calls: Sequence[tuple[CollectiveCall, CustomEt | None]], build: str
) -> tuple[bool, tuple[str, ...]]:
    """Whether ASTRA-sim needs the per-node map, and the builds the bundle runs on.

    A type whose calls are partly left native needs the per-node map too (its key would
    catch them all).
    """
    per_type: dict[CollectiveKind, set[str | None]] = {}
    for call, et in calls:
        per_type.setdefault(call.kind, set()).add(None if et is None else et.prefix)
    several = sorted(kind for kind, prefixes in per_type.items() if len(prefixes) > 1)
    problem = _c459ab6_problem(calls, per_type, several)
    if build == "c459ab6" and problem:
        raise TacosError(
            f"{workload.prefix}: ASTRA-sim c459ab6 cannot run this workload's collectives: "
            f"{problem}; use --astra-sim-build master (ASTRA-sim 518bd51 or later, "
            "per-node-custom-implementation)"
        )
    per_node = build == "master" or (build == "auto" and bool(several))
    builds = ("master",) if per_node or problem else ("master", "c459ab6")
    return per_node, builds


def _c459ab6_problem(
    calls: Sequence[tuple[CollectiveCall, CustomEt | None]],
    per_type: dict[CollectiveKind, set[str | None]],
    several: list[CollectiveKind],
) -> str | None:
    """Why ASTRA-sim c459ab6 cannot run these collectives custom, if it cannot."""
    if several:
        return (
            f"it has {len(per_type[several[0]])} different {several[0]} algorithms and c459ab6 "
            "takes one custom ET per collective type"
        )
    if per_type.get(CollectiveKind.REDUCE_SCATTER, {None}) != {None}:
        return f"it runs {CollectiveKind.REDUCE_SCATTER}, which c459ab6 has no custom key for"
    for call, _ in calls:
        if call.group.id != WHOLE_NETWORK:
            return (
                f"it runs a collective on {call.group.describe()} and c459ab6 opens custom "
                "ETs by NPU id, not by position in the group"
            )
    return None


def _et_entry(et: CustomEt) -> dict[str, Any]:
    kind, members, tenants, count, size = et.key
    return {
        "et": et.prefix,
        "collective": kind.value,
        "npus": list(members),
        "groups": [[members[p] for p in group] for group in tenants] if len(tenants) > 1 else None,
        "chunks_per_npu": count,
        "chunk_bytes": size,
        "algorithm": et.schedule.meta.get("algorithm", "tacos"),
        "transfers": len(et.schedule.transfers),
        "predicted_time_us": et.predicted_time_us,
        "run_together_by": [list(group.members) for group in et.runners]
        if len(et.runners) > 1
        else None,
    }


def _call_entry(
    call: CollectiveCall,
    et: CustomEt | None,
    natives: dict[CollectiveKind, str],
    measured: dict[str, int | None] | None,
) -> dict[str, Any]:
    ids = {node for _, node in call.node_ids}
    entry: dict[str, Any] = {
        "name": call.name,
        "node_ids": ids.pop() if len(ids) == 1 else {str(r): n for r, n in call.node_ids},
        "collective": call.kind.value,
        "bytes": call.comm_bytes,
        "group": None if call.group.id == WHOLE_NETWORK else call.group.id,
        "npus": list(call.group.members),
        "involved_dims": None if call.involved_dims is None else list(call.involved_dims),
    }
    if et is None:
        entry["algorithm"] = f"native {natives[call.kind]}"
    else:
        entry["et"] = et.prefix
        entry["synthesized_for"] = list(et.group.members)
        entry["algorithm"] = et.schedule.meta.get("algorithm", "tacos")
        entry["predicted_time_us"] = et.predicted_time_us
    if measured is not None:
        entry["measured_ns"] = measured
    return entry


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise TacosError(f"{path}: cannot read: {err.strerror}") from None


def _json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


@dataclass(frozen=True)
class WorkloadWriter:
    """The workload bundle for the format registry: options, the check of ``-o``, export."""

    add_arguments: Callable[[ArgumentAdder], None]
    options_from_args: Callable[[argparse.Namespace], WorkloadOptions]
    check_target: Callable[[Path, WorkloadOptions], None]
    export: Callable[..., tuple[ExportResult, WorkloadPlan]]


WRITER = WorkloadWriter(add_arguments, WorkloadOptions.from_args, check_target, export_workload)
