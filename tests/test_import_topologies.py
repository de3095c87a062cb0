"""Topology importers: ASTRA-sim network YAML, ns-3 topology text, htsim fat trees.

Every reference file from the real tools imports with the NPU, switch and link
counts and the per-class bandwidth and latency the tool itself would build.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from paths import REFERENCE_DIR

from tacos.cli import main
from tacos.errors import TacosError
from tacos.exporters.astra_config import analytical_dims, analytical_network
from tacos.formats.astrasim import network_yaml
from tacos.importers.astrasim import read_network
from tacos.importers.htsim import read_topology as read_htsim
from tacos.importers.ns3 import read_topology as read_ns3
from tacos.registry import import_topology, load_topology, reads_topology
from tacos.topology import GIB, Topology, from_spec

NETWORK_DIR = REFERENCE_DIR / "astra-sim" / "network"
pytestmark = pytest.mark.skipif(not NETWORK_DIR.is_dir(), reason="reference files absent")


def gbps(gigabits_per_second: float) -> float:
    """A network rate in GB/s of 2**30 bytes, as a Topology stores it."""
    return gigabits_per_second * 1e9 / 8 / GIB


def classes(topology) -> dict[tuple[float, float], int]:
    """(bandwidth GB/s, latency us) -> number of directed links."""
    return dict(Counter((lk.bandwidth_GBps, lk.latency_us) for lk in topology.links))


def net(**values: str | None) -> str:
    """A network.yml: a ring of 4 at 50 GB/s and 500 ns unless ``values`` says otherwise."""
    lines = {"topology": "[ Ring ]", "npus_count": "[ 4 ]", "bandwidth": "[ 50 ]",
             "latency": "[ 500 ]"} | values  # fmt: skip
    return "".join(f"{key}: {value}\n" for key, value in lines.items() if value is not None)


def neighbours(topology, node: int) -> list[int]:
    return sorted(lk.dst for lk in topology.links if lk.src == node)


# ------------------------------------------------------------ reference files
REFERENCE = [
    # file, NPUs, switches, directed links, {(GB/s, us): links}
    ("analytical/Ring_4npus.yml", 4, 0, 8, {(50.0, 0.5): 8}),
    ("analytical/Ring_8npus.yml", 8, 0, 16, {(50.0, 0.5): 16}),
    ("analytical/Ring_16npus.yml", 16, 0, 32, {(50.0, 0.5): 32}),
    ("analytical/HGX-H100-validated.yml", 8, 1, 16, {(400.0, 0.93625): 16}),
    ("ns3/8nodes_ring_topology.txt", 8, 0, 16, {(gbps(25), 5.0): 16}),
    ("ns3/8_nodes_1_switch_topology.txt", 8, 1, 16, {(gbps(400), 0.5): 16}),
    ("ns3/128_nodes_16_switch_topology.txt", 128, 16, 384,
     {(gbps(200), 5.0): 256, (gbps(200), 12.5): 128}),
    ("htsim/8nodes.topo", 8, 12, 64, {(gbps(200), 1.0): 32, (gbps(100), 1.0): 32}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "npus", "switches", "links", "speeds"), REFERENCE)
def test_every_reference_network_imports_with_its_sizes_and_speeds(
    name, npus, switches, links, speeds
):
    path = NETWORK_DIR / name
    assert reads_topology(path)
    topology = import_topology(path).topology
    assert (topology.num_npus, topology.num_switches, len(topology.links)) == (
        npus,
        switches,
        links,
    )
    assert classes(topology) == speeds
    load_topology(str(path)).check_connected()  # the --topology path accepts it too


def test_gbit_rates_convert_to_binary_gigabytes_per_second():
    assert gbps(400) == pytest.approx(46.566128730773926)
    assert gbps(200) == pytest.approx(23.283064365386963)


def test_analytical_ring_is_bidirectional_neighbours_in_npu_order():
    ring = import_topology(NETWORK_DIR / "analytical/Ring_8npus.yml").topology
    assert neighbours(ring, 0) == [1, 7]
    assert neighbours(ring, 5) == [4, 6]
    assert analytical_network(ring).kind == "Ring"  # exports back as the same network


def test_analytical_switch_is_node_npus_count_with_a_cable_to_every_npu():
    hgx = import_topology(NETWORK_DIR / "analytical/HGX-H100-validated.yml").topology
    assert neighbours(hgx, 8) == list(range(8)) and all(neighbours(hgx, n) == [8] for n in range(8))
    network = analytical_network(hgx)
    assert (network.kind, network.npus, network.bandwidth_GBps) == ("Switch", 8, 400.0)
    assert network.latency_ns == pytest.approx(936.25)


def test_ns3_ring_and_star_cables_become_two_directed_links():
    ring = import_topology(NETWORK_DIR / "ns3/8nodes_ring_topology.txt").topology
    assert neighbours(ring, 0) == [1, 7] and neighbours(ring, 7) == [0, 6]
    star = import_topology(NETWORK_DIR / "ns3/8_nodes_1_switch_topology.txt").topology
    assert neighbours(star, 8) == list(range(8))


def test_ns3_leaf_spine_hangs_16_hosts_off_each_leaf_and_every_leaf_off_every_spine():
    topology = import_topology(NETWORK_DIR / "ns3/128_nodes_16_switch_topology.txt").topology
    assert neighbours(topology, 0) == [128]
    assert neighbours(topology, 128) == list(range(16)) + list(range(136, 144))
    assert neighbours(topology, 136) == list(range(128, 136))


def test_htsim_fat_tree_is_wired_as_htsim_wires_it():
    imported = import_topology(NETWORK_DIR / "htsim/8nodes.topo")
    topology = imported.topology
    # hosts 0-7, ToRs 8-11 (two hosts each), Aggs 12-15 (two per pod), Cores 16-19
    assert [neighbours(topology, host) for host in (0, 1, 2, 7)] == [[8], [8], [9], [11]]
    assert neighbours(topology, 8) == [0, 1, 12, 13]
    assert neighbours(topology, 10) == [4, 5, 14, 15]
    # Agg a reaches Cores a % 2 and a % 2 + 2, over bundles of two 100 Gbps links
    assert neighbours(topology, 12) == [8, 9, 16, 16, 18, 18]
    assert neighbours(topology, 13) == [8, 9, 17, 17, 19, 19]
    assert neighbours(topology, 19) == [13, 13, 15, 15]
    assert {lk.bandwidth_GBps for lk in topology.links if lk.src >= 16} == {gbps(100)}
    assert imported.notes[0].startswith("2 pod(s) of 4 hosts; 4 ToR, 4 Agg, 4 Core switches")


# ------------------------------------------------------- ASTRA-sim YAML rules
THREE_DIMENSIONS = """\
# astra-network-analytical's own multi-dimensional example
topology: [ Ring, FullyConnected, Switch ]
npus_count: [ 2, 8, 4 ]
bandwidth: [ 200.0, 100.0, 50.0 ]  # GB/s
latency: [ 50.0, 500.0, 2000.0 ]  # ns
"""


def test_multi_dimensional_network_numbers_npus_with_dimension_0_fastest():
    topology = read_network(THREE_DIMENSIONS, "3d.yml").topology
    assert (topology.num_npus, topology.num_switches) == (64, 16)
    # 32 rings of 2 (one cable each), 8 fully connected groups of 8, 16 switches of 4
    assert classes(topology) == {(200.0, 0.05): 64, (100.0, 0.5): 448, (50.0, 2.0): 128}
    # ASTRA-sim's comment: NPU 47 has the address [1, 7, 2] in a [2, 8, 4] network
    by_speed = {speed: [lk.dst for lk in topology.links if lk.src == 47 and lk.bandwidth_GBps
                        == speed] for speed in (200.0, 100.0, 50.0)}  # fmt: skip
    assert by_speed[200.0] == [46]
    assert sorted(by_speed[100.0]) == [33, 35, 37, 39, 41, 43, 45]
    (switch,) = by_speed[50.0]
    assert neighbours(topology, switch) == [15, 31, 47, 63]


def test_yaml_values_may_be_block_lists_and_quoted_numbers():
    text = (
        "topology:\n  - FullyConnected\nnpus_count:\n  - '3'\nbandwidth: [ 25 ]\nlatency: [ 0 ]\n"
    )
    topology = read_network(text, "fc.yml").topology
    assert (topology.num_npus, len(topology.links)) == (3, 6)
    assert classes(topology) == {(25.0, 0.0): 6}


def test_a_ring_of_two_is_a_single_cable():
    assert len(read_network(net(npus_count="[ 2 ]"), "r2.yml").topology.links) == 2


# ----------------------------------------------------------------- ns-3 rules
def test_ns3_switch_ids_between_npu_ids_are_renumbered_after_the_npus():
    text = "5 1 4\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n3 2 100Gbps 1us 0\n4 2 100Gbps 1us 0\n"
    imported = read_ns3(text, "star.txt")
    topology = imported.topology
    assert (topology.num_npus, topology.num_switches) == (4, 1)
    assert imported.file_ids == (0, 1, 3, 4, 2)  # our node i was ns-3 node file_ids[i]
    assert imported.renumbered() == {3: 2, 4: 3, 2: 4}
    assert neighbours(topology, 4) == [0, 1, 2, 3]
    assert imported.summary()["renumbered"] == {"3": 2, "4": 3, "2": 4}


@pytest.mark.parametrize(
    ("rate", "delay", "bandwidth_GBps", "latency_us"),
    [
        ("100Gbps", "0.0005ms", 100e9 / 8 / GIB, 0.5),
        ("100Gb/s", "500ns", 100e9 / 8 / GIB, 0.5),
        ("10GBps", "2us", 10e9 / GIB, 2.0),
        ("8Gib/s", "0.000001", 1.0, 1.0),  # 2**33 bits/s; a bare delay is in seconds
        ("1GiB/s", "1000ps", 1.0, 0.001),
        ("400000000000", "1s", 400e9 / 8 / GIB, 1e6),  # a bare rate is in bits/s
    ],
)
def test_ns3_rates_and_delays_use_ns3_units(rate, delay, bandwidth_GBps, latency_us):
    topology = read_ns3(f"2 0 1\n\n0 1 {rate} {delay} 0\n", "units.txt").topology
    assert [(lk.bandwidth_GBps, lk.latency_us) for lk in topology.links] == [
        (pytest.approx(bandwidth_GBps), pytest.approx(latency_us))
    ] * 2


def test_ns3_fields_may_wrap_across_lines_as_ns3_reads_them():
    topology = read_ns3("3 1 2 2\n0 2\n25Gbps 1us 0 1 2 25Gbps\n1us 0", "wrapped.txt").topology
    assert (topology.num_npus, len(topology.links)) == (2, 4)


# ----------------------------------------------------------- malformed files
@pytest.mark.parametrize(
    ("read", "text", "message"),
    [
        (read_network, net(npus_count="[ 4, 4 ]"),
         "line 2: 'npus_count' has 2 entries but 'topology' has 1"),
        (read_network, net(topology="[ Torus ]"), "line 1: topology[0]: unknown topology 'Torus'"),
        (read_network, net(topology="\n  - Ring\n  - ring", npus_count="[ 4, 4 ]",
                           bandwidth="[ 1, 1 ]", latency="[ 1, 1 ]"),
         "line 3: topology[1]: unknown topology 'ring'"),
        (read_network, net(npus_count="[ 1 ]"),
         "line 2: npus_count[0]: 1 NPUs; a dimension needs at least 2"),
        (read_network, net(bandwidth="[ 0 ]"), "line 3: bandwidth[0]: 0.0 GB/s must be positive"),
        (read_network, net(bandwidth="[ fast ]"), "line 3: bandwidth[0]: 'fast' is not a number"),
        (read_network, net(npus_count="4"),
         "line 2: 'npus_count' must be a list with one entry per dimension"),
        (read_network, net(latency=None), "missing key 'latency'"),
        (read_network, net(topology="[ Ring"), "line 2 column 11: not valid YAML"),
        (read_network, "- just\n- a list\n", "expected a mapping with the keys topology"),
        (read_ns3, "8 0 8\n\n0 1 25Gbps 1us 0\n", "line 3: the file ends where a link's source"),
        (read_ns3, "2 0 1\n\n0 5 25Gbps 1us 0\n", "line 3: a link's destination '5' is not a"),
        (read_ns3, "2 0 1\n\n0 1 25Gbit 1us 0\n", "line 3: a rate '25Gbit' is not understood"),
        (read_ns3, "2 0 1\n\n0 1 25Gbps 1 day 0\n", "line 3: an error rate 'day' is not"),
        (read_ns3, "2 0 1\n\n0 1 25Gbps 1us 0\n1 0 25Gbps 1us 0\n", "line 4: unexpected '1'"),
        (read_ns3, "2 0 1\n\n1 1 25Gbps 1us 0\n", "line 3: link from node 1 to itself"),
        (read_ns3, "2 2 0\n0 1\n", "line 1: all 2 nodes are switches"),
        (read_ns3, "3 2 0\n1 1\n", "line 2: switch 1 is listed twice"),
        (read_ns3, "two 0 0\n", "line 1: the node count must be a whole number >= 1, got 'two'"),
    ],
)  # fmt: skip
def test_malformed_files_are_refused_naming_file_line_and_field(read, text, message):
    with pytest.raises(TacosError) as err:
        read(text, "bad")
    assert str(err.value).startswith("bad: ") and message in str(err.value)


# ---------------------------------------------------------------- htsim rules
LEAF_SPINE = """\
Nodes 32
Tiers 2
Podsize 32

Tier 0
Downlink_speed_Gbps 100
Radix_Down 8
Radix_Up 2
Downlink_Latency_ns 1000
Switch_Latency_ns 100
Oversubscribed 4

Tier 1
Downlink_speed_Gbps 100
Radix_Down 4
Downlink_Latency_ns 1000
"""


def test_two_tier_htsim_is_a_leaf_spine_with_every_tor_on_every_spine():
    topology = read_htsim(LEAF_SPINE, "leafspine.topo").topology
    # 32 hosts; 32/8 = 4 ToRs; 32*100/(100*4) = 8 uplinks over Radix_Down 4 -> 2 Aggs
    assert (topology.num_npus, topology.num_switches, len(topology.links)) == (32, 6, 80)
    assert neighbours(topology, 32) == [*range(8), 36, 37]
    assert neighbours(topology, 36) == [32, 33, 34, 35]


def test_htsim_switch_latency_is_paid_on_the_links_leaving_the_switch():
    topology = read_htsim(LEAF_SPINE, "leafspine.topo").topology
    latency = {(lk.src, lk.dst): lk.latency_us for lk in topology.links}
    assert latency[(0, 32)] == 1.0  # host -> ToR
    assert latency[(32, 0)] == pytest.approx(1.1)  # ToR -> host: 100 ns of ToR switching
    assert latency[(32, 36)] == pytest.approx(1.1)  # ToR -> Agg
    assert latency[(36, 32)] == 1.0  # Agg switching latency is 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("Nodes 32", ""), "missing Nodes"),
        (("Podsize 32", "Podsize 24"), "Nodes 32 is not a multiple of Podsize 24"),
        (("Radix_Up 2", "Radix_Up 4"), "Tier 0 Radix_Down / Radix_Up differs from Oversubscribed"),
        (("Radix_Down 4\n", "Radix_Down 3\n"), "ToR uplinks do not fill whole Agg switches"),
        (("Tier 1\n", "Tier 7\n"), "line 13: Tier 7: htsim has tiers 0, 1 and 2"),
        (("Oversubscribed 4", "Oversubscribed 4\nColour blue"), "line 12: unknown key 'Colour'"),
        (("Radix_Up 2", "Radix_Up two"), "line 8: Radix_Up: 'two' is not a whole number"),
        (("Tiers 2", "Tiers 4"), "Tiers 4: htsim builds 2 or 3 tiers"),
        (("Downlink_Latency_ns 1000\nSwitch", "Switch"), "line 5: Tier 0 needs a positive "
         "downlink_latency_ns"),
    ],
)  # fmt: skip
def test_malformed_htsim_file_is_refused_as_htsim_refuses_it(edit, message):
    with pytest.raises(TacosError) as err:
        read_htsim(LEAF_SPINE.replace(*edit, 1), "bad.topo")
    assert str(err.value).startswith("bad.topo: ") and message in str(err.value)


def test_unknown_suffixes_are_not_imported_and_missing_files_are_named():
    assert not reads_topology("ring.csv") and not reads_topology("ring:8")
    with pytest.raises(TacosError, match="missing.yml: no such topology file"):
        load_topology("missing.yml")


DATA_DIR = Path(__file__).parent / "data" / "astra-sim" / "network"
"""Real ASTRA-sim files that ../shared/reference does not have (see tests/data/README.md)."""


def test_astra_sim_1_analytical_json_imports_its_dimensions():
    imported = import_topology(DATA_DIR / "sample_Torus2D.json")  # ASTRA-sim 1.0's 2D torus
    topology = imported.topology
    assert (topology.num_npus, topology.num_switches, len(topology.links)) == (16, 0, 64)
    assert classes(topology) == {(32.0, 0.001): 32, (16.0, 0.001): 32}
    assert neighbours(topology, 0) == [1, 3, 4, 12]  # dimension 0 fastest
    assert topology.structure is not None and topology.structure.dims == (4, 4)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("sample_8nodes_1D.json", "ns-3 frontend configuration"),
        ("system.json", "system configuration"),
        ("memory.json", "remote memory configuration"),
    ],
)
def test_astra_sim_json_that_describes_no_network_says_what_it_is(tmp_path, name, says, capsys):
    path = DATA_DIR / name
    if not path.exists():
        texts = {"system.json": '{"scheduling-policy": "LIFO", "preferred-dataset-splits": 4}',
                 "memory.json": '{"memory-type": "NO_MEMORY_EXPANSION"}'}  # fmt: skip
        path = tmp_path / name
        path.write_text(texts[name])
    for argv in (["import", path], ["synthesize", "--topology", path]):
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and says in err and "give the" in err


def test_a_tacos_topology_json_still_imports(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(Topology.ring(4).to_dict()))
    assert import_topology(path).topology.links == Topology.ring(4).links


@pytest.mark.parametrize(
    "name", ["tpu_v3_32_2dtorus.yml", "hgx_h100_32gpu.yml", "sample_Torus2D.json"]
)
def test_multi_dimensional_networks_go_back_to_astra_sim_as_they_came(name):
    topology = load_topology(str(DATA_DIR / name))
    dims = analytical_dims(topology)
    assert dims is not None and len(dims) > 1
    again = read_network(network_yaml(dims), "again.yml").topology
    assert again.links == topology.links and again.num_switches == topology.num_switches


@pytest.mark.parametrize(
    ("spec", "kinds"),
    [("torus2d:3x5", ["Ring", "Ring"]), ("hypercube:3", ["Ring"] * 3),
     ("mesh2d:2x2", ["Ring", "Ring"]), ("torus3d:2x3x4", ["Ring"] * 3)],
)  # fmt: skip
def test_tori_hypercubes_and_meshes_of_side_2_are_astra_sim_networks(spec, kinds):
    dims = analytical_dims(from_spec(spec))
    assert dims is not None and [d.kind for d in dims] == kinds
    again = read_network(network_yaml(dims), "n.yml").topology
    assert Counter(again.links) == Counter(from_spec(spec).links)  # in ASTRA-sim's order


@pytest.mark.parametrize("spec", ["mesh2d:3x3", "mesh2d:2x4"])
def test_meshes_with_longer_sides_have_no_astra_sim_network(spec):
    assert analytical_dims(from_spec(spec)) is None  # a Ring would add the wrap-around link


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ENABLE_QCN 1\nTOPOLOGY_FILE ../topology/8_nodes_1_switch_topology.txt\n",
         "ns-3 simulation config, not a topology; give the topology file its TOPOLOGY_FILE "
         "names (../topology/8_nodes_1_switch_topology.txt)"),
        ("DATA\n1\nallreduce -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 1048576 1\n",
         "ASTRA-sim text workload (DATA), not a network"),
    ],
)  # fmt: skip
def test_other_txt_files_are_named_with_the_file_to_give(tmp_path, text, says):
    path = tmp_path / "given.txt"
    path.write_text(text)
    with pytest.raises(TacosError, match=re.escape(f"{path}: this is an {says}")):
        import_topology(path)
