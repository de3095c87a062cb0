"""Importing MSCCL XML as a Schedule: the checker's event trace, timed on our link model."""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import REFERENCE_DIR

import tacos
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
