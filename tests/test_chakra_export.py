"""Chakra export: traces that reproduce the schedule, a complete and deterministic bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tacos
from tacos.cli import export_main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.exporters import chakra
from tacos.exporters.astra_config import analytical_network
from tacos.formats.chakra import NodeType, get_attr, read_et
from tacos.importers.chakra import load_et_set, match_messages
from tacos.topology import Link, Topology

KINDS = list(CollectiveKind)


def synthesized(spec: str, kind: CollectiveKind, chunks: int = 1) -> tacos.Schedule:
    topo = tacos.from_spec(spec)
    return tacos.synthesize(topo, Collective(kind, tuple(topo.npus), chunks, 2**20), seed=4)


def export(schedule: tacos.Schedule, out: Path) -> Path:
    chakra.export([schedule], out)
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("spec", ["ring:8", "torus2d:3x3", "fully-connected:5"])
def test_exported_traces_reproduce_every_transfer_with_one_matching_receive(tmp_path, spec, kind):
    schedule = synthesized(spec, kind, chunks=2)
    et_set = load_et_set(export(schedule, tmp_path / "b") / "et" / "tacos")
    messages = match_messages(et_set)
    assert sorted((m.tag, m.src, m.dst) for m in messages) == [
        (i, t.src, t.dst) for i, t in enumerate(schedule.transfers)
    ]
    assert {m.size for m in messages} == {2**20}


@pytest.mark.parametrize("kind", KINDS)
def test_send_dependencies_are_the_schedule_dependencies(tmp_path, kind):
    schedule = synthesized("hypercube:3", kind, chunks=2)
    et_set = load_et_set(export(schedule, tmp_path / "b") / "et" / "tacos")
    for rank, (_, nodes) in et_set.traces.items():
        by_id = {node.id: node for node in nodes}
        for node in nodes:
            if node.type == NodeType.COMM_SEND_NODE:
                tag = get_attr(node, "comm_tag")
                fed_by = set().union(*(transfers_feeding(by_id, d) for d in node.data_deps))
                assert fed_by == set(schedule.transfers[tag].deps), (rank, tag)


def transfers_feeding(by_id: dict, node_id: int) -> set[int]:
    """The transfers (tags) whose received data a node's data dependency stands for."""
    node = by_id[node_id]
    if node.type == NodeType.COMM_RECV_NODE:
        return {get_attr(node, "comm_tag")}
    if node.type == NodeType.COMP_NODE:  # a reduction after its receive
        return set().union(*(transfers_feeding(by_id, d) for d in node.data_deps))
    return set()  # an earlier send on the same link only orders the link


def test_reductions_become_compute_nodes_after_their_receive(tmp_path):
    schedule = synthesized("ring:4", CollectiveKind.REDUCE_SCATTER)
    _, nodes = read_et(export(schedule, tmp_path / "b") / "et" / "tacos.0.et")
    comps = [n for n in nodes if n.type == NodeType.COMP_NODE]
    recvs = {n.id for n in nodes if n.type == NodeType.COMM_RECV_NODE}
    assert comps and all(list(c.data_deps)[0] in recvs for c in comps)


def test_consecutive_sends_on_a_link_are_chained_in_schedule_order(tmp_path):
    schedule = synthesized("ring:4", CollectiveKind.ALL_GATHER, chunks=3)
    _, nodes = read_et(export(schedule, tmp_path / "b") / "et" / "tacos.0.et")
    sends = [n for n in nodes if n.type == NodeType.COMM_SEND_NODE]
    by_peer: dict[int, list] = {}
    for send in sends:
        by_peer.setdefault(get_attr(send, "comm_dst"), []).append(send)
    for chain in by_peer.values():
        for earlier, later in zip(chain, chain[1:], strict=False):
            assert earlier.id in later.data_deps


def test_attributes_have_the_value_types_astra_sim_reads(tmp_path):
    schedule = synthesized("ring:4", CollectiveKind.ALL_REDUCE)
    _, nodes = read_et(export(schedule, tmp_path / "b") / "et" / "tacos.1.et")
    send = next(n for n in nodes if n.type == NodeType.COMM_SEND_NODE)
    members = {a.name: a.WhichOneof("value") for a in send.attr}
    assert members == {
        "is_cpu_op": "bool_val",
        "comm_src": "int32_val",
        "comm_dst": "int32_val",
        "comm_tag": "int32_val",
        "comm_size": "int64_val",
        "tacos_chunk": "int64_val",
    }


def test_idle_npus_get_a_single_zero_length_compute_node(tmp_path):
    topo = tacos.from_spec("ring:6")
    schedule = tacos.synthesize(topo, Collective(CollectiveKind.ALL_GATHER, (0, 1), 1, 4096))
    bundle = export(schedule, tmp_path / "b")
    _, nodes = read_et(bundle / "et" / "tacos.4.et")
    assert [(n.type, n.duration_micros) for n in nodes] == [(NodeType.COMP_NODE, 0)]


@pytest.mark.parametrize(
    ("kind", "key", "comm_type", "route"),
    [
        (CollectiveKind.ALL_GATHER, "all-gather-implementation-custom", 2, "custom"),
        (CollectiveKind.ALL_REDUCE, "all-reduce-implementation-custom", 0, "custom"),
        (CollectiveKind.REDUCE_SCATTER, "reduce-scatter-implementation-custom", 7, "custom"),
        (CollectiveKind.ALL_TO_ALL, "all-to-all-implementation-custom", 6, "custom"),
        (CollectiveKind.GATHER, "all-reduce-implementation-custom", 0, "p2p"),
    ],
)
def test_bundle_wires_the_custom_key_and_workload(tmp_path, kind, key, comm_type, route):
    bundle = export(synthesized("ring:8", kind), tmp_path / "b")
    system = json.loads((bundle / "system.json").read_text())
    assert system[key] == ["et/tacos"] and system["preferred-dataset-splits"] == 1
    assert not any(
        k.endswith("-custom") for k in json.loads((bundle / "system_p2p.json").read_text())
    )
    _, nodes = read_et(bundle / "workload" / "collective.3.et")
    assert [n.type for n in nodes] == [NodeType.COMM_COLL_NODE]
    assert get_attr(nodes[0], "comm_type") == comm_type
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["default_route"] == route
    assert f'route="${{1:-{route}}}"' in (bundle / "run.sh").read_text()
    assert json.loads((bundle / "memory.json").read_text()) == {
        "memory-type": "NO_MEMORY_EXPANSION"
    }


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        (tacos.from_spec("ring:8", latency_us=0.5), ("Ring", 8, 50.0, 500.0)),
        (tacos.from_spec("fully-connected:4", bandwidth_GBps=400), ("FullyConnected", 4, 400, 500)),
        (
            Topology(
                3,
                tuple(
                    Link(a, b, 100, 1) for a, b in [(0, 3), (3, 0), (1, 3), (3, 1), (2, 3), (3, 2)]
                ),
                1,
            ),
            ("Switch", 3, 100, 1000),
        ),  # fmt: skip
    ],
)
def test_one_dimensional_uniform_topologies_map_to_astra_sim_networks(topology, expected):
    net = analytical_network(topology)
    assert net is not None
    assert (net.kind, net.npus, net.bandwidth_GBps, net.latency_ns) == expected


@pytest.mark.parametrize("spec", ["mesh2d:3x3", "dgx:2x2"])
def test_other_topologies_have_no_analytical_network_and_say_so(tmp_path, spec, capsys):
    code = export_main(["--format", "chakra", "--topology", spec, "-o", str(tmp_path / "b")])
    assert code == 0
    assert not (tmp_path / "b" / "network.yml").exists()
    assert "ASTRA_SIM_NETWORK" in capsys.readouterr().out


def test_heterogeneous_ring_has_no_analytical_network():
    topo = tacos.from_spec("ring:4")
    links = (Link(0, 1, 10, 0.5), *topo.links[1:])
    assert analytical_network(Topology(4, links)) is None


def test_summary_line_counts_files_ranks_nodes_and_predicted_time(tmp_path, capsys):
    code = export_main(["--format", "chakra", "--topology", "ring:4", "-o", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert code == 0
    assert "(chakra): 4 ranks, " in out and " nodes, " in out and "predicted collective time" in out


def test_same_command_twice_gives_byte_identical_bundles(tmp_path, capsys):
    for name in ("a", "b"):
        export_main(["--format", "chakra", "--topology", "torus2d:3x3", "--collective",
                     "all-reduce", "--seed", "9", "-o", str(tmp_path / name)])  # fmt: skip

    def contents(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert contents(tmp_path / "a") == contents(tmp_path / "b")


def test_a_failure_while_writing_leaves_no_directory(tmp_path, monkeypatch):
    calls = []

    def failing_write_et(path, meta, nodes):
        calls.append(path)
        if len(calls) == 5:
            raise TacosError("disk full")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(b"")

    monkeypatch.setattr(chakra, "write_et", failing_write_et)
    with pytest.raises(TacosError, match="disk full"):
        export(synthesized("ring:8", CollectiveKind.ALL_GATHER), tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_bundle_is_replaced_not_merged(tmp_path):
    out = tmp_path / "b"
    export(synthesized("ring:8", CollectiveKind.ALL_GATHER), out)
    export(synthesized("ring:4", CollectiveKind.ALL_GATHER), out)
    assert sorted(p.name for p in (out / "et").iterdir()) == [f"tacos.{r}.et" for r in range(4)]


def test_a_bundle_of_tenants_keeps_each_verifiable_and_is_not_read_as_one(tmp_path, capsys):
    """Tenants' traffic shares one set of traces (ASTRA-sim runs it together); its
    schedule.json is the tenants' schedule set, each verifying, and the traces say they
    hold several collectives, so reading them back as one is refused rather than failed."""
    from tacos.cli import main

    out = tmp_path / "bundle"
    assert export_main(["--format", "chakra", "--topology", "dgx:2x4", "--collective",
                        "all-reduce", "--groups", "0-3;4-7", "-o", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["verify", str(out / "schedule.json")]) == 0
    text = capsys.readouterr().out
    assert "tenant 0: OK" in text and "tenant 1: OK" in text, text
    assert main(["verify", "--format", "chakra", str(out / "et" / "tacos")]) == 2
    err = capsys.readouterr().err
    assert "2 tenants' collectives" in err and err.count("\n") == 1, err
