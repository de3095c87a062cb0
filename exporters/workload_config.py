"""ASTRA-sim configuration of a workload bundle: system files, network, run script.

Facts measured on the prebuilt ASTRA-sim master (518bd51) and c459ab6 that shape them:

* ``*-implementation`` keys list one native algorithm per network dimension. The
  native algorithms do not all implement every collective: ``halvingDoubling``
  leaves an All-to-All hanging (no rank finishes) and ``doubleBinaryTree`` is an
  All-Reduce (``DoubleBinaryTreeAllReduce``). :func:`native_algorithm` gives those
  collectives ``ring``, so ``system_native.json`` always runs.
* The synthesized route names each collective's ET either per workload node
  (``per-node-custom-implementation``: a YAML file mapping node id -> ET prefix,
  master only) or per collective type (``<kind>-implementation-custom``, one prefix
  per type; c459ab6 has no reduce-scatter key). Both paths, and the ET prefixes in
  the YAML, are resolved against ASTRA-sim's working directory: ``run.sh`` runs it in
  a scratch directory holding links to ``et/`` and the YAML (the binary also writes
  ``./log/`` there).
* The congestion-aware binary runs one-dimensional networks only; ``run.sh``
  defaults to the congestion-unaware one for several dimensions.
* Each rank prints ``sys[R] finished, T cycles`` (1 cycle = 1 ns); a rank without
  that line deadlocked although the exit code is 0, which ``run.sh`` reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tacos.collective import CollectiveKind
from tacos.exporters.astra_config import pick_network_and_binary, system_config
from tacos.formats.workload import CUSTOM_KINDS

NATIVE_ALGORITHMS: Final = ("ring", "direct", "halvingDoubling", "doubleBinaryTree")
"""ASTRA-sim's own collective algorithms (``--native``)."""
NATIVE_FALLBACK: Final = "ring"
_NATIVE_SKIPS: Final[Mapping[str, frozenset[CollectiveKind]]] = {
    "halvingDoubling": frozenset({CollectiveKind.ALL_TO_ALL}),
    "doubleBinaryTree": frozenset(CUSTOM_KINDS.values()) - {CollectiveKind.ALL_REDUCE},
}
PER_NODE_KEY: Final = "per-node-custom-implementation"
PER_NODE_FILE: Final = "per_node.yml"
AWARE_BINARY: Final = "AstraSim_Analytical_Congestion_Aware"
UNAWARE_BINARY: Final = "AstraSim_Analytical_Congestion_Unaware"


def native_algorithm(native: str, kind: CollectiveKind) -> str:
    """The native algorithm ``--native native`` runs ``kind`` with (see the module doc)."""
    return NATIVE_FALLBACK if kind in _NATIVE_SKIPS.get(native, ()) else native


def workload_system(
    native: str | Mapping[CollectiveKind, str], dimensions: int, custom: Mapping[str, Any]
) -> dict[str, Any]:
    """system.json: the single-collective bundle's settings, the ``native`` algorithm (one,
    or one per collective kind) on every dimension, then the ``custom`` keys."""
    config = system_config()
    for kind in CUSTOM_KINDS.values():
        chosen = native if isinstance(native, str) else native.get(kind, NATIVE_FALLBACK)
        config[f"{kind}-implementation"] = [native_algorithm(chosen, kind)] * dimensions
    config.update(custom)
    return config


def per_node_yaml(prefixes: Mapping[int, str]) -> str:
    """``per-node-custom-implementation`` file: workload node id -> custom ET prefix."""
    return "".join(f"{node_id}: {prefix}\n" for node_id, prefix in sorted(prefixes.items()))


RUN_SCRIPT: Final = """#!/usr/bin/env bash
# Run the workload {workload} on ASTRA-sim, with TACOS's collectives and with ASTRA-sim's own.
#   ./run.sh           both: each rank's end-to-end time, and native / tacos
#   ./run.sh tacos     synthesized collectives (system.json, {keys}; {builds})
#   ./run.sh native    ASTRA-sim's {native} (system_native.json)
# ASTRA_SIM_BIN      the binary (default: {binary} on PATH)
# ASTRA_SIM_NETWORK  a network file to use instead of network.yml
# Exits 1 if some rank does not finish (ASTRA-sim itself exits 0 on a deadlock).
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
route="${{1:-both}}"
case "$route" in
  tacos|native|both) ;;
  *) echo "usage: $0 [tacos|native]" >&2; exit 2 ;;
esac
{pick_network_and_binary}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# simulate NAME SYSTEM: run ASTRA-sim in $work/NAME; leave "rank ns" lines in $work/NAME.times
simulate() {{
  local dir="$work/$1"
  mkdir "$dir"
  ln -s "$here/et" "$dir/et"
  if [ -f "$here/{per_node}" ]; then ln -s "$here/{per_node}" "$dir/{per_node}"; fi
  local status=0
  (cd "$dir" && "$bin" --workload-configuration="$here/workload/{workload}" \\
    --system-configuration="$here/$2" --network-configuration="$network" \\
    --remote-memory-configuration="$here/memory.json"{comm_groups} \\
    > "$dir/stdout" 2>&1) || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 20 "$dir/stdout" >&2
    echo "run.sh: ASTRA-sim ($1) failed with exit code $status" >&2
    exit "$status"
  fi
  sed -n 's/.*sys\\[\\([0-9]*\\)\\] finished, \\([0-9]*\\) cycles.*/\\1 \\2/p' "$dir/stdout" \\
    | sort -n > "$work/$1.times"
  local finished
  finished=$(wc -l < "$work/$1.times")
  if [ "$finished" -ne {npus} ]; then
    echo "run.sh: $1: only $finished of {npus} ranks finished: the simulation deadlocked" >&2
    exit 1
  fi
}}

if [ "$route" != both ]; then
  simulate "$route" "$([ "$route" = tacos ] && echo system.json || echo system_native.json)"
  awk -v route="$route" '{{ printf "rank %d: %s %d ns\\n", $1, route, $2; if ($2 > end) end = $2 }}
    END {{ printf "end-to-end (slowest rank): %s %d ns\\n", route, end }}' "$work/$route.times"
  exit 0
fi
simulate tacos system.json
simulate native system_native.json
paste -d " " "$work/tacos.times" "$work/native.times" | awk '
  {{ printf "rank %d: tacos %d ns, native %d ns, native/tacos %.4f\\n", $1, $2, $4, $4 / $2
     if ($2 > tacos) tacos = $2; if ($4 > native) native = $4 }}
  END {{ printf "end-to-end (slowest rank): tacos %d ns, native %d ns, speedup %.4f\\n", \\
         tacos, native, native / tacos }}'
"""


def run_script(
    *,
    workload: str,
    npus: int,
    binary: str,
    native: str,
    keys: str,
    builds: str,
    comm_groups: str | None,
) -> str:
    """The bundle's run.sh (see :data:`RUN_SCRIPT`)."""
    return RUN_SCRIPT.format(
        pick_network_and_binary=pick_network_and_binary(binary),
        workload=workload,
        npus=npus,
        binary=binary,
        native=native,
        keys=keys,
        builds=builds,
        per_node=PER_NODE_FILE,
        comm_groups=f' \\\n    --comm-group-configuration="$here/{comm_groups}"'
        if comm_groups
        else "",
    )
