"""The import commands: `tacos import`, `tacos verify --format chakra`, `tacos-export --from`.

Results come as one JSON object; bad input gives one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import shutil

import pytest
from paths import REFERENCE_DIR

from tacos.cli import export_main, main
from tacos.formats.chakra import decode_varint
from tacos.importers.chakra import load_et_set, match_messages
from tacos.importers.msccl import import_schedule as import_msccl
from tacos.schedule import Schedule
from tacos.verify import verify

ASTRA = REFERENCE_DIR / "astra-sim"
CUSTOM = ASTRA / "custom-collective" / "custom_allreduce"
pytestmark = pytest.mark.skipif(not ASTRA.is_dir(), reason="reference files absent")


def run(capsys, *argv, entry=main):
    code = entry([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "npus", "switches", "links"),
    [
        ("analytical/Ring_8npus.yml", 8, 0, 16),
        ("analytical/HGX-H100-validated.yml", 8, 1, 16),
        ("ns3/128_nodes_16_switch_topology.txt", 128, 16, 384),
        ("htsim/8nodes.topo", 8, 12, 64),
    ],
)
def test_import_describes_a_topology_file_as_one_json_object(capsys, name, npus, switches, links):
    code, out, _ = run(capsys, "import", ASTRA / "network" / name, "--json")
    data = json.loads(out)
    assert code == 0 and data["kind"] == "topology"
    assert (data["npus"], data["switches"], data["links"]) == (npus, switches, links)
    assert sum(c["links"] for c in data["link_classes"]) == links


def test_import_prints_link_classes_for_people(capsys):
    code, out, _ = run(capsys, "import", ASTRA / "network/htsim/8nodes.topo")
    assert code == 0
    assert out.splitlines()[:3] == [
        "8nodes: htsim fat tree, 8 NPUs, 12 switches, 64 directed links",
        "  32 links at 23.2831 GB/s, 1 us",
        "  32 links at 11.6415 GB/s, 1 us",
    ]


def test_import_of_the_reference_traces_reports_a_verified_all_reduce(capsys):
    code, out, _ = run(capsys, "import", f"{CUSTOM}.0.et", "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["collective"], data["ranks"], data["transfers"], data["verified"]) == (
        "all-reduce",
        8,
        112,
        True,
    )
    assert (data["chunks"], data["chunk_bytes"], data["reductions"]) == (8, 131072, 56)


def test_verify_format_chakra_checks_an_et_set(capsys):
    code, out, _ = run(capsys, "verify", "--format", "chakra", CUSTOM)
    assert code == 0 and out.strip() == f"{CUSTOM}: OK: collective completes at 90.1797 us"
    # read as a broadcast from rank 0, the other ranks send data they do not have
    code, out, _ = run(capsys, "verify", "--format", "chakra", CUSTOM, "--collective",
                       "broadcast", "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 1 and not data["verified"] and data["collective"] == "broadcast"
    assert "node 1 sends chunk 1 at 0 us before it holds any of it" in data["errors"][0]


@pytest.mark.parametrize("target", ["json", "chakra"])
def test_export_from_chakra_writes_the_imported_schedule(capsys, tmp_path, target):
    out = tmp_path / "out"
    code, stdout, _ = run(capsys, "--format", target, "--from", "chakra", CUSTOM,
                          "--topology", ASTRA / "network/analytical/Ring_8npus.yml", "-o", out,
                          entry=export_main)  # fmt: skip
    assert code == 0 and "112 transfers" in stdout
    schedule = Schedule.load(out / "schedule.json")
    assert schedule.topology.name == "Ring_8npus" and verify(schedule).ok
    if target == "chakra":
        assert sorted(p.name for p in (out / "et").iterdir()) == [f"tacos.{r}.et" for r in range(8)]
        code, out_text, _ = run(capsys, "import", out / "et" / "tacos", "--collective",
                                "all-reduce", "--json")  # fmt: skip
        assert json.loads(out_text)["verified"] and json.loads(out_text)["transfers"] == 112


@pytest.mark.parametrize("name", ["Ring_4npus", "Ring_8npus", "Ring_16npus", "HGX-H100-validated"])
def test_synthesize_runs_on_every_reference_network_yaml(capsys, name):
    code, out, _ = run(capsys, "synthesize", "--topology",
                       ASTRA / f"network/analytical/{name}.yml", "--json", "-q")  # fmt: skip
    data = json.loads(out)
    expected = {"Ring_4npus": 4, "Ring_8npus": 8, "Ring_16npus": 16, "HGX-H100-validated": 8}
    assert code == 0 and data["npus"] == expected[name] and data["topology"] == name


BAD_YAML = "topology: [ Ring ]\nnpus_count: [ 4, 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n"


@pytest.mark.parametrize(
    ("argv", "files", "message"),
    [
        (["import", "net.yml"], {"net.yml": BAD_YAML}, "net.yml: line 2: 'npus_count' has 2"),
        (["synthesize", "--topology", "net.yml"], {"net.yml": BAD_YAML}, "net.yml: line 2"),
        (["import", "x.yml"], {"x.yml": BAD_YAML.replace("Ring", "Mesh").replace(", 4 ]", " ]")},
         "x.yml: line 1: topology[0]: unknown topology 'Mesh'"),
        (["import", "t.topo"], {"t.topo": "Nodes 8\n"}, "t.topo: missing Tiers"),
        (["import", "n.txt"], {"n.txt": "3 1 5\n2\n"}, "n.txt: line 2: the file ends where"),
        (["import", "ar"], "truncated", "ar.0.et: truncated message at byte"),
        (["import", "ar"], "headless", "ar.0.et: missing GlobalMetadata"),
        (["import", "nothing"], {}, "nothing: no files nothing.<rank>.et"),
        (["verify", "s.json", "--topology", "ring:4"], {"s.json": "{}"},
         "--topology and --collective apply to imported schedules"),
    ],
)  # fmt: skip
def test_malformed_inputs_give_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, files,
                                                   message):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    if isinstance(files, str):
        for path in CUSTOM.parent.glob("custom_allreduce.*.et"):
            shutil.copy(path, tmp_path / path.name.replace("custom_allreduce", "ar"))
        data = (tmp_path / "ar.0.et").read_bytes()
        length, payload_at = decode_varint(data, 0)  # the GlobalMetadata comes first
        damaged = data[:-3] if files == "truncated" else data[payload_at + length :]
        (tmp_path / "ar.0.et").write_bytes(damaged)
    else:
        for name, text in files.items():
            (tmp_path / name).write_text(text)
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out
    assert err.startswith("tacos: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


MSCCL_REFERENCES = sorted((REFERENCE_DIR / "msccl").glob("*.xml"))


@pytest.mark.skipif(not MSCCL_REFERENCES, reason="no MSCCL reference files")
@pytest.mark.parametrize("xml", MSCCL_REFERENCES, ids=lambda p: p.stem)
def test_msccl_algorithms_convert_to_chakra_traces_whose_messages_all_match(tmp_path, xml, capsys):
    schedule = import_msccl(xml)
    code = export_main(
        ["--from", "msccl", str(xml), "--format", "chakra", "-o", str(tmp_path / "b")]
    )
    assert code == 0, capsys.readouterr().err
    messages = match_messages(load_et_set(tmp_path / "b" / "et" / "tacos"))
    assert len(messages) == len(schedule.messages())
