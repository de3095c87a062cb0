"""Hostile and oversized inputs: one line naming the file or value, exit 2, at once.

Sizes are checked before anything is allocated for them, so each case must be
refused in well under a second (the guard below is generous, for slow CI machines).
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from tacos.cli import export_main, main
from tacos.formats.chakra import read_et, write_et

BILLION_LAUGHS = (
    "".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
        for prev, name in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg", strict=True)
    )
    + "topology: [ Ring ]\nnpus_count: [ *g ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n"
)

HTSIM = """Nodes 8
Tiers 2
Podsize 8
Tier 0
Downlink_speed_Gbps 200
Radix_Down 2
Radix_Up 2
Downlink_Latency_ns 1000
Tier 1
Downlink_speed_Gbps 200
Radix_Down 4
Downlink_Latency_ns 1000
Bundle 1
"""

CASES = [
    # (file name, file text or None, --topology, what stderr must contain)
    ("bomb.yml", BILLION_LAUGHS, "bomb.yml", "expands to more than"),
    ("loop.yml", "topology: &x [ Ring, *x ]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [1]\n",
     "loop.yml", "contains it"),
    ("big.yml", "topology: [ Ring ]\nnpus_count: [ 1e12 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n",
     "big.yml", "1000000000000 NPUs"),
    ("wide.yml", "topology: [ FullyConnected ]\nnpus_count: [ 100000 ]\nbandwidth: [ 50 ]\n"
     "latency: [ 500 ]\n", "wide.yml", "directed links"),
    ("big.txt", "1000000000000 0 1\n0 1 1Gbps 1ms 0\n", "big.txt", "big.txt: line 1"),
    ("sq.txt", "3 1 2\n²\n", "sq.txt", "sq.txt: line 2"),
    ("zero.topo", HTSIM.replace("Bundle 1", "Bundle 0"), "zero.topo", "Bundle must be at least 1"),
    ("over.topo", HTSIM.replace("Radix_Up 2", "Radix_Up 2\nOversubscribed 0"), "over.topo",
     "Oversubscribed must be at least 1"),
    ("sq.topo", HTSIM.replace("Nodes 8", "Nodes ²"), "sq.topo", "sq.topo: line 1"),
    ("huge.csv", "src,dst,bandwidth_GBps,latency_us\n0,1,50,1\n1,0,50,1\n1,1000000000000,50,1\n",
     "huge.csv", "huge.csv: NPU ids must be 0..1000000000000; 2 has no link"),
    ("huge.json", '{"npus": 1000000000000, "links": [[0, 1, 50, 1], [1, 0, 50, 1]]}', "huge.json",
     "1000000000000 nodes"),
    ("five.json", '{"npus": 2, "links": 5}', "five.json", "links must be a list"),
    ("typo.json", '{"nmpus": 2, "npus": 2, "links": [[0, 1, 50, 1], [1, 0, 50, 1]]}',
     "typo.json", "unknown field 'nmpus'"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "deep.json", "nested too deeply"),
    ("deep.yml", "topology: " + "[" * 20_000 + "]" * 20_000 + "\n", "deep.yml",
     "nested too deeply"),
    ("slow.csv", "src,dst,bandwidth_GBps,latency_us\n0,1,50,1e308\n1,0,50,1e308\n", "slow.csv",
     "use realistic values"),
    ("thin.csv", "src,dst,bandwidth_GBps,latency_us\n0,1,1e-320,1\n1,0,50,1\n", "thin.csv",
     "use realistic values"),
    (None, None, "mesh2d:100000x100000", "10000000000 NPUs"),
    (None, None, "fully-connected:200000", "directed links"),
    (None, None, "ring:" + "9" * 20, "9" * 20 + " NPUs"),
    (None, None, "mesh2d:4xx4", "single x"),
    (None, None, "dgx:100000x100", "dgx:100000x100"),
    (None, None, "xgmi:1x5000", "25015000 directed links"),
    ("bell.yml", "topology: [ Ring ]\nnpus_count: [ 4\x07 ]\nbandwidth: [ 50 ]\nlatency: [ 1 ]\n",
     "bell.yml", "bell.yml: character 35: not valid YAML (control character #x07)"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "topology", "message"), CASES)
def test_each_hostile_topology_is_one_line_exit_2_at_once(
    capsys, tmp_path, monkeypatch, name, text, topology, message
):
    monkeypatch.chdir(tmp_path)
    if name:
        (tmp_path / name).write_text(text, encoding="utf-8")
    started = time.perf_counter()
    code = main(["synthesize", "--topology", topology, "-o", "out.json"])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("tacos: error:") and err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err and "lol" not in err
    assert elapsed < 5.0, f"{elapsed:.1f} s: the size check must come before the work"
    assert not (tmp_path / "out.json").exists()


def test_a_csv_with_a_utf8_byte_order_mark_is_read(capsys, tmp_path):
    topology = tmp_path / "excel.csv"
    topology.write_bytes(b"\xef\xbb\xbfsrc,dst,bandwidth_GBps,latency_us\n0,1,50,1\n1,0,50,1\n")
    assert main(["synthesize", "--topology", str(topology)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--fail-npus", "0-1000000000000", "id 1000000000000 is beyond"),
    ("--groups", "0-1000000000000", "id 1000000000000 is beyond"),
    ("--groups", "0-3;;4-7", "group 1 is empty"),
    ("--fail-npus", "²", "is not an id"),
])  # fmt: skip
def test_id_lists_are_checked_before_they_are_expanded(capsys, option, value, message):
    started = time.perf_counter()
    code = main(["synthesize", "--topology", "ring:8", option, value])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert time.perf_counter() - started < 5.0


def made(capsys, *argv: str, entry=export_main) -> None:
    """Write a good file to corrupt (its output is not part of the test)."""
    assert entry(list(argv)) == 0
    capsys.readouterr()


def assert_one_line_fast(code: int, err: str, message: str, started: float) -> None:
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize(("argv", "message"), [
    (["synthesize", "--topology", "ring:8", "--chunks-per-npu", "1000000000"], "chunk deliveries"),
    (["synthesize", "--topology", "ring:8", "--tries", "100000"], "--tries 100000"),
])  # fmt: skip
def test_options_that_size_the_work_are_checked_first(capsys, argv, message):
    started = time.perf_counter()
    code = main(argv)
    assert_one_line_fast(code, capsys.readouterr().err, message, started)


def test_a_schedule_file_announcing_a_billion_chunks_per_rank_is_refused(capsys, tmp_path):
    schedule = tmp_path / "s.json"
    made(capsys, "synthesize", "--topology", "ring:4", "-o", str(schedule), entry=main)
    text = schedule.read_text()
    schedule.write_text(text.replace('"chunks_per_rank":1', '"chunks_per_rank":1000000000', 1))
    started = time.perf_counter()
    code = main(["verify", str(schedule)])
    assert_one_line_fast(code, capsys.readouterr().err, "chunk deliveries", started)


def test_msccl_buffer_sizes_are_checked_before_the_buffers_exist(capsys, tmp_path):
    xml = tmp_path / "big.xml"
    made(capsys, "--format", "msccl", "--topology", "ring:4", "--collective", "all-gather",
         "-o", str(xml))  # fmt: skip
    text = re.sub(r'o_chunks="\d+"', 'o_chunks="80000000000"', xml.read_text())
    xml.write_text(re.sub(r'nchunksperloop="\d+"', 'nchunksperloop="80000000000"', text))
    for argv in (["verify", "--format", "msccl", str(xml)], ["import", str(xml)]):
        started = time.perf_counter()
        code = main(argv)
        assert_one_line_fast(code, capsys.readouterr().err, "80000000000", started)


def test_a_chakra_chunk_id_beyond_any_message_is_refused(capsys, tmp_path):
    bundle = tmp_path / "b"
    made(capsys, "--format", "chakra", "--topology", "ring:4", "--collective", "all-gather",
         "-o", str(bundle))  # fmt: skip
    for rank in range(4):
        path = bundle / "et" / f"tacos.{rank}.et"
        meta, nodes = read_et(path)
        for node in nodes:
            for attribute in node.attr:
                if attribute.name == "tacos_chunk" and attribute.int64_val == 0:
                    attribute.int64_val = 10**7
        write_et(path, meta, nodes)
    started = time.perf_counter()
    code = main(["verify", "--format", "chakra", str(bundle / "et" / "tacos")])
    assert_one_line_fast(code, capsys.readouterr().err, "tacos_chunk 10000000 is far beyond",
                         started)  # fmt: skip


def test_two_files_for_one_rank_are_refused(capsys, tmp_path):
    bundle = tmp_path / "b"
    made(capsys, "--format", "chakra", "--topology", "ring:4", "-o", str(bundle))
    (bundle / "et" / "tacos.00.et").write_bytes((bundle / "et" / "tacos.0.et").read_bytes())
    started = time.perf_counter()
    code = main(["verify", "--format", "chakra", str(bundle / "et" / "tacos")])
    assert_one_line_fast(
        code, capsys.readouterr().err, "tacos.0.et and tacos.00.et both name rank 0", started
    )


def test_a_rank_file_with_a_huge_number_is_a_gap_found_at_once(capsys, tmp_path):
    bundle = tmp_path / "b"
    made(capsys, "--format", "chakra", "--topology", "ring:4", "-o", str(bundle))
    (bundle / "et" / "tacos.3.et").rename(bundle / "et" / "tacos.100000000000.et")
    started = time.perf_counter()
    code = main(["verify", "--format", "chakra", str(bundle / "et" / "tacos")])
    assert_one_line_fast(code, capsys.readouterr().err, "3 is missing", started)


def test_a_root_outside_the_msccl_algorithm_is_refused(capsys, tmp_path):
    xml = tmp_path / "bc.xml"
    made(capsys, "--format", "msccl", "--topology", "ring:4", "--collective", "broadcast",
         "-o", str(xml))  # fmt: skip
    started = time.perf_counter()
    code = main(["verify", "--format", "msccl", str(xml), "--root", "99"])
    assert_one_line_fast(code, capsys.readouterr().err, "--root 99 is not a GPU", started)


def test_a_schedule_whose_column_is_a_number_is_refused(capsys, tmp_path):
    schedule = tmp_path / "s.json"
    made(capsys, "synthesize", "--topology", "ring:4", "-o", str(schedule), entry=main)
    data = json.loads(schedule.read_text())
    data["transfers"]["chunk"] = 5
    schedule.write_text(json.dumps(data))
    started = time.perf_counter()
    code = main(["verify", str(schedule)])
    assert_one_line_fast(code, capsys.readouterr().err, "s.json", started)


def test_a_small_sweep_file_describing_millions_of_points_is_refused(capsys, tmp_path):
    grid = tmp_path / "huge.yaml"
    grid.write_text(
        "topologies: [" + ", ".join(f"ring:{n}" for n in range(4, 14)) + "]\n"
        "collectives: [all-gather, reduce-scatter, all-reduce, broadcast, reduce, gather, "
        "scatter, all-to-all]\n"
        "chunk_sizes: [" + ", ".join(str(2**i) for i in range(10, 30)) + "]\n"
        "chunks_per_npu: [" + ", ".join(str(i) for i in range(1, 51)) + "]\n"
        "seeds: [" + ", ".join(str(i) for i in range(50)) + "]\n"
    )
    assert len(grid.read_bytes()) < 2048
    started = time.perf_counter()
    code = main(["sweep", str(grid), "-o", str(tmp_path / "out")])
    assert_one_line_fast(code, capsys.readouterr().err, "4000000 combinations", started)
    assert not (tmp_path / "out").exists()


def test_errors_describe_a_huge_value_instead_of_echoing_it(capsys, tmp_path):
    topology = tmp_path / "t.json"
    topology.write_text('{"npus": [' + ", ".join(["1"] * 100_000) + '], "links": []}')
    assert main(["synthesize", "--topology", str(topology)]) == 2
    err = capsys.readouterr().err
    assert "a list of 100000 items is not a whole number" in err and len(err) < 300, err[:300]


@pytest.mark.parametrize("argv", [
    ["verify", "{}"],
    ["verify", "--format", "msccl", "{}"],
    ["simulate", "{}"],
    ["import", "{}.xml"],
])  # fmt: skip
def test_an_endless_device_or_a_fifo_is_refused_before_a_byte_is_read(capsys, tmp_path, argv):
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")  # reads forever
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # blocks the reader until a writer comes
    for source in (zero, fifo):
        link = tmp_path / f"{source.name}.xml"
        link.unlink(missing_ok=True)
        link.symlink_to(source)
        started = time.perf_counter()
        code = main([arg.replace("{}", str(source)) for arg in argv])
        assert_one_line_fast(code, capsys.readouterr().err, "is not a regular file", started)


@pytest.mark.parametrize("argv", [
    ["synthesize", "--topology", "{long}.json"],
    ["synthesize", "--topology", "ring:4", "-o", "{long}.json"],
    ["synthesize", "--topology", "ring:4", "--stream", "{long}.bin"],
    ["verify", "{long}.json"],
    ["sweep", "{long}.yml", "-o", "out"],
])  # fmt: skip
def test_a_path_too_long_for_the_file_system_is_one_line(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    long = "a" * 300  # names are at most 255 bytes on Linux file systems
    started = time.perf_counter()
    code = main([arg.replace("{long}", long) for arg in argv])
    assert_one_line_fast(code, capsys.readouterr().err, "File name too long", started)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("entry", "argv", "message"), [
    (main, ["synthesize", "--bandwidth", "abc"], "invalid float value: 'abc'"),
    (main, ["synthesize", "--seed", "1.5"], "invalid int value: '1.5'"),
    (main, [], "required: command"),
    (export_main, ["--format", "nope", "-o", "x"], "invalid choice: 'nope'"),
])  # fmt: skip
def test_a_bad_option_is_one_line_not_the_whole_usage(capsys, entry, argv, message):
    with pytest.raises(SystemExit) as stop:
        entry(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize(("groups", "message"), [
    ("[[0, 1], [2, 3.5]]", "group 1: 3.5 is not a whole number"),
    ('[["0", 1], [2, 3]]', "group 0: '0' is not a whole number"),
    ("[[true, 1], [2, 3]]", "group 0: True is not a whole number"),
    ("[[0, 1e400], [2, 3]]", "group 0: inf is not a whole number"),
    ("[[0, -1], [2, 3]]", "NPU id -1 is not in"),
    ("[]", "no groups"),
])  # fmt: skip
def test_tenant_groups_from_a_file_are_whole_npu_ids(capsys, tmp_path, groups, message):
    path = tmp_path / "groups.json"
    path.write_text(groups)
    started = time.perf_counter()
    code = main(["synthesize", "--topology", "ring:4", "--groups", str(path)])
    assert_one_line_fast(code, capsys.readouterr().err, message, started)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["collective"].update(ranks=[float("inf"), 1, 2, 3]), "inf is not a whole number"),
    (lambda d: d["collective"].update(chunk_bytes=2**70), "more than the formats hold"),
    (lambda d: d["transfers"]["chunk"].__setitem__(0, 2**64), "is out of range"),
    (lambda d: d["transfers"]["start"].__setitem__(0, float("nan")), "does not verify"),
])  # fmt: skip
def test_numbers_beyond_any_array_in_a_schedule_are_one_line_everywhere(
    capsys, tmp_path, edit, message
):
    schedule = tmp_path / "s.json"
    made(capsys, "synthesize", "--topology", "ring:4", "-o", str(schedule), entry=main)
    data = json.loads(schedule.read_text())
    edit(data)
    schedule.write_text(json.dumps(data))
    for entry, argv in (
        (
            export_main,
            ["--schedule", str(schedule), "--format", "chakra", "-o", str(tmp_path / "b")],
        ),
        (export_main, ["--schedule", str(schedule), "--format", "json", "-o", str(tmp_path / "j")]),
        (main, ["simulate", str(schedule)]),
    ):
        started = time.perf_counter()
        code = entry(argv)
        err = capsys.readouterr().err
        if "does not verify" in message and entry is main:
            continue  # simulate replays what it is given
        assert_one_line_fast(code, err, message, started)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_a_chunk_size_beyond_what_the_formats_hold_is_refused_first(capsys, tmp_path):
    started = time.perf_counter()
    code = export_main(["--format", "chakra", "--topology", "ring:4", "--bandwidth", "1e15",
                        "--chunk-size", str(2**63), "-o", str(tmp_path / "b")])  # fmt: skip
    assert_one_line_fast(code, capsys.readouterr().err, "more than the formats hold", started)


def test_a_small_msccl_file_announcing_a_huge_buffer_is_checked_at_once_or_refused(
    capsys, tmp_path
):
    """A 2.5 KB ring All-Gather of 4 GPUs claiming thousands of chunks per loop (all but 4
    never written): its tens of thousands of wrong outputs are counted at once, and a loop
    too big to follow through every slot is refused before the slots exist."""
    xml = tmp_path / "ring.xml"
    made(capsys, "--format", "msccl", "--topology", "ring:4", "--collective", "all-gather",
         "-o", str(xml))  # fmt: skip
    text = xml.read_text()
    refused = "tacos checks programs of at most 65536"
    for chunks, code_wanted, message in ((16384, 1, "FAILED ("), (32768, 2, refused)):
        big = re.sub(r'o_chunks="\d+"', f'o_chunks="{chunks}"', text)
        xml.write_text(re.sub(r'nchunksperloop="\d+"', f'nchunksperloop="{chunks}"', big))
        started = time.perf_counter()
        code = main(["verify", "--format", "msccl", str(xml)])
        out, err = capsys.readouterr()
        assert code == code_wanted and message in out + err, out + err
        assert time.perf_counter() - started < 10.0


@pytest.mark.parametrize(("entry", "argv", "message"), [
    (main, ["synthesize", "--topology", ""], "argument --topology: is empty"),
    (main, ["synthesize", "--collective", " "], "argument --collective: is empty"),
    (main, ["synthesize", "--topology", "dgx:2x8,nic=1,nic=2"], "option nic is given twice"),
    (main, ["synthesize", "--topology", "dgx:2x8,,"], "must be name=value"),
])  # fmt: skip
def test_an_option_that_says_nothing_or_twice_is_refused(capsys, entry, argv, message):
    try:
        code = entry(argv)
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("option", [
    ["--root", "3"], ["--groups", "0-1;2-3"], ["--fail-npus", "1"], ["--seed", "4"],
    ["--algorithm", "ring"], ["--chunks-per-npu", "2"],
])  # fmt: skip
def test_synthesis_options_are_refused_where_a_schedule_is_read_not_synthesized(
    capsys, tmp_path, option
):
    xml, schedule = tmp_path / "a.xml", tmp_path / "s.json"
    made(capsys, "--format", "msccl", "--topology", "ring:4", "-o", str(xml))
    made(capsys, "synthesize", "--topology", "ring:4", "-o", str(schedule), entry=main)
    for source in (["--from", "msccl", str(xml)], ["--schedule", str(schedule)]):
        started = time.perf_counter()
        code = export_main([*source, *option, "--format", "json", "-o", str(tmp_path / "o")])
        assert_one_line_fast(code, capsys.readouterr().err, f"{option[0]} applies to", started)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("topology", ["dgx:2x4", "xgmi:2x4", "{file}"])
def test_link_speeds_for_a_topology_that_sets_its_own_are_refused_not_ignored(
    capsys, tmp_path, topology
):
    made(capsys, "synthesize", "--topology", "ring:4", "-o", str(tmp_path / "s.json"), entry=main)
    topology = topology.format(file=tmp_path / "s.json")
    for option in (["--bandwidth", "10"], ["--latency", "2"]):
        started = time.perf_counter()
        code = main(["synthesize", "--topology", topology, *option])
        assert_one_line_fast(code, capsys.readouterr().err, "sets its own", started)
    assert main(["synthesize", "--topology", "fat-tree:4", "--bandwidth", "10", "-q"]) == 0


def test_a_number_of_thousands_of_digits_is_one_line(capsys, tmp_path):
    huge = "1" * 5000  # Python refuses to read an int of over 4,300 digits
    groups = tmp_path / "g.json"
    groups.write_text(f"[[0, 1], [2, {huge}]]")
    for option in (["--fail-npus", huge], ["--groups", str(groups)]):
        started = time.perf_counter()
        code = main(["synthesize", "--topology", "ring:4", *option])
        assert_one_line_fast(code, capsys.readouterr().err, "more than 4,300 digits", started)


@pytest.mark.parametrize(
    "address", ["nonsense", "tcp://", "http://127.0.0.1:8786", "tcp://[::1", ""]
)
def test_a_malformed_dask_address_is_refused_before_the_sweep_writes(capsys, tmp_path, address):
    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "topologies: [ring:4]\ncollectives: [all-gather]\nchunk_sizes: [1MiB]\n"
        "chunks_per_npu: [1]\nseeds: [0]\n"
    )
    started = time.perf_counter()
    code = main(["sweep", str(spec), "-o", str(tmp_path / "out"), "--scheduler", "dask",
                 "--address", address, "-q"])  # fmt: skip
    assert_one_line_fast(code, capsys.readouterr().err, "not a Dask scheduler address", started)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--format", "json", "--nchannels", "2"], "--nchannels is an option of the msccl format"),
    (["--format", "chakra", "--measure-with", "x"], "of the chakra workload bundle"),
    (["--format", "msccl", "--force"], "--force is an option of the chakra format"),
])  # fmt: skip
def test_an_option_of_another_format_is_refused_not_ignored(capsys, tmp_path, argv, message):
    started = time.perf_counter()
    code = export_main([*argv, "--topology", "ring:4", "-o", str(tmp_path / "o")])
    assert_one_line_fast(code, capsys.readouterr().err, message, started)


def test_a_transfer_stream_given_as_a_schedule_is_named(capsys, tmp_path):
    stream = tmp_path / "ag.bin"
    made(capsys, "synthesize", "--topology", "ring:4", "--collective", "all-gather",
         "--stream", str(stream), entry=main)  # fmt: skip
    for entry, argv in ((main, ["verify", str(stream)]), (main, ["simulate", str(stream)]),
                        (export_main, ["--schedule", str(stream), "--format", "json",
                                       "-o", str(tmp_path / "o.json")])):  # fmt: skip
        started = time.perf_counter()
        code = entry(argv)
        assert_one_line_fast(code, capsys.readouterr().err, "is a transfer stream", started)


def test_files_starting_with_a_byte_order_mark_are_read(capsys, tmp_path):
    schedule, xml = tmp_path / "s.json", tmp_path / "a.xml"
    made(capsys, "synthesize", "--topology", "ring:4", "-o", str(schedule), entry=main)
    made(capsys, "--format", "msccl", "--topology", "ring:4", "-o", str(xml))
    for path, argv in ((schedule, ["verify"]), (xml, ["verify", "--format", "msccl"])):
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        assert main([*argv, str(path)]) == 0, capsys.readouterr().err
