"""Topology: generators, link model, files, networkx, validation."""

import json
import re

import networkx as nx
import pytest

from tacos.errors import TacosError
from tacos.linkmodel import CostModel
from tacos.topology import (
    Link,
    Structure,
    Topology,
    from_spec,
    load_topology,
    read_csv,
    read_json,
    write_csv,
)


@pytest.mark.parametrize(
    ("spec", "npus", "links"),
    [
        ("ring:8", 8, 16),
        ("ring:2", 2, 2),
        ("fully-connected:8", 8, 56),
        ("mesh2d:4x4", 16, 48),
        ("torus2d:4x4", 16, 64),
        ("mesh3d:2x2x4", 16, 56),
        ("torus3d:4x4x4", 64, 384),
        ("hypercube:3", 8, 24),
        ("mesh:3x3", 9, 24),
    ],
)
def test_generators_build_the_expected_number_of_npus_and_directed_links(spec, npus, links):
    topo = from_spec(spec)
    assert (topo.num_npus, len(topo.links), topo.num_switches) == (npus, links, 0)


def test_generated_links_use_the_default_bandwidth_and_latency_unless_overridden():
    assert {(lk.bandwidth_GBps, lk.latency_us) for lk in from_spec("ring:4").links} == {(50.0, 0.5)}
    custom = from_spec("ring:4", bandwidth_GBps=100, latency_us=2)
    assert {(lk.bandwidth_GBps, lk.latency_us) for lk in custom.links} == {(100, 2)}


def test_torus_neighbours_wrap_around_and_mesh_neighbours_do_not():
    torus, mesh = from_spec("torus2d:4x4"), from_spec("mesh2d:4x4")
    assert (0, 3) in {(lk.src, lk.dst) for lk in torus.links}
    assert (0, 3) not in {(lk.src, lk.dst) for lk in mesh.links}
    assert (0, 12) in {(lk.src, lk.dst) for lk in torus.links}  # dimension 1 wraps too


def test_hypercube_links_join_ids_that_differ_in_one_bit():
    topo = from_spec("hypercube:4")
    assert all(bin(lk.src ^ lk.dst).count("1") == 1 for lk in topo.links)


def test_transfer_time_is_latency_plus_size_over_bandwidth_with_binary_gigabytes():
    link = Link(0, 1, bandwidth_GBps=50.0, latency_us=0.5)
    assert link.transfer_time_us(2**20) == 0.5 + 2**20 / (50 * 2**30) * 1e6 == 20.03125


def test_transposed_topology_reverses_every_link_and_keeps_ids():
    topo = read_csv("src,dst,bandwidth_GBps,latency_us\n0,1,10,1\n1,2,20,2\n2,0,30,3\n")
    back = topo.transposed()
    for a, b in zip(topo.links, back.links, strict=True):
        assert (a.src, a.dst, a.bandwidth_GBps, a.latency_us) == (
            b.dst,
            b.src,
            b.bandwidth_GBps,
            b.latency_us,
        )


def test_csv_edge_list_round_trips_and_keeps_asymmetric_links():
    text = "src,dst,bandwidth_GBps,latency_us\n0,1,50,0.5\n1,0,25,1.25\n1,2,50,0.5\n2,1,50,0.5\n"
    topo = read_csv(text)
    assert topo.num_npus == 3
    assert topo.links[1] == Link(1, 0, 25.0, 1.25)
    assert read_csv(write_csv(topo)).links == topo.links


def test_json_form_round_trips():
    topo = from_spec("torus2d:2x3", bandwidth_GBps=12.5, latency_us=0.25)
    again = read_json(json.dumps(topo.to_dict()))
    assert (again.num_npus, again.links, again.name) == (topo.num_npus, topo.links, topo.name)


@pytest.mark.parametrize(
    ("spec", "structure"),
    [
        ("ring:8", Structure("ring")),
        ("fully-connected:4", Structure("fully-connected")),
        ("switch:4", Structure("switch")),
        ("mesh2d:4x2", Structure("mesh", (4, 2))),
        ("torus3d:2x3x4", Structure("torus", (2, 3, 4))),
        ("torus:5", Structure("torus", (5,))),
        ("hypercube:3", Structure("hypercube", (2, 2, 2))),
        ("fat-tree:4", Structure("fat-tree")),
        ("dgx:2x4", Structure("dgx")),
        ("xgmi:2x4", Structure("xgmi")),
    ],
)
def test_a_generated_topology_carries_its_structure_through_json(spec, structure):
    topo = from_spec(spec)
    assert topo.structure == structure
    assert read_json(json.dumps(topo.to_dict())).structure == structure


def test_files_without_a_structure_load_as_having_none():
    data = from_spec("torus2d:2x3").to_dict()
    del data["structure"]
    assert read_json(json.dumps(data)).structure is None
    assert "structure" not in read_json(json.dumps(data)).to_dict()


@pytest.mark.parametrize(
    ("structure", "message"),
    [
        ("torus", "expected {"),
        ({"kind": "torus", "dims": [2, 2]}, "do not multiply to its 6 NPUs"),
        ({"kind": "torus", "dims": [0, 6]}, "sizes of at least 1"),
        ({"kind": "torus", "sizes": [2, 3]}, "unknown field 'sizes'"),
    ],
)
def test_a_bad_structure_is_one_line_error(structure, message):
    data = from_spec("torus2d:2x3").to_dict() | {"structure": structure}
    with pytest.raises(TacosError, match=re.escape(message)):
        read_json(json.dumps(data))


def test_networkx_round_trip_keeps_links_attributes_and_switch_kinds():
    topo = Topology(2, (Link(0, 2, 10, 1), Link(2, 1, 20, 2), Link(1, 0, 30, 3)), num_switches=1)
    graph = topo.to_networkx()
    assert graph.nodes[2]["kind"] == "switch"
    again = Topology.from_networkx(graph)
    assert (again.num_npus, again.num_switches) == (2, 1)
    assert sorted(again.links, key=lambda lk: (lk.src, lk.dst)) == sorted(
        topo.links, key=lambda lk: (lk.src, lk.dst)
    )


def test_undirected_networkx_graph_becomes_two_links_per_edge():
    topo = Topology.from_networkx(nx.cycle_graph(5), bandwidth_GBps=25)
    assert len(topo.links) == 10 and {lk.bandwidth_GBps for lk in topo.links} == {25}


def test_load_topology_reads_csv_and_json_files(tmp_path):
    csv_file = tmp_path / "pair.csv"
    csv_file.write_text("src,dst,bandwidth_GBps,latency_us\n0,1,50,0.5\n1,0,50,0.5\n")
    json_file = tmp_path / "ring.json"
    json_file.write_text(json.dumps(from_spec("ring:5").to_dict()))
    assert load_topology(str(csv_file)).num_npus == 2
    assert load_topology(str(json_file)).num_npus == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c,d\n0,1,50,0.5\n", "line 1: the header must be"),
        ("src,dst,bandwidth_GBps,latency_us\n0,1,fast,0.5\n", "line 2: bandwidth_GBps: 'fast'"),
        ("src,dst,bandwidth_GBps,latency_us\n0,1,50\n", "line 2: expected 4 fields"),
        (
            "src,dst,bandwidth_GBps,latency_us\n0,1,0,0.5\n",
            "line 2: bandwidth_GBps must be positive",
        ),
        ("src,dst,bandwidth_GBps,latency_us\n0,1,-5,0.5\n", "bandwidth_GBps must be positive"),
        ("src,dst,bandwidth_GBps,latency_us\n0,1,50,-1\n", "latency_us must be >= 0"),
        ("src,dst,bandwidth_GBps,latency_us\n0,2,50,1\n2,0,50,1\n", "1 has no link"),
    ],
)
def test_malformed_csv_is_rejected_with_the_line_and_field(text, message):
    with pytest.raises(TacosError, match=message):
        read_csv(text, "bad.csv")


def test_malformed_json_names_line_and_column():
    with pytest.raises(TacosError, match=r"t.json: line 2 column"):
        read_json('{"npus": 2,\n "links": [}', "t.json")


def test_unsupported_topology_version_is_rejected():
    data = from_spec("ring:3").to_dict() | {"version": 99}
    with pytest.raises(TacosError, match="version 99 is not supported"):
        read_json(json.dumps(data), "t.json")


@pytest.mark.parametrize(
    "spec", ["ring", "ring:1", "star:5", "mesh2d:4", "torus3d:2x2", "hypercube:0", "ring:x"]
)
def test_unknown_or_malformed_specs_are_rejected(spec):
    with pytest.raises(TacosError):
        from_spec(spec)


def test_disconnected_topology_names_an_unreachable_pair(tmp_path):
    path = tmp_path / "split.csv"
    path.write_text("src,dst,bandwidth_GBps,latency_us\n0,1,50,1\n1,0,50,1\n2,3,50,1\n3,2,50,1\n")
    with pytest.raises(TacosError, match="NPU 2 cannot be reached from NPU 0"):
        load_topology(str(path))


def test_one_way_reachability_is_not_enough():
    topo = read_csv("src,dst,bandwidth_GBps,latency_us\n0,1,50,1\n1,2,50,1\n2,1,50,1\n")
    with pytest.raises(TacosError, match="NPU 0 cannot be reached from NPU 1"):
        topo.check_connected()


def test_a_group_seen_alone_keeps_the_networks_cost_model():
    cost = CostModel(link_model="pipelined", reduce_bandwidth_GBps=100.0)
    ring = from_spec("ring:8").with_cost(cost)
    assert ring.members_only((0, 2, 4, 6)).cost == cost
