"""tacos sweep: a YAML grid, run on a process pool or a Dask cluster, kept in a resumable table."""

import csv
import io
import json
import os

import pytest
import yaml
from paths import REFERENCE_DIR, REPO_DIR

import tacos
from tacos.cli import main
from tacos.errors import TacosError
from tacos.sweep import (
    COLUMNS,
    TIMING_COLUMNS,
    SweepPoint,
    build_topology,
    load_spec,
    parse_spec,
    plan_sweep,
    read_table,
    run_point,
    run_sweep,
)

SPLIT_CSV = "src,dst,bandwidth_GBps,latency_us\n0,1,50,0.5\n1,0,50,0.5\n2,3,50,0.5\n3,2,50,0.5\n"
GRID = {
    "topologies": ["ring:4", "mesh2d:2x3", "hypercube:2", "split.csv"],
    "collectives": ["all-gather", "all-reduce"],
    "chunk_sizes": ["64KiB", "1MiB"],
    "chunks_per_npu": [1, 2],
    "bandwidths": [None, [100, 25]],
}
# 4 topologies x 2 x 2 x 2 x 2 bandwidths, less the [100, 25] points of the two topologies
# without two dimensions (ring:4 and the file)
GRID_POINTS, GRID_SKIPPED = 48, 16


def write_grid(directory, grid=GRID):
    (directory / "split.csv").write_text(SPLIT_CSV)
    path = directory / "sweep.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def deterministic(rows):
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The grid swept once on the local process pool: (spec, table rows)."""
    directory = tmp_path_factory.mktemp("reference")
    spec = load_spec(write_grid(directory))
    outcome = run_sweep(plan_sweep(spec, directory / "out"), jobs=2)
    assert len(outcome.computed) == GRID_POINTS
    return spec, read_table(outcome.table)


# ---------------------------------------------------------------- the grid
def test_the_grid_is_the_product_of_its_lists_less_lists_that_do_not_fit_a_topology(tmp_path):
    spec = load_spec(write_grid(tmp_path))
    assert (len(spec.points), spec.skipped) == (GRID_POINTS, GRID_SKIPPED)
    assert len({p.key for p in spec.points}) == GRID_POINTS
    per_dimension = [p for p in spec.points if p.bandwidth is not None]
    assert {p.topology for p in per_dimension} == {"mesh2d:2x3", "hypercube:2"}
    assert all(p.seed == 0 and p.latency is None for p in spec.points)


def test_a_points_key_depends_on_its_inputs_and_a_files_contents_not_its_name(tmp_path):
    point = SweepPoint("ring:4", tacos.CollectiveKind.ALL_GATHER, 1024, 1)
    assert point.key == SweepPoint("ring:4", tacos.CollectiveKind.ALL_GATHER, 1024, 1).key
    assert point.key != SweepPoint("ring:4", tacos.CollectiveKind.ALL_GATHER, 1024, 1, seed=1).key
    (tmp_path / "a.csv").write_text(SPLIT_CSV)
    (tmp_path / "b.csv").write_text(SPLIT_CSV)
    grid = {**GRID, "topologies": ["a.csv", "b.csv"], "bandwidths": [None]}
    spec = parse_spec(grid, "grid", tmp_path)
    assert len(spec.points) == 8 and {p.topology for p in spec.points} == {"a.csv"}


def test_per_dimension_values_follow_the_dimension_each_link_moves_along():
    torus = build_topology(
        SweepPoint("torus2d:4x3", tacos.CollectiveKind.ALL_GATHER, 1024, 1,
                   bandwidth=(100.0, 25.0), latency=(0.5, 2.0))
    )  # fmt: skip
    for link in torus.links:
        along_dim0 = link.src // 4 == link.dst // 4  # same row: includes the 0<->3 wrap-around
        assert (link.bandwidth_GBps, link.latency_us) == (
            (100.0, 0.5) if along_dim0 else (25.0, 2.0)
        )
    bandwidth = (10.0, 20.0, 40.0)
    cube = build_topology(
        SweepPoint("hypercube:3", tacos.CollectiveKind.ALL_GATHER, 1024, 1, bandwidth=bandwidth)
    )
    for link in cube.links:
        assert link.bandwidth_GBps == {1: 10.0, 2: 20.0, 4: 40.0}[link.src ^ link.dst]
    assert torus.name == "torus2d:4x3" and len(torus.links) == len(
        tacos.from_spec("torus2d:4x3").links
    )


def test_a_number_sets_every_link_and_null_keeps_the_topologys_own(tmp_path):
    (tmp_path / "het.csv").write_text("src,dst,bandwidth_GBps,latency_us\n0,1,200,0.5\n1,0,25,1\n")
    grid = {**GRID, "topologies": ["het.csv"], "bandwidths": [None, 75], "latencies": [None, 3]}
    points = parse_spec(grid, "grid", tmp_path).points
    kept = next(p for p in points if p.bandwidth is None and p.latency is None)
    assert [(lk.bandwidth_GBps, lk.latency_us) for lk in build_topology(kept).links] == [
        (200.0, 0.5),
        (25.0, 1.0),
    ]
    both = next(p for p in points if p.bandwidth == 75.0 and p.latency == 3.0)
    assert {(lk.bandwidth_GBps, lk.latency_us) for lk in build_topology(both).links} == {
        (75.0, 3.0)
    }


# ------------------------------------------------------------------ one point
NETWORK_DIR = REFERENCE_DIR / "astra-sim" / "network"


@pytest.mark.skipif(not NETWORK_DIR.is_dir(), reason="no reference networks")
def test_a_grid_takes_every_topology_file_that_topology_takes(tmp_path):
    """Other tools' files (here ASTRA-sim's and ns-3's) are grid entries like specs and CSVs."""
    files = [
        NETWORK_DIR / "analytical/Ring_4npus.yml",
        NETWORK_DIR / "ns3/8nodes_ring_topology.txt",
    ]
    grid = {"topologies": [str(f) for f in files], "collectives": ["all-gather"],
            "chunk_sizes": ["64KiB"], "chunks_per_npu": [1], "bandwidths": [None, 80]}  # fmt: skip
    spec = parse_spec(grid, "sweep", base_dir=tmp_path)
    assert [(p.topology, p.bandwidth) for p in spec.points] == [
        (str(files[0]), None), (str(files[0]), 80.0), (str(files[1]), None), (str(files[1]), 80.0),
    ]  # fmt: skip
    for point in spec.points:
        expected = tacos.load_topology(point.topology)
        assert point.topology_file is not None and point.topology_file.links == expected.links
        row = run_point(point)
        assert (row["verified"], row["error"], row["npus"]) == ("True", "", str(expected.num_npus))


def test_per_dimension_settings_follow_the_topologys_structure_not_its_name(tmp_path):
    """A JSON topology that carries its structure takes per-dimension lists; one without not."""
    (tmp_path / "grid.json").write_text(json.dumps(tacos.from_spec("torus2d:4x2").to_dict()))
    plain = tacos.from_spec("torus2d:4x2").to_dict()
    del plain["structure"]
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    grid = {"topologies": ["grid.json", "plain.json"], "collectives": ["all-gather"],
            "chunk_sizes": ["64KiB"], "chunks_per_npu": [1], "bandwidths": [[100, 25]]}  # fmt: skip
    spec = parse_spec(grid, "sweep", base_dir=tmp_path)
    assert [p.topology for p in spec.points] == ["grid.json"] and spec.skipped == 1
    links = build_topology(spec.points[0]).links
    assert {lk.bandwidth_GBps for lk in links if abs(lk.src - lk.dst) in (1, 3)} == {100.0}
    assert {lk.bandwidth_GBps for lk in links if abs(lk.src - lk.dst) == 4} == {25.0}


def test_a_row_holds_the_synthesis_its_lower_bound_and_its_verification():
    point = SweepPoint("mesh2d:2x3", tacos.CollectiveKind.ALL_REDUCE, 2**16, 2, seed=3,
                       bandwidth=(100.0, 25.0))  # fmt: skip
    row = run_point(point)
    topology = build_topology(point)
    spec = tacos.Collective(tacos.CollectiveKind.ALL_REDUCE, tuple(topology.npus), 2, 2**16)
    schedule = tacos.synthesize(topology, spec, seed=3)
    bound = tacos.lower_bounds(topology, spec).best_us
    assert list(row) == list(COLUMNS)
    assert row["key"] == point.key and row["bandwidth_GBps"] == "100/25" and row["latency_us"] == ""
    assert (row["npus"], row["links"], row["collective_bytes"]) == ("6", "14", str(12 * 2**16))
    assert row["transfers"] == str(len(schedule.transfers))
    assert float(row["collective_time_us"]) == schedule.collective_time_us
    assert float(row["lower_bound_us"]) == bound
    assert float(row["ratio"]) == schedule.collective_time_us / bound >= 1.0
    assert (row["verified"], row["error"]) == ("True", "")
    assert float(row["synthesis_seconds"]) > 0


def test_a_failing_point_becomes_a_row_with_its_error(tmp_path):
    (tmp_path / "split.csv").write_text(SPLIT_CSV)
    grid = {**GRID, "topologies": ["split.csv"], "bandwidths": [None]}
    row = run_point(parse_spec(grid, "grid", tmp_path).points[0])
    assert "disconnected" in row["error"]
    assert row["collective_time_us"] == row["verified"] == row["ratio"] == ""
    assert row["npus"] == "4"


# ------------------------------------------------------------- schedulers
def test_a_dask_local_cluster_of_two_processes_gives_the_local_pools_table(reference, tmp_path):
    from dask.distributed import Client, LocalCluster

    spec, expected = reference
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with cluster, Client(cluster) as client:
        worker_pids = set(client.run(os.getpid).values())
        outcome = run_sweep(
            plan_sweep(spec, tmp_path / "out"), scheduler="dask", address=cluster.scheduler_address
        )
    assert len(worker_pids) == 2 and os.getpid() not in worker_pids
    assert len(outcome.computed) == GRID_POINTS
    table = read_table(outcome.table)
    assert deterministic(table) == deterministic(expected)
    assert [row["key"] for row in table] == [p.key for p in spec.points]  # grid order
    errors = [row for row in table if row["error"]]
    assert outcome.errors == len(errors) == 8 and {r["topology"] for r in errors} == {"split.csv"}
    assert all(row["verified"] == "True" for row in table if not row["error"])


def test_an_interrupted_sweep_resumes_without_recomputing_finished_points(reference, tmp_path):
    spec, expected = reference
    seen = []

    def interrupt_after_five(row):
        seen.append(row["key"])
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan_sweep(spec, tmp_path), jobs=2, on_row=interrupt_after_five)
    assert [row["key"] for row in read_table(tmp_path)] == seen

    plan = plan_sweep(spec, tmp_path)
    assert plan.finished == set(seen) and len(plan.pending) == GRID_POINTS - 5
    outcome = run_sweep(plan, jobs=2)
    assert sorted(outcome.computed) == sorted(p.key for p in plan.pending)
    assert deterministic(read_table(tmp_path)) == deterministic(expected)

    assert run_sweep(plan_sweep(spec, tmp_path), jobs=2).computed == ()


def test_a_half_written_last_line_is_dropped_and_only_its_point_recomputed(reference, tmp_path):
    spec, expected = reference
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([COLUMNS, *(row.values() for row in expected)])
    text = out.getvalue()
    table = tmp_path / "results.csv"
    table.write_text(text[: text.rstrip("\n").rfind("\n") + 30])  # the last row, cut short
    plan = plan_sweep(spec, tmp_path)
    assert [p.key for p in plan.pending] == [expected[-1]["key"]]
    assert run_sweep(plan, jobs=1).computed == (expected[-1]["key"],)
    assert deterministic(read_table(table)) == deterministic(expected)


def test_two_sweeps_never_write_one_table_and_a_stale_plan_recomputes_nothing(reference, tmp_path):
    spec, _ = reference
    stale = plan_sweep(spec, tmp_path)
    refused = []

    def start_another_sweep(row):
        if not refused:
            with pytest.raises(TacosError, match="another tacos sweep is writing it") as err:
                run_sweep(plan_sweep(spec, tmp_path), jobs=1)
            refused.append(err)

    assert len(run_sweep(stale, jobs=2, on_row=start_another_sweep).computed) == GRID_POINTS
    assert refused
    assert run_sweep(stale, jobs=2).computed == ()  # planned before, but finished since


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "results.csv: not a results table of this tacos"),
        (",".join(COLUMNS) + "\nabc,ring:4\n", "results.csv: line 2: 2 fields, not 18"),
    ],
)
def test_a_table_that_is_not_a_sweeps_is_never_appended_to(reference, tmp_path, text, message):
    (tmp_path / "results.csv").write_text(text)
    with pytest.raises(TacosError, match=message):
        plan_sweep(reference[0], tmp_path)
    assert (tmp_path / "results.csv").read_text() == text


# ------------------------------------------------------------------ the CLI
def test_the_cli_sweeps_reports_and_resumes(tmp_path, capsys):
    grid = {**GRID, "topologies": ["ring:4", "mesh2d:2x2"], "chunk_sizes": ["1MiB"]}
    argv = ["sweep", str(write_grid(tmp_path, grid)), "-o", str(tmp_path / "out"), "-j", "2", "-q"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("12 points: 12 computed (0 with errors), 0 already in ")
    assert out.rstrip().endswith("; 4 combinations skipped (per-dimension values that do not fit)")
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("12 points: 0 computed (0 with errors), 12 already")


def test_the_cli_runs_a_dask_local_cluster_when_given_no_address(tmp_path, capsys):
    spec = write_grid(tmp_path, {**GRID, "topologies": ["ring:4"], "bandwidths": [50]})
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out), "--scheduler", "dask", "-j", "2", "-q"]) == 0
    assert capsys.readouterr().out.startswith("8 points: 8 computed (0 with errors)")
    assert {row["bandwidth_GBps"] for row in read_table(out)} == {"50"}


BAD_GRIDS = [
    ({"seed": [1]}, "unknown key 'seed'"),
    ({"chunk_sizes": []}, "'chunk_sizes' is empty"),
    ({"chunk_sizes": ["64KiB", "1 MeB"]}, "chunk_sizes[1]: size '1 MeB' is not understood"),
    ({"seeds": 3}, "'seeds' must be a list, e.g. seeds: [0, 1]"),
    ({"collectives": ["all-sum"]}, "collectives[0]: unknown collective 'all-sum'"),
    ({"topologies": ["ring:1"]}, "topologies[0]: ring:1 needs at least 2 NPUs"),
    ({"topologies": ["ring:4", "missing.csv"]}, "missing.csv: no such topology file"),
    ({"chunks_per_npu": [0]}, "chunks_per_npu[0]: 0 must be at least 1"),
    ({"bandwidths": [0]}, "bandwidths[0]: 0 must be > 0"),
    ({"latencies": [[0.5, "fast"]]}, "latencies[0][1]: 'fast' is not a number"),
    ({"bandwidths": [50, [1, 2, 3]]}, "bandwidths[1]: 3 values (one per dimension), but no"),
    ({"topologies": ["mesh2d:2x2", "mesh3d:2x2x2"], "bandwidths": [[1, 2]],
      "latencies": [[1, 2, 3]]}, "every combination is skipped"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "message"), BAD_GRIDS, ids=[m for _, m in BAD_GRIDS])
def test_a_bad_grid_is_one_line_naming_the_key_and_exit_2_before_any_work(
    tmp_path, capsys, change, message
):
    spec = write_grid(tmp_path, {**GRID, **change})
    assert main(["sweep", str(spec), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith(f"tacos: error: {spec}: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topologies: [ring:4\n", "line 2 column 1: not valid YAML"),
        ("- ring:4\n", "expected a mapping"),
        ("topologies: [ring:4]\n", "missing key 'collectives'"),
    ],
)
def test_a_file_that_is_not_a_grid_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    (tmp_path / "sweep.yaml").write_text(text)
    assert main(["sweep", str(tmp_path / "sweep.yaml"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_address_without_the_dask_scheduler_is_an_input_error(tmp_path, capsys):
    spec = write_grid(tmp_path)
    argv = ["sweep", str(spec), "-o", str(tmp_path / "out"), "--address", "tcp://127.0.0.1:1"]
    assert main(argv) == 2
    assert "add --scheduler dask" in capsys.readouterr().err


def test_the_sample_grid_is_valid():
    assert len(load_spec(REPO_DIR / "samples" / "sweep" / "sweep.yaml").points) > 0
