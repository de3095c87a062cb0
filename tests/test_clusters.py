"""Cluster generators: the shapes people train on, laid out as the docs of tacos.clusters say."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from tacos.errors import TacosError
from tacos.topology import Topology, from_spec


def cut_bandwidth_GBps(topo: Topology, inside: set[int]) -> float:
    return sum(lk.bandwidth_GBps for lk in topo.links if lk.src in inside and lk.dst not in inside)


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_a_fat_tree_has_the_textbook_counts_and_every_switch_uses_k_ports(k):
    topo = from_spec(f"fat-tree:{k}")
    assert (topo.num_npus, topo.num_switches) == (k**3 // 4, 5 * k * k // 4)
    topo.check_connected()
    for switch in range(topo.num_npus, topo.num_nodes):
        assert len(topo.out_links[switch]) == len(topo.in_links[switch]) == k
    for npu in topo.npus:
        assert len(topo.out_links[npu]) == 1


def test_a_dgx_cluster_puts_each_gpu_on_its_nvswitch_its_nic_and_its_rail():
    topo = from_spec("dgx:4x8,nvlink=400,pcie=64,nic=50")
    nodes, gpus = 4, 8
    npus = nodes * gpus
    leaves = 8  # one leaf per rail: 4 servers fit on one leaf
    assert (topo.num_npus, topo.num_switches) == (npus, npus + nodes + leaves + 4)
    topo.check_connected()
    graph = topo.to_networkx()
    for gpu in topo.npus:
        server, local = divmod(gpu, gpus)
        neighbours = set(graph.successors(gpu))
        assert neighbours == {npus + gpu, 2 * npus + server}  # its NIC and its NVSwitch
        (leaf,) = set(graph.successors(npus + gpu)) - {gpu}
        assert leaf == 2 * npus + nodes + local  # rail = local GPU index
    speeds = {(lk.src, lk.dst): lk.bandwidth_GBps for lk in topo.links}
    assert speeds[0, 2 * npus] == 400 and speeds[0, npus] == 64 and speeds[npus, 2 * npus + 4] == 50


@pytest.mark.parametrize("oversubscription", [1, 2, 4])
def test_oversubscription_divides_the_spine_tier(oversubscription):
    topo = from_spec(f"dgx:64x8,nodes-per-leaf=16,oversubscription={oversubscription}")
    npus, nodes = 512, 64
    first_leaf = 2 * npus + nodes
    leaves, spines = 8 * 4, 4
    assert topo.num_switches == npus + nodes + leaves + spines
    for leaf in range(first_leaf, first_leaf + leaves):
        down = cut_bandwidth_GBps(topo, {leaf}) - sum(
            lk.bandwidth_GBps for lk in topo.links if lk.src == leaf and lk.dst >= first_leaf
        )
        up = sum(lk.bandwidth_GBps for lk in topo.links if lk.src == leaf and lk.dst >= first_leaf)
        assert down == pytest.approx(16 * 50)
        assert up == pytest.approx(down / oversubscription)


def test_rails_can_be_fewer_than_gpus():
    topo = from_spec("dgx:2x8,rails=2")
    npus = 16
    first_leaf = 2 * npus + 2
    assert topo.num_switches == npus + 2 + 2 + 4
    leaf_of = {lk.src - npus: lk.dst - first_leaf for lk in topo.links
               if npus <= lk.src < 2 * npus and lk.dst >= first_leaf}  # fmt: skip
    assert [leaf_of[g] for g in range(8)] == [0, 1] * 4


def test_an_xgmi_system_meshes_gpus_inside_a_server_and_shares_one_switch():
    topo = from_spec("xgmi:2x8")
    npus = 16
    assert (topo.num_npus, topo.num_switches) == (npus, npus + 1)
    topo.check_connected()
    graph = nx.DiGraph((lk.src, lk.dst) for lk in topo.links)
    for gpu in topo.npus:
        server = gpu // 8
        peers = {p for p in graph.successors(gpu) if p < npus}
        assert peers == set(range(server * 8, server * 8 + 8)) - {gpu}
        assert set(graph.successors(npus + gpu)) == {gpu, 2 * npus}


@pytest.mark.parametrize("spec", ["fat-tree:4", "dgx:4x8,oversubscription=2", "xgmi:2x4"])
def test_networkx_round_trip_keeps_npus_switches_and_links(spec):
    topo = from_spec(spec)
    back = Topology.from_networkx(topo.to_networkx(), name=topo.name)
    assert (back.num_npus, back.num_switches) == (topo.num_npus, topo.num_switches)
    assert sorted(back.links, key=repr) == sorted(topo.links, key=repr)


@pytest.mark.parametrize("spec, message", [
    ("dgx:0x8", "at least 1 server"),
    ("xgmi:1x1", "at least 1 server"),
    ("dgx:2x8,rails=3", "rails=3 must divide"),
    ("dgx:2x8,rails=2.5", "whole number"),
    ("dgx:2x8,nvlinks=3", "unknown option 'nvlinks'"),
    ("dgx:2x8,nic=0", "nic must be positive"),
    ("dgx:2x8,nic", "must be name=value"),
    ("dgx:2x8,nic=fast", "needs a number"),
    ("dgx:2x8,oversubscription=0.5", "oversubscription must be >= 1"),
    ("dgx:8", "NODESxGPUS"),
    ("fat-tree:5", "even number"),
    ("fat-tree:4,nic=3", "takes no options"),
    ("mesh2d:4xx4", "single x"),
    ("dgx:100000x100", "more than one machine"),
])  # fmt: skip
def test_bad_cluster_specs_are_one_line_errors(spec, message):
    with pytest.raises(TacosError, match=message) as caught:
        from_spec(spec)
    assert "\n" not in str(caught.value)


def test_import_and_bounds_describe_a_cluster_spec(capsys):
    from tacos.cli import main

    assert main(["import", "dgx:2x8,nic=25", "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert (described["npus"], described["switches"], described["links"]) == (16, 30, 160)
    tiers = {(c["bandwidth_GBps"], c["links"]) for c in described["link_classes"]}
    assert tiers == {(400.0, 32), (64.0, 32), (25.0, 32), (12.5, 64)}
    assert main(["bounds", "--topology", "dgx:2x8,nic=25", "--collective", "all-gather",
                 "--json"]) == 0  # fmt: skip
    bounds = json.loads(capsys.readouterr().out)
    # one server's 8 GPUs need the other's 8 MiB each through 8 NICs of 25 GB/s
    assert bounds["throughput_us"] == pytest.approx(8 * 2**20 / (8 * 25 * 2**30) * 1e6)


@pytest.mark.parametrize("argv, message", [
    (["bounds", "--topology", "dgx:0x8"], "at least 1 server"),
    (["bounds", "--topology", "dgx:2x8,rails=3"], "rails=3 must divide"),
    (["import", "xgmi:2x8,pcie=-1"], "finite number >= 0"),
    (["bounds", "--topology", "split.csv"], "disconnected"),
])  # fmt: skip
def test_bad_cluster_input_is_one_line_exit_2(capsys, tmp_path, monkeypatch, argv, message):
    from tacos.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "split.csv").write_text(
        "src,dst,bandwidth_GBps,latency_us\n0,1,50,1\n1,0,50,1\n2,3,50,1\n3,2,50,1\n"
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
