"""Replay exported bundles on ASTRA-sim and compare with our predictions, in one run.

Run: ``python benchmarks/astra_replay.py`` with ``ASTRA_SIM_BIN`` set to the binary
(defaults to the prebuilt binary in ../shared/tools/astra-sim when present).

For each topology and collective it exports the ASTRA-sim bundle, runs both
routes, and prints ASTRA-sim's slowest NPU against ``tacos simulate`` (the
schedule's own time) and against the route's prediction in the manifest
(for p2p: the one-port replay, ASTRA-sim's standalone workload keeping one send
in flight per NPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.exporters import chakra

DEFAULT_BINARY = (
    Path(__file__).resolve().parents[2]
    / "shared/tools/astra-sim/bin/AstraSim_Analytical_Congestion_Aware"
)
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def run(bundle: Path, route: str, binary: str) -> int | None:
    """ASTRA-sim's latest finish (ns), or None if some NPU never finished."""
    result = subprocess.run(
        [str(bundle / "run.sh"), route],
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRA_SIM_BIN": binary},
        check=False,
    )
    times = [int(t) for _, t in FINISHED.findall(result.stdout)]
    return max(times) if result.returncode == 0 and times else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", nargs="+", default=["ring:8", "ring:16",
                        "fully-connected:8", "switch:8"])  # fmt: skip
    parser.add_argument("--collectives", nargs="+", default=["all-gather", "reduce-scatter",
                        "all-reduce"])  # fmt: skip
    parser.add_argument("--chunks", type=int, default=1, help="chunks per NPU")
    parser.add_argument(
        "--one-port", action="store_true", help="synthesize for one send in flight per NPU"
    )
    args = parser.parse_args()
    binary = os.environ.get("ASTRA_SIM_BIN") or str(DEFAULT_BINARY)

    print(f"{'topology':18} {'coll':15} {'route':6} {'astra_ns':>10} {'simulate_ns':>11} "
          f"{'astra/sim':>9} {'predicted_ns':>12} {'astra/pred':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        for spec in args.topologies:
            topo = tacos.from_spec(spec)
            for kind_text in args.collectives:
                kind = CollectiveKind.parse(kind_text)
                schedule = tacos.synthesize(
                    topo,
                    Collective(kind, tuple(topo.npus), args.chunks, 2**20),
                    seed=1,
                    sends_in_flight=1 if args.one_port else None,
                )
                bundle = Path(scratch) / f"{spec}-{kind}".replace(":", "_")
                chakra.export([schedule], bundle)
                manifest = json.loads((bundle / "manifest.json").read_text())
                simulated = tacos.simulate(schedule).collective_time_us * 1000
                for route in ("custom", "p2p"):
                    got = run(bundle, route, binary)
                    predicted = manifest["predicted_time_ns"][route]
                    shown = "deadlock" if got is None else f"{got:>10d}"
                    ratio_sim = "-" if got is None else f"{got / simulated:.4f}"
                    ratio_pred = "-" if got is None else f"{got / predicted:.4f}"
                    print(f"{spec:18} {kind.value:15} {route:6} {shown:>10} {simulated:>11.0f} "
                          f"{ratio_sim:>9} {predicted:>12.0f} {ratio_pred:>10}")  # fmt: skip


if __name__ == "__main__":
    main()
