"""Importing MSCCL XML as a Schedule: the checker's event trace, timed on our link model."""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import REFERENCE_DIR

import tacos
from tacos.cli import export_main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters import msccl as exporter
from tacos.formats import msccl
from tacos.importers.msccl import import_schedule, to_schedule

K = CollectiveKind
REFERENCE_XMLS = sorted((REFERENCE_DIR / "msccl").glob("*.xml"))
COLLS = {
    "allgather": K.ALL_GATHER,
    "allreduce": K.ALL_REDUCE,
    "reduce_scatter": K.REDUCE_SCATTER,
    "reducescatter": K.REDUCE_SCATTER,
    "alltoall": K.ALL_TO_ALL,
    "broadcast": K.BROADCAST,
}


@pytest.mark.skipif(not REFERENCE_XMLS, reason="no reference MSCCL XMLs")
@pytest.mark.parametrize("path", REFERENCE_XMLS, ids=lambda p: p.name)
def test_every_reference_xml_imports_as_a_schedule_that_verifies(path: Path):
    algorithm = msccl.load(path)
    schedule = to_schedule(algorithm)
    assert schedule.collective.kind is COLLS[algorithm.coll]
    assert schedule.topology.num_npus == algorithm.ngpus
    report = tacos.verify(schedule)
    assert report.ok, report.summary()
    received = sum(
        step.cnt
        for gpu in algorithm.gpus
        for tb in gpu.threadblocks
        for step in tb.steps
        if step.kind.recv
    )
    assert len(schedule.transfers) == received  # one transfer per chunk received


@pytest.mark.parametrize("kind", [K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE], ids=str)
def test_an_exported_schedule_comes_back_with_the_same_messages(kind):
    topology = tacos.from_spec("hypercube:3")
    original = tacos.synthesize(topology, Collective(kind, tuple(topology.npus), 2), seed=1)
    xml = msccl.to_xml(exporter.lower(original, exporter.MscclOptions(proto="LL")))
    imported = to_schedule(msccl.load(xml, "export.xml"), topology=topology)
    assert tacos.verify(imported).ok

    def messages(schedule: tacos.Schedule) -> list[tuple[int, int, int, str]]:
        return sorted((t.src, t.dst, t.chunk, t.op.value) for t in schedule.transfers)

    assert messages(imported) == messages(original)


def test_the_event_trace_says_what_each_receive_carried_and_what_it_depended_on():
    one_way = tacos.Topology.from_edges(
        4, [(i, (i + 1) % 4) for i in range(4)], bidirectional=False
    )
    schedule = tacos.synthesize(one_way, Collective(K.ALL_GATHER, (0, 1, 2, 3), 1), seed=0)
    xml = msccl.to_xml(exporter.lower(schedule))
    trace = msccl.execute(msccl.load(xml, "ring.xml"), inplace=True, track_data=True).deliveries
    assert len(trace) == 12  # 4 chunks, 3 hops each
    for delivery in trace:
        assert delivery.dst == (delivery.src + 1) % 4
        (source,) = {b for b in range(16) if delivery.value and delivery.value[0] >> b & 1}
        origin = source // 4  # bit = rank * nchunksperloop + chunk
        hops = (delivery.src - origin) % 4
        # a chunk's first hop depends on nothing; later hops on the hop that brought it
        assert len(delivery.sources) == min(hops, 1)
        for earlier in delivery.sources:
            assert trace[earlier].dst == delivery.src and trace[earlier].value == delivery.value


def test_import_schedule_checks_the_collective_and_the_links(tmp_path):
    path = tmp_path / "ar.xml"
    topology = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topology, Collective(K.ALL_REDUCE, (0, 1, 2, 3), 1), seed=0)
    path.write_bytes(msccl.to_xml(exporter.lower(schedule)))
    assert import_schedule(path, collective=K.ALL_REDUCE).collective.kind is K.ALL_REDUCE
    with pytest.raises(TacosError, match="coll='allreduce' means all-reduce, not all-gather"):
        import_schedule(path, collective=K.ALL_GATHER)
    line = tacos.Topology.from_edges(4, [(0, 1), (1, 2), (2, 3)], name="line")
    with pytest.raises(
        TacosError, match=r"gpu 3 tb 1 step 0 \(s\) sends to gpu 0, but .* no link 3->0"
    ):
        import_schedule(path, topology=line)


def test_a_file_that_fails_the_check_is_not_imported():
    path = REFERENCE_DIR / "msccl" / "bc_chain_4_Simple.xml"
    if not path.exists():
        pytest.skip("no reference MSCCL XMLs")
    good = '<step s="1" type="s" srcbuf="o" srcoff="1"'
    broken = path.read_text().replace(good, good.replace('srcoff="1"', 'srcoff="2"'), 1)
    with pytest.raises(TacosError, match="cannot import: .*race on gpu 0"):
        to_schedule(msccl.load(broken.encode(), "bc.xml"))


LINK_US = 0.5 + 2**20 / (50 * 2**30) * 1e6
CORE = (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE)
needs_reference = pytest.mark.skipif(
    not (REFERENCE_DIR / "msccl").is_dir(), reason="reference files absent"
)
DATA_DIR = Path(__file__).parent / "data" / "astra-sim" / "converter"


@needs_reference
def test_two_channels_of_a_ring_run_side_by_side():
    # msccl-tools' allgather_ring.py 8 2: each link carries 7 chunks, one after the other,
    # as ASTRA-sim runs the same algorithm through its converter (140.2 us)
    schedule = import_schedule(REFERENCE_DIR / "msccl" / "ag_ring_8ch2_Simple.xml")
    assert schedule.collective_time_us == pytest.approx(7 * LINK_US)
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us


ROUND_TRIPS = [
    *[(spec, kind, 1) for spec in ("ring:8", "torus2d:3x3", "mesh2d:2x3", "hypercube:3",
                                   "fully-connected:4") for kind in CORE],
    # several channels share a link; ties go to the longest chain behind (the ring's order)
    *[("ring:8", kind, channels) for kind in CORE for channels in (2, 4)],
    ("torus2d:3x3", K.ALL_GATHER, 4),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "kind", "nchannels"), ROUND_TRIPS, ids=str)
def test_the_round_trip_through_xml_keeps_the_synthesized_time(tmp_path, spec, kind, nchannels):
    topology = tacos.from_spec(spec)
    schedule = tacos.synthesize(topology, Collective(kind, tuple(topology.npus), 1, 2**20))
    xml = tmp_path / "algo.xml"
    exporter.export([schedule], xml, exporter.MscclOptions(nchannels=nchannels))
    back = import_schedule(xml, topology=topology)
    assert back.collective_time_us == schedule.collective_time_us
    assert tacos.verify(back).ok


@needs_reference
def test_chunks_take_the_size_asked_for(tmp_path):
    out = tmp_path / "s.json"
    xml = REFERENCE_DIR / "msccl" / "ag_ring_8ch2_Simple.xml"
    code = export_main(["--from", "msccl", str(xml), "--chunk-size", "64KiB", "--format", "json",
                        "-o", str(out)])  # fmt: skip
    schedule = tacos.Schedule.load(out)
    assert code == 0 and schedule.collective.chunk_bytes == 65536
    link_us = 0.5 + 65536 / (50 * 2**30) * 1e6
    assert schedule.collective_time_us == pytest.approx(7 * link_us)


def test_msccl_tools_one_step_all_reduce_imports_with_its_local_reductions():
    schedule = import_schedule(DATA_DIR / "ar_1step_4_LL.xml")
    assert schedule.collective.kind is K.ALL_REDUCE and tacos.verify(schedule).ok
    # every rank sends its whole buffer to every other rank at once: 4 chunks per link
    assert schedule.collective_time_us == pytest.approx(4 * LINK_US)
