"""MSCCL export: every algorithm the runtimes would load, run without deadlock, and get right.

Correctness is judged by the independent checker (tacos.importers.msccl), which
runs the XML alone: threadblocks, dependencies, finite connection buffers,
symbolic buffer contents against the collective's postcondition.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from lxml import etree

import tacos
from tacos.cli import export_main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters import msccl
from tacos.formats import msccl as checker
from tacos.schedule import Op, Schedule, Transfer
from tacos.topology import Link, Topology

K = CollectiveKind
CORE_KINDS = [K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE]


def heterogeneous_torus() -> Topology:
    """A 2x3 torus whose links differ in bandwidth and latency, one direction slower."""
    base = tacos.from_spec("torus2d:2x3")
    links = tuple(
        Link(link.src, link.dst, 100.0 if link.src < link.dst else 25.0, 0.2 + 0.1 * (i % 3))
        for i, link in enumerate(base.links)
    )
    return Topology(base.num_npus, links, name="heterogeneous-torus")


TOPOLOGIES = {
    "ring:6": lambda: tacos.from_spec("ring:6"),
    "mesh2d:2x3": lambda: tacos.from_spec("mesh2d:2x3"),
    "torus2d:3x3": lambda: tacos.from_spec("torus2d:3x3"),
    "hypercube:3": lambda: tacos.from_spec("hypercube:3"),
    "fully-connected:5": lambda: tacos.from_spec("fully-connected:5"),
    "heterogeneous": heterogeneous_torus,
}


def synthesized(topology: Topology, kind: CollectiveKind, chunks: int = 2) -> Schedule:
    spec = Collective(kind, tuple(topology.npus), chunks, 2**20)
    return tacos.synthesize(topology, spec, seed=3)


def exported(schedule: Schedule, **options: object) -> bytes:
    return checker.to_xml(msccl.lower(schedule, msccl.MscclOptions(**options)))  # type: ignore[arg-type]


def check(xml: bytes, runtime: str) -> checker.CheckReport:
    return checker.check(checker.load(xml, "export.xml"), runtime=runtime)


# ---------------------------------------------------------------- correctness
@pytest.mark.parametrize("kind", CORE_KINDS, ids=str)
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_export_passes_the_symbolic_check_for_both_runtimes_and_all_protocols(topology, kind):
    schedule = synthesized(TOPOLOGIES[topology](), kind)
    for runtime, proto in itertools.product(["legacy", "executor"], ["Simple", "LL", "LL128"]):
        report = check(exported(schedule, proto=proto, runtime=runtime), runtime)
        assert report.ok, f"{runtime} {proto}: {report.summary()}"


@pytest.mark.parametrize("nchannels", [2, 3])
@pytest.mark.parametrize("kind", CORE_KINDS, ids=str)
def test_chunks_spread_over_channels_and_still_check_out(kind, nchannels):
    schedule = synthesized(tacos.from_spec("torus2d:3x3"), kind, chunks=3)
    xml = exported(schedule, nchannels=nchannels, proto="LL128", runtime="executor")
    report = check(xml, "executor")
    assert report.ok, report.summary()
    channels = {int(tb.get("chan")) for tb in etree.fromstring(xml).iter("tb")}
    assert channels == set(range(nchannels))


@pytest.mark.parametrize(
    "kind", [K.BROADCAST, K.REDUCE, K.GATHER, K.SCATTER, K.ALL_TO_ALL], ids=str
)
@pytest.mark.parametrize("topology", ["ring:5", "hypercube:3"])
def test_the_other_collectives_export_for_the_executor_and_check_out(topology, kind):
    schedule = synthesized(tacos.from_spec(topology), kind)
    for proto in ("Simple", "LL"):
        report = check(exported(schedule, proto=proto, runtime="executor"), "executor")
        assert report.ok, f"{proto}: {report.summary()}"


def test_routes_through_switches_become_direct_messages():
    schedule = synthesized(tacos.from_spec("switch:4"), K.ALL_REDUCE)
    xml = exported(schedule)
    assert check(xml, "executor").ok
    peers = {int(tb.get(p)) for tb in etree.fromstring(xml).iter("tb") for p in ("send", "recv")}
    assert peers <= {-1, 0, 1, 2, 3}  # the switch (node 4) is not a GPU


def test_merged_steps_stay_within_the_buffers_at_the_largest_messages():
    # LL buffers 8 calls, so runs of up to 4 contiguous chunks merge into one step
    schedule = synthesized(tacos.from_spec("fully-connected:8"), K.ALL_GATHER, chunks=4)
    xml = exported(schedule, proto="LL", runtime="executor")
    counts = [int(step.get("cnt")) for step in etree.fromstring(xml).iter("step")]
    assert 1 < max(c for c in counts) <= 4
    report = check(xml, "executor")
    assert report.ok and "for any message size" in report.checked[-1]
    simple = exported(schedule, proto="Simple", runtime="executor")
    cpy_free = [s for s in etree.fromstring(simple).iter("step") if s.get("type") != "cpy"]
    assert {s.get("cnt") for s in cpy_free} == {"1"}  # Simple's 2 calls leave no room to merge


def test_a_one_way_ring_exports_as_the_classic_ring_all_gather():
    ring = Topology.from_edges(
        4, [(i, (i + 1) % 4) for i in range(4)], bidirectional=False, name="one-way-ring"
    )
    xml = exported(synthesized(ring, K.ALL_GATHER, chunks=1), runtime="legacy")
    for gpu in etree.fromstring(xml).iter("gpu"):
        (tb,) = gpu.iter("tb")
        rank = int(gpu.get("id"))
        assert (tb.get("send"), tb.get("recv")) == (str((rank + 1) % 4), str((rank - 1) % 4))
        assert [s.get("type") for s in tb.iter("step")] == ["s", "rcs", "rcs", "r"]
        assert [s.get("depid") for s in tb.iter("step")] == ["-1"] * 4


# ---------------------------------------------------------------- format
ATTRIBUTES = {
    "algo": ["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"],
    "gpu": ["id", "i_chunks", "o_chunks", "s_chunks"],
    "tb": ["id", "send", "recv", "chan"],
    "step": ["s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep"],
}
EXECUTOR_EXTRA = ["outofplace", "minBytes", "maxBytes"]
TAG = re.compile(r'^ *<(/?)([a-z]+)((?: [A-Za-z_]+="[^"]*")*)(/?)>$')


@pytest.mark.parametrize("runtime", ["legacy", "executor"])
def test_the_xml_is_written_the_way_the_runtimes_hand_written_parsers_read_it(runtime):
    xml = exported(synthesized(tacos.from_spec("hypercube:3"), K.ALL_REDUCE), runtime=runtime)
    text = xml.decode("ascii")
    assert text.startswith("<algo ") and text.endswith("</algo>\n")
    for line in text.splitlines():
        match = TAG.match(line)
        assert match, f"not one tag per line with double-quoted, single-spaced attributes: {line}"
        assert "\t" not in line
    root = etree.fromstring(xml)
    expected = ATTRIBUTES["algo"] + (EXECUTOR_EXTRA if runtime == "executor" else [])
    assert list(root.attrib) == expected
    for element in root.iter("gpu", "tb", "step"):
        assert list(element.attrib) == ATTRIBUTES[element.tag]
        assert all(
            re.fullmatch(r"-?(0|[1-9][0-9]*)|[A-Za-z_.-][\w.-]*", v) for v in element.values()
        )


@pytest.mark.parametrize(
    ("runtime", "kind", "coll", "inplace", "outofplace"),
    [
        ("legacy", K.REDUCE_SCATTER, "reduce_scatter", "1", None),
        ("executor", K.REDUCE_SCATTER, "reducescatter", "1", "1"),
        ("legacy", K.ALL_REDUCE, "allreduce", "1", None),
        ("executor", K.ALL_GATHER, "allgather", "1", "1"),
        ("executor", K.ALL_TO_ALL, "alltoall", "0", "1"),
    ],
)
def test_collective_names_and_call_kinds_follow_the_runtime(
    runtime, kind, coll, inplace, outofplace
):
    root = etree.fromstring(exported(synthesized(tacos.from_spec("ring:4"), kind), runtime=runtime))
    assert (root.get("coll"), root.get("inplace"), root.get("outofplace")) == (
        coll,
        inplace,
        outofplace,
    )
    if runtime == "executor":
        assert (root.get("minBytes"), root.get("maxBytes")) == ("0", "0")  # any size


def test_all_gather_copies_its_input_into_place_only_when_serving_out_of_place_calls():
    schedule = synthesized(tacos.from_spec("ring:4"), K.ALL_GATHER, chunks=3)
    both = etree.fromstring(exported(schedule, runtime="executor"))
    copies = [s for s in both.iter("step") if s.get("type") == "cpy"]
    assert len(copies) == 4 and {c.get("cnt") for c in copies} == {"3"}
    in_place = etree.fromstring(exported(schedule, runtime="legacy"))
    assert not [s for s in in_place.iter("step") if s.get("type") == "cpy"]


def test_reduce_scatter_keeps_partial_sums_in_scratch_and_never_writes_the_input():
    xml = exported(synthesized(tacos.from_spec("hypercube:3"), K.REDUCE_SCATTER))
    root = etree.fromstring(xml)
    writers = [s for s in root.iter("step") if s.get("type") in ("r", "rcs", "rrc", "rrcs", "cpy")]
    assert {s.get("dstbuf") for s in writers} <= {"o", "s"}
    assert any(int(g.get("s_chunks")) > 0 for g in root.iter("gpu"))
    assert not check(xml, "executor").warnings


def test_the_same_schedule_exports_to_the_same_bytes():
    schedule = synthesized(tacos.from_spec("torus2d:3x3"), K.ALL_REDUCE)
    assert exported(schedule, nchannels=2) == exported(schedule, nchannels=2)


@pytest.mark.parametrize("runtime", ["executor", "legacy"])
def test_the_lowered_program_is_the_model_the_reader_builds_from_its_xml(runtime):
    """One program model: lowering, writing and reading back give the same program."""
    schedule = synthesized(tacos.from_spec("switch:4"), K.ALL_REDUCE)
    program = msccl.lower(schedule, msccl.MscclOptions(proto="LL", runtime=runtime))
    read_back = checker.load(checker.to_xml(program), program.source)

    def without_lines(gpu: checker.Gpu) -> checker.Gpu:
        threadblocks = tuple(
            replace(tb, line=0, steps=tuple(replace(step, line=0) for step in tb.steps))
            for tb in gpu.threadblocks
        )
        return replace(gpu, line=0, threadblocks=threadblocks)

    assert replace(read_back, gpus=tuple(map(without_lines, read_back.gpus))) == program


# ---------------------------------------------------------------- files and the CLI
def test_a_directory_gets_a_named_file_and_a_file_name_is_used_as_given(tmp_path):
    schedule = synthesized(tacos.from_spec("ring:4"), K.ALL_REDUCE)
    result = msccl.export([schedule], tmp_path / "out", msccl.MscclOptions(proto="LL"))
    assert result.files == [tmp_path / "out" / "tacos_allreduce_ring-4_LL_ch1.xml"]
    chosen = tmp_path / "mine.xml"
    assert msccl.export([schedule], chosen).files == [chosen]
    assert checker.check(checker.load(chosen)).ok


def test_tacos_export_takes_the_msccl_options(tmp_path, capsys):
    out = tmp_path / "ar.xml"
    argv = ["--format", "msccl", "--topology", "mesh2d:2x3", "--collective", "all-reduce",
            "--nchannels", "2", "--proto", "LL128", "--msccl-runtime", "legacy",
            "-o", str(out)]  # fmt: skip
    assert export_main(argv) == 0
    assert "legacy runtime, LL128" in capsys.readouterr().out
    root = etree.fromstring(out.read_bytes())
    assert (root.get("proto"), root.get("nchannels"), root.get("outofplace")) == (
        "LL128",
        "2",
        None,
    )
    assert checker.check(checker.load(out), runtime="legacy").ok
    first = out.read_bytes()
    assert export_main(argv) == 0 and out.read_bytes() == first


# ---------------------------------------------------------------- limits and refusals
def test_too_many_steps_for_the_executor_says_which_limit_and_what_to_change():
    schedule = synthesized(tacos.from_spec("ring:8"), K.ALL_REDUCE, chunks=8)
    with pytest.raises(TacosError) as err:
        exported(schedule, runtime="executor")
    message = str(err.value)
    assert re.search(r"gpu \d+ threadblock \d+ .* needs \d+ steps", message)
    assert "the executor runtime allows 64 per threadblock" in message
    assert "--nchannels" in message and "--msccl-runtime legacy (256)" in message
    assert check(exported(schedule, runtime="legacy"), "legacy").ok
    assert check(exported(schedule, runtime="executor", nchannels=2), "executor").ok


def test_more_peers_than_a_channel_connects_cannot_be_expressed():
    schedule = synthesized(tacos.from_spec("fully-connected:34"), K.ALL_GATHER, chunks=1)
    with pytest.raises(
        TacosError, match="receives from 33 peers on channel 0; the runtimes connect"
    ):
        exported(schedule)


def test_messages_sharing_a_connection_at_once_are_refused_where_the_buffers_are_too_small():
    # two cables each way between every pair: two chunks can start on one connection together
    links = tuple(
        Link(a, b, 50.0, 0.5) for a in range(4) for b in range(4) if a != b for _ in "xyz"
    )
    schedule = synthesized(Topology(4, links, name="triple-cabled"), K.ALL_REDUCE, chunks=4)
    with pytest.raises(
        TacosError, match=r"would queue 3 calls to gpu \d+ .* buffers 2 .*--proto LL"
    ):
        exported(schedule, proto="Simple")
    assert check(exported(schedule, proto="LL"), "executor").ok


def test_the_legacy_runtime_has_no_gather():
    schedule = synthesized(tacos.from_spec("ring:4"), K.GATHER)
    with pytest.raises(TacosError, match="legacy runtime has no gather collective"):
        exported(schedule, runtime="legacy")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"nchannels": 0}, "--nchannels 0: the executor runtime has 1..32"),
        ({"nchannels": 40, "runtime": "legacy"}, "legacy runtime has 1..32"),
        ({"proto": "ll"}, "--proto ll: use one of Simple, LL, LL128"),
        ({"runtime": "nccl"}, "--msccl-runtime nccl: use one of legacy, executor, rccl"),
    ],
)
def test_bad_options_are_one_line_errors(settings, message):
    with pytest.raises(TacosError, match=re.escape(message)):
        msccl.MscclOptions(**settings)


def test_bad_options_are_refused_before_anything_is_written(capsys, tmp_path):
    out = tmp_path / "x.xml"
    assert export_main(["--format", "msccl", "--nchannels", "0", "-o", str(out)]) == 2
    assert "--nchannels 0: the executor runtime has 1..32" in capsys.readouterr().err
    assert not out.exists()


def test_a_schedule_that_does_not_verify_is_refused():
    schedule = synthesized(tacos.from_spec("ring:4"), K.ALL_GATHER)
    broken = Schedule(schedule.topology, schedule.collective, schedule.transfers[1:])
    with pytest.raises(TacosError, match="the schedule does not verify"):
        exported(broken)


def test_relays_outside_the_communicator_are_refused():
    line = Topology.from_edges(3, [(0, 1), (1, 2)], name="line")
    spec = Collective(K.ALL_GATHER, (0, 2), 1, 1024)
    hop = line.links[0].transfer_time_us(1024)
    link = {(each.src, each.dst): i for i, each in enumerate(line.links)}
    transfers = [
        Transfer(0, 0, 1, link[(0, 1)], 0.0, hop, Op.COPY),
        Transfer(1, 2, 1, link[(2, 1)], 0.0, hop, Op.COPY),
        Transfer(0, 1, 2, link[(1, 2)], hop, 2 * hop, Op.COPY, (0,)),
        Transfer(1, 1, 0, link[(1, 0)], hop, 2 * hop, Op.COPY, (1,)),
    ]
    schedule = Schedule(line, spec, transfers)
    assert tacos.verify(schedule).ok
    with pytest.raises(TacosError, match="NPU 1, which is not a rank of the collective"):
        exported(schedule)


def test_the_sample_is_what_its_documented_command_writes_today(tmp_path, capsys):
    sample = Path(__file__).resolve().parents[1] / "samples" / "msccl"
    name = "tacos_allreduce_ring-4_Simple_ch1.xml"
    argv = ["--format", "msccl", "--topology", "ring:4", "--collective", "all-reduce", "-q"]
    assert export_main([*argv, "-o", str(tmp_path)]) == 0
    assert (sample / name).read_bytes() == (tmp_path / name).read_bytes()
    assert f"tacos-export {' '.join(argv)} -o samples/msccl/" in (sample / "README.md").read_text()
    assert checker.check(checker.load(sample / name)).ok


def test_exports_are_byte_identical_across_processes(tmp_path):
    """No hash-seed or memory-address order leaks into the file."""
    script = (
        "import sys; from tacos.cli import export_main; sys.exit(export_main(["
        "'--format', 'msccl', '--topology', 'torus2d:3x3', '--collective', 'all-gather', "
        "'--chunks-per-npu', '3', '--nchannels', '2', '--proto', 'LL', '-q', "
        "'-o', sys.argv[1]]))"
    )
    outputs = []
    for hash_seed in ("1", "2"):
        target = tmp_path / f"run{hash_seed}.xml"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        # cwd outside the checkout: "python -c" puts the cwd first on sys.path
        subprocess.run(
            [sys.executable, "-c", script, str(target)], check=True, env=env, cwd=tmp_path
        )
        outputs.append(target.read_bytes())
    assert outputs[0] == outputs[1]
