"""Replay exported bundles on ASTRA-sim and compare with our predictions, on every build.

Run: ``python benchmarks/astra_replay.py``. By default it runs the prebuilt
builds in ../shared/tools (``astra-sim``: c459ab6, 2025; ``astra-sim-master``:
518bd51, 2026) that exist; ``ASTRA_SIM_BIN`` names one binary of your own instead.

For each network and collective it synthesizes a schedule on the link model
that ASTRA-sim's backend for the network follows, exports the bundle, runs it
(``run.sh`` picks Congestion_Unaware for networks of several dimensions, and on
c459ab6 reruns a Reduce-Scatter on the all-reduce key) and prints ASTRA-sim's
slowest NPU against the route's prediction in the manifest (for ``custom``:
``tacos simulate``). The link model: ``pipelined`` on one-dimensional networks
(Congestion_Aware frees a link after serialization); ``paper`` on
multi-dimensional ones (Congestion_Unaware has no link queues, and our traces
hold each link until its message arrives).
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
from tacos.linkmodel import CostModel

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parents[1] / "shared" / "tools"
BUILDS = {"c459ab6": TOOLS / "astra-sim", "master": TOOLS / "astra-sim-master"}
NETWORKS = [
    "ring:8",
    "fully-connected:8",
    "switch:8",
    str(HERE.parents[1] / "shared/reference/astra-sim/network/analytical/HGX-H100-validated.yml"),
    "torus2d:3x5",
    "mesh2d:2x2",
    "hypercube:3",
    str(HERE.parent / "tests/data/astra-sim/network/tpu_v3_32_2dtorus.yml"),
]
"""Ring, FullyConnected and Switch; ASTRA-sim's HGX-H100-validated network; a torus, a
mesh and a hypercube (several dimensions); a real multi-dimensional ASTRA-sim YAML."""
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


def binaries() -> dict[str, str]:
    """Build name -> Congestion_Aware binary (run.sh switches to Unaware when needed)."""
    if os.environ.get("ASTRA_SIM_BIN"):
        return {"yours": os.environ["ASTRA_SIM_BIN"]}
    aware = "bin/AstraSim_Analytical_Congestion_Aware"
    return {name: str(path / aware) for name, path in BUILDS.items() if (path / aware).exists()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=NETWORKS)
    parser.add_argument("--collectives", nargs="+", default=["all-gather", "reduce-scatter",
                        "all-reduce"])  # fmt: skip
    parser.add_argument("--routes", nargs="+", default=["custom"], choices=["custom", "p2p"])
    parser.add_argument("--chunks", type=int, default=1, help="chunks per NPU")
    args = parser.parse_args()

    print(f"{'build':8} {'network':24} {'coll':15} {'links':9} {'route':6} {'astra_ns':>9} "
          f"{'predicted_ns':>12} {'astra/pred':>10}")  # fmt: skip
    worst = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for spec in args.networks:
            topo = tacos.load_topology(spec)
            several_dims = len(topo.structure.dims if topo.structure else ()) > 1
            link_model = "paper" if several_dims else "pipelined"
            topo = topo.with_cost(CostModel(link_model))
            for kind_text in args.collectives:
                kind = CollectiveKind.parse(kind_text)
                schedule = tacos.synthesize(
                    topo, Collective(kind, tuple(topo.npus), args.chunks, 2**20), seed=1
                )
                bundle = Path(scratch) / f"{Path(spec).stem}-{kind}".replace(":", "_")
                chakra.export([schedule], bundle)
                manifest = json.loads((bundle / "manifest.json").read_text())
                for build, binary in binaries().items():
                    for route in args.routes:
                        got = run(bundle, route, binary)
                        predicted = manifest["predicted_time_ns"][route]
                        shown = "deadlock" if got is None else f"{got:>9d}"
                        ratio = "-" if got is None else f"{got / predicted:.4f}"
                        if got is not None and route == "custom":
                            worst = max(worst, abs(got / predicted - 1))
                        print(f"{build:8} {Path(spec).stem[:24]:24} {kind.value:15} "
                              f"{link_model:9} {route:6} {shown:>9} {predicted:>12.0f} "
                              f"{ratio:>10}")  # fmt: skip
    print(f"custom route: worst |astra/predicted - 1| = {worst:.2%}")


if __name__ == "__main__":
    main()
