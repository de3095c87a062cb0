"""Whole workloads (``tacos-export --workload``): what is read, what is refused, what runs.

The end-to-end tests run bundles on the prebuilt ASTRA-sim master (and c459ab6) in
../shared/tools, and skip when those are absent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from chakra_text import convert
from paths import REFERENCE_DIR, REPO_DIR, SHARED_DIR

import tacos
from tacos.cli import export_main
from tacos.errors import TacosError
from tacos.exporters.workload import WorkloadOptions, export_workload, plan_workload
from tacos.formats.chakra import (
    CHAKRA_VERSION,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    attr,
    read_et,
    write_et,
)
from tacos.importers.workload import read_workload
from tacos.linkmodel import CostModel

MASTER = SHARED_DIR / "tools/astra-sim-master/bin"
C459AB6 = SHARED_DIR / "tools/astra-sim/bin"
TEXT = REPO_DIR / "tests/data/chakra_text"
MICRO = REFERENCE_DIR / "astra-sim/workload"
needs_master = pytest.mark.skipif(
    not (MASTER / "AstraSim_Analytical_Congestion_Aware").exists(), reason="no ASTRA-sim master"
)
AR, AG, A2A = (CollectiveCommType.ALL_REDUCE, CollectiveCommType.ALL_GATHER,
               CollectiveCommType.ALL_TO_ALL)  # fmt: skip


def coll(node_id: int, comm_type: int, size: int, *deps: int, **extra: object) -> Node:
    node = Node(id=node_id, name=f"c{node_id}", type=NodeType.COMM_COLL_NODE, data_deps=deps)
    node.attr.extend([attr("comm_type", int(comm_type)), attr("comm_size", size)])
    node.attr.extend(attr(name, value) for name, value in extra.items())  # type: ignore[arg-type]
    return node


def workload(tmp_path: Path, ranks: int, nodes_of, name: str = "w") -> Path:
    """Write ``nodes_of(rank)`` as each rank's trace; return the prefix."""
    prefix = tmp_path / name / name
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        write_et(f"{prefix}.{rank}.et", GlobalMetadata(version=CHAKRA_VERSION), nodes_of(rank))
    return prefix


def run(bundle: Path, route: str, binary: Path) -> dict[str, dict[int, int]]:
    """run.sh's per-rank times, by route."""
    result = subprocess.run(
        [str(bundle / "run.sh"), route],
        capture_output=True,
        text=True,
        env={**os.environ, "ASTRA_SIM_BIN": str(binary)},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    times: dict[str, dict[int, int]] = {}
    for rank, first, t1, second, t2 in re.findall(
        r"rank (\d+): (\w+) (\d+) ns(?:, (\w+) (\d+) ns)?", result.stdout
    ):
        times.setdefault(first, {})[int(rank)] = int(t1)
        if second:
            times.setdefault(second, {})[int(rank)] = int(t2)
    return times


# ------------------------------------------------------------------ reading
def test_the_k_th_collective_of_each_rank_is_one_call_and_ids_may_follow_the_rank():
    calls = read_workload(MICRO / "all_reduce/all_reduce", 8).collectives
    assert len(calls) == 1
    assert calls[0].comm_bytes == 2**20 and calls[0].node_ids == tuple((r, r) for r in range(8))


@pytest.mark.parametrize(
    ("nodes_of", "ranks", "message"),
    [
        (lambda r: [coll(0, AR, 1024)], 7, r"w\.7\.et: missing"),
        (lambda r: [coll(0, CollectiveCommType.BROADCAST, 1024)], 8, "cannot run a BROADCAST"),
        (lambda r: [coll(0, AR, 0)], 8, "comm_size is 0"),
        (lambda r: [coll(0, AR if r else AG, 1024)], 8, "every member must issue the same"),
        (lambda r: [coll(r % 2, AR, 1024), coll(1 - r % 2, AG, 1024, r % 2)], 8, "node id"),
        (lambda r: [coll(0, AR, 1024, pg_name="1")], 8, "pass the group file"),
    ],
    ids=["rank missing", "broadcast", "size 0", "ranks disagree", "ids disagree", "no groups"],
)
def test_bad_workloads_are_one_line_errors(tmp_path, nodes_of, ranks, message):
    prefix = workload(tmp_path, ranks, nodes_of)
    with pytest.raises(TacosError, match=message):
        read_workload(prefix, 8)


def test_a_group_must_be_a_subset_of_the_network(tmp_path, capsys):
    prefix = workload(tmp_path, 8, lambda r: [coll(0, AR, 1024, pg_name="1")])
    groups = tmp_path / "groups.json"
    groups.write_text('{"1": [0, 9]}')
    args = ["--format", "chakra", "--workload", str(prefix), "--comm-groups", str(groups)]
    assert export_main([*args, "--topology", "ring:8", "-o", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "NPU 9 is not in the network" in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_c459ab6_takes_one_algorithm_per_collective_type(tmp_path):
    prefix = workload(tmp_path, 8, lambda r: [coll(0, AR, 2**20), coll(1, AR, 2**16, 0)])
    with pytest.raises(TacosError, match="2 different all-reduce algorithms.*build master"):
        plan_workload(read_workload(prefix, 8), tacos.from_spec("ring:8"),
                      WorkloadOptions(astra_sim_build="c459ab6"))  # fmt: skip


# ------------------------------------------------------------------ planning
def test_identical_collectives_share_one_synthesis_and_outputs_are_deterministic(tmp_path):
    nodes = [coll(0, AR, 2**20), coll(1, AG, 2**16, 0), coll(2, AR, 2**20, 1)]
    prefix = workload(tmp_path, 8, lambda r: nodes)
    topo = tacos.from_spec("ring:8")
    result, plan = export_workload(read_workload(prefix, 8), topo, tmp_path / "a")
    assert len(plan.ets) == 2 and plan.calls[0][1] is plan.calls[2][1]
    assert not plan.per_node and plan.builds == ("master", "c459ab6")
    export_workload(read_workload(prefix, 8), topo, tmp_path / "b")
    for path in result.files:
        assert (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes() == path.read_bytes()


def test_a_group_et_is_opened_by_sorted_position_and_names_peers_in_file_order(tmp_path):
    groups = tmp_path / "groups.json"
    groups.write_text('{"1": [6, 2, 4, 0]}')
    prefix = workload(tmp_path, 8, lambda r: [coll(0, AG, 4096, pg_name="1")] if r % 2 == 0 else [])
    plan = plan_workload(read_workload(prefix, 8, groups), tacos.from_spec("ring:8"))
    (et,) = plan.ets
    assert et.group.file_positions == (3, 1, 2, 0)
    out = tmp_path / "bundle"
    export_workload(read_workload(prefix, 8, groups), tacos.from_spec("ring:8"), out)
    _, nodes = read_et(out / f"{et.prefix}.3.et")  # NPU 6, member 0 in the file
    sends = [n for n in nodes if n.type == NodeType.COMM_SEND_NODE]
    peers = {a.int32_val for n in sends for a in n.attr if a.name == "comm_dst"}
    assert peers <= {1, 2, 3}  # file-order indexes of NPUs 2, 4, 0


def test_involved_dimensions_split_a_collective_into_groups_sharing_the_network(tmp_path):
    prefix = workload(tmp_path, 8, lambda r: [coll(0, AR, 2**16, involved_dim=[True, False])])
    plan = plan_workload(read_workload(prefix, 8), tacos.from_spec("torus2d:4x2"))
    manifest = plan.manifest()
    assert manifest["ets"][0]["groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [d["npus"] for d in manifest["network"]] == [4, 2]


# ------------------------------------------------------------------ on ASTRA-sim
@needs_master
@pytest.mark.parametrize("example", ["Resnet50_DataParallel", "DLRM_HybridParallel",
                                     "MLP_ModelParallel"])  # fmt: skip
def test_chakra_examples_finish_on_master_no_slower_than_native_ring(tmp_path, example):
    prefix = tmp_path / "w" / example
    convert(TEXT / f"{example}.txt", 8, prefix)
    out = tmp_path / "bundle"
    assert export_main(["--format", "chakra", "--workload", str(prefix), "--topology",
                        "ring:8", "-o", str(out)]) == 0  # fmt: skip
    times = run(out, "both", MASTER / "AstraSim_Analytical_Congestion_Aware")
    assert sorted(times["tacos"]) == list(range(8))
    assert max(times["tacos"].values()) <= max(times["native"].values()) * 1.02


@needs_master
def test_groups_run_on_master_in_the_time_predicted(tmp_path):
    groups = tmp_path / "groups.json"
    groups.write_text('{"1": [3, 1, 0, 2], "2": [7, 5, 4, 6]}')
    prefix = workload(tmp_path, 8, lambda r: [coll(0, AR, 2**20, pg_name="12"[r // 4]),
                                              coll(1, AR, 2**20, 0)])  # fmt: skip
    out = tmp_path / "bundle"
    _, plan = export_workload(read_workload(prefix, 8, groups), tacos.from_spec("ring:8"), out)
    predicted_ns = sum(et.predicted_time_us for et in plan.ets) * 1000
    times = run(out, "tacos", MASTER / "AstraSim_Analytical_Congestion_Aware")["tacos"]
    assert sorted(times) == list(range(8))
    assert max(times.values()) == pytest.approx(predicted_ns, abs=20)


@needs_master
@pytest.mark.parametrize("comm_type", [AR, AG], ids=["all-reduce", "all-gather"])
@pytest.mark.parametrize(
    "layout",
    [([0, 2, 4, 6], [1, 3, 5, 7]), ([0, 3, 4, 7], [1, 2, 5, 6])],
    ids=["interleaved", "diagonal"],
)
def test_groups_sharing_links_run_on_master_in_the_time_predicted_together(
    tmp_path, layout, comm_type
):
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": layout[0], "2": layout[1]}))
    group_of = {npu: name for name, members in zip("12", layout, strict=True) for npu in members}
    prefix = workload(tmp_path, 8, lambda r: [coll(0, comm_type, 2**20, pg_name=group_of[r])])
    ring = tacos.from_spec("ring:8").with_cost(CostModel(link_model="pipelined"))
    out = tmp_path / "bundle"
    _, plan = export_workload(read_workload(prefix, 8, groups), ring, out)
    (et,) = plan.ets
    assert [list(group.members) for group in et.runners] == list(layout)
    alone = et.schedule.collective_time_us
    assert et.predicted_time_us >= alone
    times = run(out, "tacos", MASTER / "AstraSim_Analytical_Congestion_Aware")["tacos"]
    assert max(times.values()) == pytest.approx(et.predicted_time_us * 1000, rel=1e-3)


@needs_master
def test_a_multi_dimensional_network_runs_on_the_unaware_binary(tmp_path):
    network = tmp_path / "net.yml"
    network.write_text("topology: [ Ring, Switch ]\nnpus_count: [ 4, 2 ]\n"
                       "bandwidth: [ 100, 25 ]\nlatency: [ 500, 1000 ]\n")  # fmt: skip
    prefix = workload(tmp_path, 8, lambda r: [coll(0, AR, 2**18, involved_dim=[True, False]),
                                              coll(1, A2A, 2**16, 0)])  # fmt: skip
    out = tmp_path / "bundle"
    assert export_main(["--format", "chakra", "--workload", str(prefix), "--topology",
                        str(network), "-o", str(out)]) == 0  # fmt: skip
    assert "AstraSim_Analytical_Congestion_Unaware" in (out / "run.sh").read_text()
    times = run(out, "both", MASTER / "AstraSim_Analytical_Congestion_Unaware")
    assert sorted(times["tacos"]) == sorted(times["native"]) == list(range(8))


@needs_master
def test_measured_collectives_stay_native_where_asta_sim_runs_them_faster(tmp_path):
    binary = MASTER / "AstraSim_Analytical_Congestion_Aware"
    prefix = MICRO / "all_to_all/all_to_all"
    out = tmp_path / "bundle"
    options = WorkloadOptions(measure_with=binary, native="direct")
    _, plan = export_workload(read_workload(prefix, 8), tacos.from_spec("switch:8"), out, options)
    entry = json.loads((out / "manifest.json").read_text())["collectives"][0]
    measured = entry["measured_ns"]
    left_native = entry["algorithm"].startswith("native")
    assert left_native == (measured["direct"] < measured["custom"])
    times = run(out, "both", binary)
    assert max(times["tacos"].values()) <= max(times["native"].values())


@pytest.mark.skipif(not (C459AB6 / "AstraSim_Analytical_Congestion_Aware").exists(),
                    reason="no ASTRA-sim c459ab6")  # fmt: skip
def test_one_algorithm_per_type_runs_on_c459ab6(tmp_path):
    out = tmp_path / "bundle"
    args = ["--format", "chakra", "--workload", str(MICRO / "all_gather/all_gather")]
    assert export_main([*args, "--topology", "ring:8", "--astra-sim-build", "c459ab6",
                        "-o", str(out)]) == 0  # fmt: skip
    times = run(out, "both", C459AB6 / "AstraSim_Analytical_Congestion_Aware")
    assert max(times["tacos"].values()) < max(times["native"].values())
