"""The command line: results as JSON, files written, one-line errors with exit code 2."""

import json
import shutil
import subprocess

import pytest

import tacos
from tacos.cli import export_main, main
from tacos.schedule import Schedule


def run(capsys, *argv, entry=main):
    code = entry(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_synthesize_prints_one_json_object_with_the_key_figures(capsys, tmp_path):
    target = tmp_path / "s.json"
    code, out, _ = run(
        capsys, "synthesize", "--topology", "torus2d:4x4", "--collective", "all-reduce",
        "--chunk-size", "512KiB", "--chunks-per-npu", "2", "--seed", "3", "-o", str(target),
        "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    for key in (
        "collective_time_us",
        "lower_bound_us",
        "synthesis_seconds",
        "npus",
        "links",
        "chunks",
    ):
        assert key in data
    assert (data["npus"], data["links"], data["chunks"]) == (16, 64, 32)
    assert data["collective_time_us"] >= data["lower_bound_us"] > 0
    assert Schedule.load(target).collective.chunk_bytes == 512 * 1024


def test_synthesize_says_when_an_all_reduce_comes_from_the_trees(capsys, tmp_path):
    code, out, _ = run(
        capsys, "synthesize", "--topology", "mesh2d:4x4", "--collective", "all-reduce",
        "--chunks-per-npu", "4", "-o", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert code == 0
    assert "built: tacos (trees); wrote" in out
    assert Schedule.load(tmp_path / "s.json").meta["construction"] == "trees"


def test_verify_and_simulate_read_a_saved_schedule(capsys, tmp_path):
    target = tmp_path / "s.json"
    run(capsys, "synthesize", "--topology", "hypercube:3", "--collective", "reduce-scatter",
        "-o", str(target))  # fmt: skip
    code, out, _ = run(capsys, "verify", str(target))
    assert code == 0 and "OK" in out
    code, out, _ = run(capsys, "simulate", str(target), "--json")
    assert code == 0 and json.loads(out)["matches_recorded"] is True


def test_verify_exits_1_on_an_incorrect_schedule(capsys, tmp_path):
    target = tmp_path / "s.json"
    run(
        capsys,
        "synthesize",
        "--topology",
        "ring:4",
        "--collective",
        "all-gather",
        "-o",
        str(target),
    )
    data = json.loads(target.read_text())
    for column in data["transfers"].values():
        column.pop()
    target.write_text(json.dumps(data))
    code, out, _ = run(capsys, "verify", str(target), "--json")
    assert code == 1 and json.loads(out)["verified"] is False


def test_bounds_command_reports_every_bound(capsys):
    code, out, _ = run(capsys, "bounds", "--topology", "mesh2d:4x4", "--collective", "all-gather",
                       "--json")  # fmt: skip
    assert code == 0
    assert {"ingress_us", "chunk_ingress_us", "diameter_us", "best_us"} <= set(json.loads(out))


def test_tenants_report_how_they_were_built_and_both_times(capsys, monkeypatch):
    argv = ("synthesize", "--topology", "dgx:4x4", "--groups", "0-7;8-15",
            "--collective", "all-reduce")  # fmt: skip
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tenants_synthesized"] == "apart"  # two servers each: they meet at the spine
    assert data["collective_time_us"] == data["tenants_us"]["apart"]
    assert data["tenants_us"]["apart"] < data["tenants_us"]["together"]
    code, out, _ = run(capsys, *argv)
    assert "tenants built apart, replayed together (built on one timeline: " in out
    monkeypatch.setattr(tacos.synthesizer, "APART_MAX_DELIVERIES", 0)
    code, out, _ = run(capsys, *argv)
    assert "tenants built on one timeline (too large to build apart as well)" in out


def test_export_json_writes_schedule_into_a_directory(capsys, tmp_path):
    code, out, _ = run(capsys, "--format", "json", "-o", str(tmp_path / "out"), entry=export_main)
    assert code == 0 and "predicted collective time" in out
    schedule = Schedule.load(tmp_path / "out" / "schedule.json")
    assert schedule.collective.kind.value == "all-reduce" and schedule.topology.num_npus == 8


def test_export_json_of_an_existing_schedule_to_a_file(capsys, tmp_path):
    source = tmp_path / "s.json"
    run(capsys, "synthesize", "--topology", "ring:4", "-o", str(source))
    code, _, _ = run(capsys, "--format", "json", "--schedule", str(source), "-o",
                     str(tmp_path / "copy.json"), entry=export_main)  # fmt: skip
    assert code == 0
    assert (tmp_path / "copy.json").read_text() == source.read_text()


def test_same_command_twice_gives_byte_identical_files(capsys, tmp_path):
    for name in ("a", "b"):
        run(capsys, "--format", "json", "--topology", "torus2d:3x3", "--seed", "5", "-o",
            str(tmp_path / name), entry=export_main)  # fmt: skip
    assert (tmp_path / "a/schedule.json").read_bytes() == (
        tmp_path / "b/schedule.json"
    ).read_bytes()


BAD_CSV = "src,dst,bandwidth_GBps,latency_us\n0,1,50,oops\n"
DISCONNECTED_CSV = "src,dst,bandwidth_GBps,latency_us\n0,1,50,1\n1,0,50,1\n2,3,50,1\n3,2,50,1\n"


@pytest.mark.parametrize(
    ("args", "files", "message"),
    [
        (["--topology", "star:5"], {}, "unknown topology kind 'star'"),
        (["--topology", "bad.csv"], {"bad.csv": BAD_CSV}, "bad.csv: line 2: latency_us"),
        (["--topology", "bad.json"], {"bad.json": "{oops"}, "bad.json: line 1 column 2"),
        (["--topology", "split.csv"], {"split.csv": DISCONNECTED_CSV}, "disconnected"),
        (["--topology", "ring:4", "--bandwidth", "0"], {}, "bandwidth must be positive"),
        (["--topology", "ring:4", "--bandwidth", "-3"], {}, "bandwidth must be positive"),
        (["--collective", "all-shuffle"], {}, "unknown collective 'all-shuffle'"),
        (["--chunk-size", "lots"], {}, "size 'lots' is not understood"),
        (["--topology", "missing.csv"], {}, "missing.csv: no such topology file"),
    ],
)
def test_bad_input_gives_one_line_exit_2_and_no_output(capsys, tmp_path, monkeypatch, args, files,
                                                       message):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, out, err = run(capsys, "synthesize", *args, "-o", "schedule.json")
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tacos: error:")
    assert not (tmp_path / "schedule.json").exists()
    code, _, err = run(capsys, "--format", "json", *args, "-o", "outdir", entry=export_main)
    assert code == 2 and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)


def test_a_schedule_with_an_unknown_version_is_refused(capsys, tmp_path):
    target = tmp_path / "s.json"
    run(capsys, "synthesize", "--topology", "ring:4", "-o", str(target))
    target.write_text(target.read_text().replace('"version": 1', '"version": 7', 1))
    code, _, err = run(capsys, "verify", str(target))
    assert code == 2 and "version 7 is not supported" in err


@pytest.mark.skipif(shutil.which("tacos") is None, reason="console scripts not installed")
def test_console_scripts_are_installed():
    for command in ("tacos", "tacos-export"):
        result = subprocess.run([command, "--help"], capture_output=True, text=True, check=False)
        assert result.returncode == 0 and "usage" in result.stdout
