"""Chakra ET sets as Schedules: the reference custom all-reduce, our own bundles, broken traces.

Each case states what the traces do, what the verifier must conclude, and the
numbers the link model gives.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from paths import REFERENCE_DIR
from test_astra_sim_replay import BINARY, run_bundle

import tacos
from tacos.cli import EXIT_CANNOT_TELL, main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters import chakra as chakra_export
from tacos.formats.chakra import (
    CHAKRA_VERSION,
    GlobalMetadata,
    Node,
    NodeType,
    attr,
    encode_et,
    read_et,
    write_et,
)
from tacos.importers.chakra import import_schedule, prefix_of
from tacos.linkmodel import CostChoice, CostModel
from tacos.schedule import Op
from tacos.topology import Link, Topology

CUSTOM_DIR = REFERENCE_DIR / "astra-sim" / "custom-collective"
CUSTOM = CUSTOM_DIR / "custom_allreduce"
needs_reference = pytest.mark.skipif(not CUSTOM_DIR.is_dir(), reason="reference files absent")

HOP_US = 0.5 + 131072 / (50 * 2**30) * 1e6
"""One 128 KiB message over a default link (50 GB/s, 0.5 us): 2.94140625 us."""


def moves(schedule: tacos.Schedule) -> Counter:
    """What a schedule does, independent of transfer order and timing."""
    return Counter((t.src, t.dst, t.chunk, t.op) for t in schedule.transfers)


def copy_reference(tmp_path: Path) -> Path:
    for path in CUSTOM_DIR.glob("custom_allreduce.*.et"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path / "custom_allreduce"


def edit_trace(prefix: Path, rank: int, change) -> None:
    """Rewrite one rank's trace through ``change(nodes) -> nodes``."""
    path = Path(f"{prefix}.{rank}.et")
    metadata, nodes = read_et(path)
    write_et(path, metadata, change(nodes))


# -------------------------------------------------- the reference custom all-reduce
@needs_reference
def test_reference_ring_all_reduce_imports_and_verifies_as_an_all_reduce():
    schedule = import_schedule(CUSTOM)
    spec = schedule.collective
    assert (spec.kind, spec.num_ranks, spec.num_chunks, spec.chunk_bytes) == (
        CollectiveKind.ALL_REDUCE,
        8,
        8,
        131072,
    )
    assert len(schedule.transfers) == 8 * 14  # 7 reduce-scatter + 7 all-gather steps per rank
    assert sum(t.op is Op.REDUCE for t in schedule.transfers) == 8 * 7
    assert schedule.meta["chunks_from"] == "data lineage"
    report = tacos.verify(schedule)
    assert report.ok, report.summary()
    # 14 ring steps, each one message per rank, strictly one after the other, and the 7
    # reductions on each rank's chain at the 7 us their COMP nodes take: ASTRA-sim runs
    # this example in 90,174 ns (it rounds each message to whole ns)
    assert schedule.collective_time_us == pytest.approx(14 * HOP_US + 7 * 7.0)
    assert schedule.collective_time_us == pytest.approx(90.174, abs=0.01)
    assert schedule.topology.cost.reduce_bandwidth_GBps == pytest.approx(131072 / 7e-6 / 2**30)
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us


@needs_reference
def test_reference_chunk_0_is_reduced_around_the_ring_then_copied_back_around():
    schedule = import_schedule(CUSTOM)
    path = [(t.src, t.dst, t.op.value) for t in schedule.transfers if t.chunk == 0]
    ring = [(r, (r + 1) % 8) for r in range(7)] + [(7, 0)] + [(r, r + 1) for r in range(6)]
    assert [(s, d) for s, d, _ in path] == ring
    assert [op for *_, op in path] == ["reduce"] * 7 + ["copy"] * 7


@needs_reference
def test_reference_imports_on_the_ring_network_it_was_written_for():
    ring = tacos.load_topology(str(REFERENCE_DIR / "astra-sim/network/analytical/Ring_8npus.yml"))
    schedule = import_schedule(CUSTOM, topology=ring)
    assert tacos.verify(schedule).ok and schedule.topology.links == ring.links
    assert schedule.collective_time_us == pytest.approx(14 * HOP_US + 7 * 7.0)
    free = import_schedule(CUSTOM, topology=ring, cost=CostChoice(reduce_bandwidth_GBps=0.0))
    assert free.collective_time_us == pytest.approx(14 * HOP_US)


@needs_reference
@pytest.mark.skipif(shutil.which(BINARY) is None, reason=f"no ASTRA-sim binary at {BINARY}")
def test_the_imported_reference_exported_again_runs_on_astra_sim_in_the_imported_time(tmp_path):
    ring = tacos.load_topology(str(REFERENCE_DIR / "astra-sim/network/analytical/Ring_8npus.yml"))
    schedule = import_schedule(CUSTOM, topology=ring)
    chakra_export.export([schedule], tmp_path / "bundle")
    finish = run_bundle(tmp_path / "bundle", "custom")
    assert sorted(finish) == list(range(8))
    assert max(finish.values()) == pytest.approx(schedule.collective_time_us * 1000, abs=10)


@needs_reference
def test_on_a_switch_every_message_takes_two_hops_through_it():
    schedule = import_schedule(CUSTOM, topology=tacos.from_spec("switch:8"))
    assert len(schedule.transfers) == 2 * 112
    assert tacos.verify(schedule).ok
    assert schedule.collective_time_us == pytest.approx(2 * 14 * HOP_US + 7 * 7.0)


@needs_reference
def test_a_topology_without_the_ring_links_is_refused_naming_the_first_message():
    with pytest.raises(TacosError) as err:
        import_schedule(CUSTOM, topology=tacos.from_spec("mesh2d:2x4"))
    assert str(err.value).startswith(
        f"{CUSTOM}.1.et: node 0 (COMM_SEND_NODE_tb0_step0) sends to rank 2, but topology "
        "'mesh2d:2x4' has neither a link 1->2 nor a path through switches only"
    )


@needs_reference
def test_a_rank_file_names_its_set():
    assert prefix_of(CUSTOM_DIR / "custom_allreduce.5.et") == CUSTOM
    assert len(import_schedule(CUSTOM_DIR / "custom_allreduce.5.et").transfers) == 112


# ----------------------------------------------------------- broken reference
def drop_first_send(nodes: list[Node]) -> list[Node]:
    return nodes[1:]  # COMM_SEND_NODE_tb0_step0


def retag_first_send(nodes: list[Node]) -> list[Node]:
    next(a for a in nodes[0].attr if a.name == "comm_tag").int32_val = 9
    return nodes


def depend_on_a_missing_node(nodes: list[Node]) -> list[Node]:
    nodes[3].data_deps.append(99)
    return nodes


def make_the_first_node_wait_for_the_last(nodes: list[Node]) -> list[Node]:
    nodes[0].data_deps.append(nodes[-1].id)
    return nodes


@needs_reference
@pytest.mark.parametrize(
    ("rank", "change", "message"),
    [
        (0, drop_first_send, "{prefix}.1.et: node 34 (receive 0->1, tag 0, 131072 bytes) has no "
         "matching send; ASTRA-sim would wait for it forever"),
        (2, retag_first_send, "{prefix}.3.et: node 34 (receive 2->3, tag 0, 131072 bytes) has no "
         "matching send"),
        (4, depend_on_a_missing_node, "{prefix}.4.et: node 3 (COMM_SEND_NODE_tb0_step2) depends "
         "on node 99, which is not in the file"),
        (6, make_the_first_node_wait_for_the_last, "{prefix}.6.et: node 0 "
         "(COMM_SEND_NODE_tb0_step0) never runs: through data_deps and messages it waits on "
         "itself; ASTRA-sim would hang"),
    ],
)  # fmt: skip
def test_traces_that_cannot_run_are_refused_naming_file_and_node(tmp_path, rank, change, message):
    prefix = copy_reference(tmp_path)
    edit_trace(prefix, rank, change)
    with pytest.raises(TacosError) as err:
        import_schedule(prefix)
    assert str(err.value).startswith(message.format(prefix=prefix))


@needs_reference
def test_a_dropped_reduction_runs_but_does_not_verify(tmp_path):
    prefix = copy_reference(tmp_path)

    def drop_first_reduction(nodes: list[Node]) -> list[Node]:
        # recv (1) -> COMP (2) -> send (3) becomes recv (1) -> send (3): rank 3 forwards
        # chunk 2 without adding its own contribution
        del nodes[2]
        nodes[2].data_deps[:] = [1]
        return nodes

    edit_trace(prefix, 3, drop_first_reduction)
    report = tacos.verify(import_schedule(prefix))
    assert not report.ok
    assert report.errors[0].startswith(
        "postcondition: rank 0 ends without the right chunk 2 (missing contributions of rank(s) [3]"
    )


@needs_reference
def test_truncated_trace_and_missing_metadata_name_file_and_byte(tmp_path):
    prefix = copy_reference(tmp_path)
    data = Path(f"{prefix}.2.et").read_bytes()
    Path(f"{prefix}.2.et").write_bytes(data[:-10])
    with pytest.raises(TacosError, match=r"custom_allreduce\.2\.et: truncated message at byte"):
        import_schedule(prefix)
    _, nodes = read_et(CUSTOM_DIR / "custom_allreduce.2.et")
    headless = encode_et(GlobalMetadata(version=CHAKRA_VERSION), nodes)
    first_length = headless[0]  # a one-byte varint: the metadata message is short
    Path(f"{prefix}.2.et").write_bytes(headless[1 + first_length :])
    with pytest.raises(TacosError, match=r"custom_allreduce\.2\.et: missing GlobalMetadata"):
        import_schedule(prefix)


@needs_reference
def test_workload_traces_hold_no_schedule_to_import():
    with pytest.raises(TacosError) as err:
        import_schedule(REFERENCE_DIR / "astra-sim/workload/all_reduce/all_reduce")
    assert "all_reduce.0.et: node 0 (all_reduce_8npus_1MB) is a COMM_COLL_NODE" in str(err.value)


# --------------------------------------------------------- our own bundles
def export_bundle(schedule: tacos.Schedule, out: Path) -> Path:
    chakra_export.export([schedule], out)
    return out / "et" / "tacos"


def test_rank_files_with_leading_zeros_are_read_and_named_as_they_are(tmp_path):
    topology = tacos.from_spec("ring:4")
    original = tacos.synthesize(topology, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    prefix = export_bundle(original, tmp_path / "b")
    prefix.with_name("tacos.2.et").rename(prefix.with_name("tacos.002.et"))
    imported = import_schedule(prefix, topology=topology)
    assert imported.transfers == original.transfers
    prefix.with_name("tacos.002.et").write_bytes(b"not a trace")
    with pytest.raises(TacosError, match=r"tacos\.002\.et"):
        import_schedule(prefix, topology=topology)


@pytest.mark.parametrize("kind", list(CollectiveKind))
@pytest.mark.parametrize("spec", ["ring:6", "torus2d:3x3", "hypercube:3", "switch:4"])
def test_exported_bundles_import_to_the_same_transfers_and_times(tmp_path, spec, kind):
    topology = tacos.from_spec(spec)
    original = tacos.synthesize(topology, Collective(kind, tuple(topology.npus), 2, 2**20), seed=1)
    imported = import_schedule(
        export_bundle(original, tmp_path / "b"), collective=kind, topology=topology
    )
    assert imported.collective == original.collective
    assert moves(imported) == moves(original)
    assert imported.meta["chunks_from"] == "tacos_chunk"
    assert tacos.verify(imported).ok
    if not topology.num_switches:
        # Each link keeps the schedule's order (sends wait for the previous send on their
        # link). Through a switch the traces fix only the uplink order; the downlink serves
        # messages as they arrive, as ASTRA-sim's does, so times may differ there.
        assert imported.collective_time_us == pytest.approx(original.collective_time_us)


@pytest.mark.parametrize("kind", [k for k in CollectiveKind if k.rooted])
def test_a_root_on_the_last_rank_survives_the_round_trip(tmp_path, kind):
    # Gather and Scatter never move the root's own chunks: here the highest chunk ids
    topology = tacos.from_spec("ring:4")
    original = tacos.synthesize(topology, Collective(kind, (0, 1, 2, 3), 4, 2**20, root=3))
    imported = import_schedule(export_bundle(original, tmp_path / "b"), collective=kind)
    assert imported.collective == original.collective
    assert (imported.collective.root, imported.collective.chunks_per_rank) == (3, 4)
    assert tacos.verify(imported).ok


@pytest.mark.parametrize("kind", [CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE])
def test_a_switch_schedule_imported_without_its_switch_still_verifies(tmp_path, kind):
    topology = tacos.from_spec("switch:4")
    original = tacos.synthesize(topology, Collective(kind, tuple(topology.npus), 1, 2**20))
    imported = import_schedule(export_bundle(original, tmp_path / "b"), collective=kind)
    assert imported.topology.name == "fully-connected:4"
    assert len(imported.transfers) == len(original.transfers) // 2  # one direct hop per message
    assert tacos.verify(imported).ok


def test_our_traces_name_their_collective(tmp_path):
    topology = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topology, Collective(CollectiveKind.GATHER, (0, 1, 2, 3)))
    imported = import_schedule(export_bundle(schedule, tmp_path / "b"))
    assert imported.collective.kind is CollectiveKind.GATHER


def test_traces_that_do_not_name_their_collective_need_one(tmp_path):
    topology = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topology, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    prefix = export_bundle(schedule, tmp_path / "b")
    for path in prefix.parent.glob("*.et"):
        _, nodes = read_et(path)
        write_et(path, GlobalMetadata(version=CHAKRA_VERSION), nodes)
    with pytest.raises(TacosError, match="no 'collective' attribute .*; pass --collective"):
        import_schedule(prefix)


# --------------------------------------------------- lineage on hand-made traces
def comm(node_id: int, send: bool, peer: int, deps=(), size: int = 4096) -> Node:
    """A send or receive as the MSCCL-to-Chakra converter writes it (no tacos_chunk)."""
    return Node(
        id=node_id,
        name=f"{'send' if send else 'recv'} {node_id}",
        type=NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE,
        data_deps=list(deps),
        attr=[attr("comm_dst" if send else "comm_src", peer), attr("comm_size", size),
              attr("comm_tag", 0)],
    )  # fmt: skip


def reduction(node_id: int, recv: int) -> Node:
    return Node(id=node_id, name=f"reduce {recv}", type=NodeType.COMP_NODE, data_deps=[recv])


def write_set(folder: Path, collective: str, traces: list[list[Node]]) -> Path:
    metadata = GlobalMetadata(version=CHAKRA_VERSION, attr=[attr("collective", collective)])
    for rank, nodes in enumerate(traces):
        write_et(folder / f"hand.{rank}.et", metadata, nodes)
    return folder / "hand"


def ring_all_gather(ranks: int) -> list[list[Node]]:
    """Each rank sends its chunk right, then forwards what it received, in one chain."""
    traces = []
    for r in range(ranks):
        right, left = (r + 1) % ranks, (r - 1) % ranks
        nodes = [comm(0, True, right)]
        for step in range(ranks - 1):
            nodes.append(comm(len(nodes), False, left, deps=[len(nodes) - 1]))
            if step < ranks - 2:
                nodes.append(comm(len(nodes), True, right, deps=[len(nodes) - 1]))
        traces.append(nodes)
    return traces


def test_a_hand_written_ring_all_gather_is_recognised_by_lineage(tmp_path):
    schedule = import_schedule(write_set(tmp_path, "allgather", ring_all_gather(4)))
    assert schedule.collective == Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3), 1, 4096)
    assert schedule.meta["chunks_from"] == "data lineage"
    assert [(t.src, t.dst) for t in schedule.transfers if t.chunk == 2] == [(2, 3), (3, 0), (0, 1)]
    assert tacos.verify(schedule).ok


def test_a_chain_reduce_finds_its_root_where_the_chunk_ends(tmp_path):
    # 0 -> 1 -> 2 -> 3: each rank adds its contribution and passes the chunk on
    traces = [
        [comm(0, True, 1)],
        [comm(0, False, 0), reduction(1, 0), comm(2, True, 2, deps=[1])],
        [comm(0, False, 1), reduction(1, 0), comm(2, True, 3, deps=[1])],
        [comm(0, False, 2), reduction(1, 0)],
    ]
    schedule = import_schedule(write_set(tmp_path, "reduce", traces))
    assert (schedule.collective.root, schedule.collective.num_chunks) == (3, 1)
    assert [t.op for t in schedule.transfers] == [Op.REDUCE] * 3
    assert tacos.verify(schedule).ok


def test_a_forwarded_copy_mistaken_for_a_reduction_fails_verification(tmp_path):
    # rank 1 copies chunk 0 from rank 0 but never adds its own data before passing it on
    traces = [
        [comm(0, True, 1)],
        [comm(0, False, 0), comm(1, True, 2, deps=[0])],
        [comm(0, False, 1), reduction(1, 0)],
    ]
    report = tacos.verify(import_schedule(write_set(tmp_path, "reduce", traces)))
    assert not report.ok
    assert "missing contributions of rank(s) [1]" in report.errors[0]


def recursive_doubling_all_gather(ranks: int, size: int = 4096) -> list[list[Node]]:
    """Step k: send everything held so far (2^k chunks) to the partner 2^k away, as
    msccl-tools' recursive doubling (and ASTRA-sim) run it: messages of growing size."""
    traces = []
    for r in range(ranks):
        nodes: list[Node] = []
        received: list[int] = []
        distance = 1
        while distance < ranks:
            peer = r ^ distance
            nodes.append(comm(len(nodes), True, peer, deps=received, size=size * distance))
            nodes.append(comm(len(nodes), False, peer, size=size * distance))
            received.append(len(nodes) - 1)
            distance *= 2
        traces.append(nodes)
    return traces


def test_messages_of_different_sizes_import_as_several_chunks_each(tmp_path):
    prefix = write_set(tmp_path, "allgather", recursive_doubling_all_gather(8))
    schedule = import_schedule(prefix)
    spec = schedule.collective
    assert spec.chunk_bytes == 4096 and spec.chunks_per_rank == 1
    # 8 ranks x (1 + 2 + 4) chunks, each message a train of chunks on its link
    assert len(schedule.transfers) == 8 * 7
    assert tacos.verify(schedule).ok, tacos.verify(schedule).summary()
    # each message's chunks cross back to back once all its data is there, the step
    # after the previous: 1 + 2 + 4 chunk times; on pipelined links, as ASTRA-sim runs
    # messages: three latencies and 7 chunks' serialization
    serialization = 4096 / (50 * 2**30) * 1e6
    assert schedule.collective_time_us == pytest.approx(7 * (0.5 + serialization))
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    pipelined = import_schedule(prefix, cost=CostChoice(link_model="pipelined"))
    assert pipelined.collective_time_us == pytest.approx(3 * 0.5 + 7 * serialization)


def test_a_message_of_part_of_what_it_received_is_a_guess(tmp_path):
    # rank 0 forwards 4096 of the 8192 bytes it received: which half is unknown
    traces = [[comm(0, False, 1, size=8192), comm(1, True, 1, deps=[0])],
              [comm(0, True, 0, size=8192), comm(1, False, 0)]]  # fmt: skip
    schedule = import_schedule(write_set(tmp_path, "allgather", traces))
    assert any("which part is unknown" in g for g in schedule.meta["lineage_guesses"])


def test_a_send_claiming_another_ranks_source_is_refused(tmp_path):
    traces = [[comm(0, True, 1)], [comm(0, False, 0)]]
    traces[0][0].attr.append(attr("comm_src", 1))
    with pytest.raises(TacosError, match=r"hand\.0\.et: node 0: comm_src is 1, but this is rank 0"):
        import_schedule(write_set(tmp_path, "allgather", traces))


def test_imported_times_follow_the_given_links(tmp_path):
    slow = Topology(2, (Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)), name="slow")
    traces = [[comm(0, True, 1), comm(1, False, 1)], [comm(0, False, 0), comm(1, True, 0)]]
    schedule = import_schedule(write_set(tmp_path, "allgather", traces), topology=slow)
    per_message = 10.0 + 4096 / 2**30 * 1e6
    assert [(t.start, t.end) for t in schedule.transfers] == [(0.0, per_message)] * 2


CONVERTER_DIR = Path(__file__).parent / "data" / "astra-sim" / "converter"
"""Real output of ASTRA-sim's collectiveapi MSCCL-to-Chakra converter (see tests/data)."""


def test_converter_all_pairs_all_gather_verifies_once_a_ranks_own_sends_are_one_chunk():
    schedule = import_schedule(CONVERTER_DIR / "ag_allpairs_8_LL128")
    assert schedule.collective.num_chunks == 8  # one per rank, sent to each of 7 peers
    assert tacos.verify(schedule).ok
    assert "the k-th to each peer is taken as one chunk" in schedule.meta["lineage_guesses"][0]


def test_converter_recursive_doubling_sends_messages_of_1_2_and_4_chunks():
    schedule = import_schedule(CONVERTER_DIR / "ag_recdbl_8")
    assert schedule.collective.chunk_bytes == 2**20 and schedule.collective.num_chunks == 8
    assert len(schedule.transfers) == 8 * (1 + 2 + 4)
    assert tacos.verify(schedule).ok
    # ASTRA-sim (both builds) runs these traces on a FullyConnected 8 in 138,218 ns
    pipelined = import_schedule(CONVERTER_DIR / "ag_recdbl_8", cost=CostChoice("pipelined"))
    assert pipelined.collective_time_us * 1000 == pytest.approx(138_218, abs=5)


def test_converter_traces_without_reductions_cannot_tell_an_all_reduce(capsys):
    prefix = CONVERTER_DIR / "ar_1step_4_LL"  # the converter drops local "re" reductions
    code = main(["verify", "--format", "chakra", str(prefix), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == EXIT_CANNOT_TELL == 3
    assert data["verdict"] == "cannot tell" and not data["verified"]
    assert main(["verify", "--format", "chakra", str(prefix)]) == 3
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "CANNOT TELL" in out and "records no reduction" in out


def test_traces_labelled_with_their_chunks_still_fail_plainly(tmp_path, capsys):
    topology = tacos.from_spec("ring:4")
    schedule = tacos.synthesize(topology, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)))
    chakra_export.export([schedule], tmp_path / "b")
    code = main(["verify", "--format", "chakra", str(tmp_path / "b/et/tacos"),
                 "--collective", "reduce-scatter"])  # fmt: skip
    assert code == 1 and "FAILED" in capsys.readouterr().out


def test_reductions_are_written_as_compute_nodes_of_whole_microseconds(tmp_path):
    topology = tacos.from_spec("ring:4").with_cost(CostModel("paper", 100.0))
    schedule = tacos.synthesize(topology, Collective(CollectiveKind.ALL_REDUCE, (0, 1, 2, 3)))
    chakra_export.export([schedule], tmp_path / "b")
    _, nodes = read_et(tmp_path / "b" / "et" / "tacos.0.et")
    durations = {n.duration_micros for n in nodes if n.type == NodeType.COMP_NODE}
    assert durations == {round(2**20 / (100 * 2**30) * 1e6)} == {10}  # 9.77 us, rounded
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    traced = tacos.simulate(schedule, cost=CostModel("paper", 2**20 / 10e-6 / 2**30))
    assert manifest["predicted_time_ns"]["custom"] == traced.collective_time_us * 1000
    back = import_schedule(tmp_path / "b" / "et" / "tacos", topology=tacos.from_spec("ring:4"))
    assert back.topology.cost.reduce_us(2**20) == pytest.approx(10.0)


@pytest.mark.parametrize("kind", list(CollectiveKind), ids=str)
@pytest.mark.parametrize("spec", ["ring:6", "switch:5", "torus2d:3x3"])
def test_unlabelled_traces_of_correct_schedules_never_fail(tmp_path, spec, kind):
    """Without tacos_chunk labels, lineage verifies them or cannot tell; never a false FAILED."""
    topology = tacos.from_spec(spec)
    schedule = tacos.synthesize(topology, Collective(kind, tuple(topology.npus), 2, 4096), seed=1)
    for rank, (metadata, nodes) in chakra_export.rank_traces(schedule).items():
        for node in nodes:
            kept = [a for a in node.attr if a.name != "tacos_chunk"]
            del node.attr[:]
            node.attr.extend(kept)
        write_et(tmp_path / f"bare.{rank}.et", metadata, nodes)
    imported = import_schedule(tmp_path / "bare", topology=topology)
    assert tacos.verify(imported).ok or imported.meta["lineage_guesses"]


def test_reductions_of_a_thousand_seconds_still_verify(tmp_path):
    """At 7e9 us a relative rounding slack of 1e-9 is 7 us: it had put an arrival before
    departures that came first, and the reference All-Reduce failed its own check."""
    from tacos.formats.chakra import read_et, write_et
    from tacos.importers.chakra import import_schedule

    for rank in range(8):
        metadata, nodes = read_et(f"{CUSTOM}.{rank}.et")
        for node in nodes:
            if node.type == 4:  # COMP_NODE: the reductions
                node.duration_micros = 10**9
        write_et(tmp_path / f"slow.{rank}.et", metadata, nodes)
    schedule = import_schedule(tmp_path / "slow")
    assert schedule.collective_time_us > 7e9
    report = tacos.verify(schedule)
    assert report.ok, report.summary()
