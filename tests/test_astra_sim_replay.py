"""Exported bundles replayed on ASTRA-sim's analytical backend finish where we predict.

Uses $ASTRA_SIM_BIN, else the prebuilt binary in the shared tools folder; skips
when neither exists. The custom route must land within 5% of ``tacos simulate``
on direct links (it lands within a few ns), 10% through a switch (see
:func:`p2p_tolerance`). The p2p route runs the traces as ASTRA-sim's
standalone workload, which keeps one send in flight per NPU; it must land within
5% of that prediction (``tacos simulate --sends-in-flight 1``), recorded in the
bundle's manifest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from paths import ASTRA_SIM_MASTER_DIR, ASTRA_SIM_TOOL_DIR, REFERENCE_DIR

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.exporters import chakra
from tacos.exporters.astra_config import REMOTE_MEMORY, system_config
from tacos.formats.astrasim import AnalyticalNetwork, network_yaml
from tacos.formats.chakra import write_et
from tacos.importers.chakra import import_schedule
from tacos.linkmodel import CostChoice, CostModel

BINARY = os.environ.get("ASTRA_SIM_BIN") or str(
    ASTRA_SIM_TOOL_DIR / "bin" / "AstraSim_Analytical_Congestion_Aware"
)
pytestmark = pytest.mark.skipif(
    shutil.which(BINARY) is None, reason=f"no ASTRA-sim binary at {BINARY} (set ASTRA_SIM_BIN)"
)
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def run_bundle(bundle: Path, *route: str, cwd: Path | None = None) -> dict[int, int]:
    """Run the bundle's run.sh; return each NPU's finish time in ns."""
    result = subprocess.run(
        [str(bundle / "run.sh"), *route],
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRA_SIM_BIN": BINARY},
        cwd=cwd or bundle.parent,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {int(r): int(t) for r, t in FINISHED.findall(result.stdout)}


def p2p_tolerance(spec: str, route: str) -> float:
    """5% on direct links; through a switch, what the paper's link model gets there.

    These bundles are synthesized with the paper's link model, which stores a
    chunk in the switch before forwarding it; ASTRA-sim pipelines it (schedules
    for pipelined links land within 2%: see the test below). Measured on
    switch:8, seeds 0-7, one chunk per NPU: the custom route lands at 0.98-1.00
    of the prediction for All-Gather and Reduce-Scatter, 0.93-1.09 for
    All-Reduce; the p2p route (our one-port model of ASTRA-sim's standalone
    workload) at 0.86-1.03 (1-2 chunks per NPU, all eight collectives).
    """
    if not spec.startswith("switch"):
        return 0.05
    return 0.15 if route == "p2p" else 0.10


def bundle_for(tmp_path: Path, spec: str, kind: CollectiveKind, chunks: int = 1) -> Path:
    topo = tacos.from_spec(spec)
    schedule = tacos.synthesize(topo, Collective(kind, tuple(topo.npus), chunks, 2**20), seed=1)
    out = tmp_path / f"{spec.replace(':', '_')}-{kind}"
    chakra.export([schedule], out)
    return out


CORE = [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE]
OTHERS = [k for k in CollectiveKind if k not in CORE]


@pytest.mark.parametrize("route", ["custom", "p2p"])
@pytest.mark.parametrize("kind", CORE)
@pytest.mark.parametrize("spec", ["ring:8", "ring:16", "fully-connected:8", "switch:8"])
def test_every_npu_finishes_within_5_percent_of_the_prediction(tmp_path, spec, kind, route):
    bundle = bundle_for(tmp_path, spec, kind)
    manifest = json.loads((bundle / "manifest.json").read_text())
    finish = run_bundle(bundle, route)
    assert sorted(finish) == list(range(manifest["npus"]))
    predicted = manifest["predicted_time_ns"][route]
    assert max(finish.values()) == pytest.approx(predicted, rel=p2p_tolerance(spec, route))
    if route == "custom":
        schedule_ns = manifest["schedule_time_us"] * 1000
        assert predicted == schedule_ns
        if not spec.startswith("switch"):  # direct links replay to the nanosecond
            assert max(finish.values()) == pytest.approx(schedule_ns, abs=10)


@pytest.mark.parametrize("route", ["custom", "p2p"])
@pytest.mark.parametrize("kind", OTHERS)
@pytest.mark.parametrize("spec", ["ring:8", "switch:8"])
def test_the_other_collectives_replay_too(tmp_path, spec, kind, route):
    bundle = bundle_for(tmp_path, spec, kind, chunks=2)
    manifest = json.loads((bundle / "manifest.json").read_text())
    finish = run_bundle(bundle, route)
    assert sorted(finish) == list(range(8))
    predicted = manifest["predicted_time_ns"][route]
    assert max(finish.values()) == pytest.approx(predicted, rel=p2p_tolerance(spec, route))


def test_default_route_runs_and_several_chunks_per_npu_queue_on_links(tmp_path):
    bundle = bundle_for(tmp_path, "ring:8", CollectiveKind.ALL_REDUCE, chunks=3)
    predicted = json.loads((bundle / "manifest.json").read_text())["predicted_time_ns"]["custom"]
    finish = run_bundle(bundle)
    assert max(finish.values()) == pytest.approx(predicted, rel=0.001)


def test_a_moved_bundle_still_runs_from_any_directory(tmp_path):
    bundle = bundle_for(tmp_path, "ring:8", CollectiveKind.ALL_GATHER)
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    bundle.rename(moved)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    assert len(run_bundle(moved, "custom", cwd=elsewhere)) == 8
    assert not (elsewhere / "log").exists() and not (moved / "log").exists()


@pytest.mark.parametrize("route", ["custom", "p2p"])
@pytest.mark.parametrize("kind", CORE)
@pytest.mark.parametrize("spec", ["ring:8", "ring:16", "fully-connected:8", "switch:8"])
def test_one_port_schedules_replay_as_synthesized_on_both_routes(tmp_path, spec, kind, route):
    topo = tacos.from_spec(spec)
    spec_ = Collective(kind, tuple(topo.npus), 1, 2**20)
    schedule = tacos.synthesize(topo, spec_, seed=1, sends_in_flight=1)
    bundle = tmp_path / "bundle"
    chakra.export([schedule], bundle)
    finish = run_bundle(bundle, route)
    assert sorted(finish) == list(range(topo.num_npus))
    simulated_ns = tacos.simulate(schedule).collective_time_us * 1000
    assert max(finish.values()) == pytest.approx(simulated_ns, rel=0.06)
    if not spec.startswith("switch"):  # direct links replay to the nanosecond
        assert max(finish.values()) == pytest.approx(simulated_ns, abs=10)


AWARE = "bin/AstraSim_Analytical_Congestion_Aware"
BUILDS = {
    name: str(folder / AWARE)
    for name, folder in (("c459ab6", ASTRA_SIM_TOOL_DIR), ("master", ASTRA_SIM_MASTER_DIR))
    if (folder / AWARE).exists()
}
"""The prebuilt ASTRA-sim builds present (run.sh picks Congestion_Unaware beside them)."""
HGX = REFERENCE_DIR / "astra-sim/network/analytical/HGX-H100-validated.yml"
TPU_TORUS = Path(__file__).parent / "data/astra-sim/network/tpu_v3_32_2dtorus.yml"


def replay_on(build: str, bundle: Path, *route: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle / "run.sh"), *route],
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRA_SIM_BIN": BUILDS[build]},
        timeout=300,
        check=False,
    )


def slowest_ns(result: subprocess.CompletedProcess[str]) -> int:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return max(int(t) for _, t in FINISHED.findall(result.stdout))


def exported(tmp_path: Path, topology: tacos.Topology, kind: CollectiveKind) -> tuple[Path, float]:
    schedule = tacos.synthesize(topology, Collective(kind, tuple(topology.npus), 1, 2**20), seed=1)
    chakra.export([schedule], tmp_path / "bundle")
    return tmp_path / "bundle", tacos.simulate(schedule).collective_time_us * 1000


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("kind", CORE)
@pytest.mark.parametrize("network", ["switch:8", "HGX-H100-validated"])
def test_switch_networks_replay_within_2_percent_on_pipelined_links(tmp_path, network, kind, build):
    if network.startswith("HGX") and not HGX.exists():
        pytest.skip("reference files absent")
    topology = tacos.load_topology(str(HGX) if network.startswith("HGX") else network)
    bundle, predicted_ns = exported(tmp_path, topology.with_cost(CostModel("pipelined")), kind)
    assert slowest_ns(replay_on(build, bundle)) == pytest.approx(predicted_ns, rel=0.02)


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("network", ["torus2d:3x5", "hypercube:3", "tpu_v3_32_2dtorus"])
def test_multi_dimensional_networks_run_on_congestion_unaware(tmp_path, network, build):
    path = TPU_TORUS if network.startswith("tpu") else None
    topology = tacos.load_topology(str(path) if path else network)
    bundle, predicted_ns = exported(tmp_path, topology, CollectiveKind.ALL_REDUCE)
    assert "npus_count: [ " in (bundle / "network.yml").read_text()
    assert ", " in (bundle / "network.yml").read_text().splitlines()[1]  # several dimensions
    assert slowest_ns(replay_on(build, bundle)) == pytest.approx(predicted_ns, rel=0.02)


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_reduce_scatter_runs_as_synthesized_on_every_build(tmp_path, build):
    bundle, predicted_ns = exported(
        tmp_path, tacos.from_spec("ring:8"), CollectiveKind.REDUCE_SCATTER
    )
    system = json.loads((bundle / "system.json").read_text())
    # listing a native reduce-scatter would let c459ab6 run it instead of ours, silently
    assert "reduce-scatter-implementation" not in system
    assert system["reduce-scatter-implementation-custom"] == ["et/tacos"]
    result = replay_on(build, bundle)
    assert slowest_ns(result) == pytest.approx(predicted_ns, rel=0.02)
    fell_back = "rerunning the traces on the all-reduce key" in result.stderr
    assert fell_back is (build == "c459ab6")
    assert slowest_ns(replay_on(build, bundle, "carrier")) == pytest.approx(predicted_ns, rel=0.02)


CONVERTER_DIR = Path(__file__).parent / "data/astra-sim/converter"


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("name", ["ag_recdbl_8", "ag_allpairs_8_LL128"])
def test_imported_converter_traces_predict_what_astra_sim_runs_them_in(tmp_path, name, build):
    """ASTRA-sim's own converter ETs (messages of 1, 2 and 4 chunks in recursive doubling),
    run as a custom All-Gather on a FullyConnected network, finish when their import says."""
    schedule = import_schedule(CONVERTER_DIR / name, cost=CostChoice("pipelined"))
    (tmp_path / "et").mkdir()
    for path in CONVERTER_DIR.glob(f"{name}.*.et"):
        shutil.copy(path, tmp_path / "et" / path.name)
    system = {**system_config(), "all-gather-implementation-custom": [f"et/{name}"]}
    (tmp_path / "system.json").write_text(json.dumps(system))
    (tmp_path / "memory.json").write_text(json.dumps(REMOTE_MEMORY))
    (tmp_path / "network.yml").write_text(
        network_yaml([AnalyticalNetwork("FullyConnected", 8, 50.0, 500.0)])
    )
    for rank, (metadata, nodes) in chakra.workload_traces(schedule, 2).items():
        write_et(tmp_path / "workload" / f"all_gather.{rank}.et", metadata, nodes)
    result = subprocess.run(
        [BUILDS[build], f"--workload-configuration={tmp_path}/workload/all_gather",
         f"--system-configuration={tmp_path}/system.json",
         f"--network-configuration={tmp_path}/network.yml",
         f"--remote-memory-configuration={tmp_path}/memory.json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert slowest_ns(result) == pytest.approx(schedule.collective_time_us * 1000, rel=0.001)
