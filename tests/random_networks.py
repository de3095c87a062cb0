"""Hypothesis strategies shared by the property tests: random networks people did not design.

``random_topologies`` draws a strongly connected, heterogeneous, asymmetric graph:
a directed cycle through a random permutation of the NPUs (so every NPU reaches
every other) plus random extra links, each with its own bandwidth and latency;
with ``switch=True``, sometimes one switch cabled to a random set of NPUs.
``clusters`` draws small DGX- or MI250-like clusters of servers; ``host_fabrics``
hosts behind one cable each into a random fabric of switches.
"""

from __future__ import annotations

from hypothesis import strategies as st

import tacos
from tacos.linkmodel import CostModel
from tacos.topology import Link, Topology

bandwidths = st.sampled_from([12.5, 25.0, 50.0, 100.0, 300.0])
latencies = st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0])


@st.composite
def random_topologies(draw, *, extra_links_per_npu: int = 3, switch: bool = False):
    n = draw(st.integers(2, 7))
    order = draw(st.permutations(range(n)))
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    extra = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
    pairs |= {(u, v) for u, v in draw(st.lists(extra, max_size=extra_links_per_npu * n)) if u != v}
    links = [Link(u, v, draw(bandwidths), draw(latencies)) for u, v in sorted(pairs)]
    switches = draw(st.integers(0, 1)) if switch else 0
    if switches:
        for u in draw(st.sets(st.integers(0, n - 1), min_size=1)):
            links += [Link(u, n, draw(bandwidths), 0.5), Link(n, u, draw(bandwidths), 0.5)]
    return Topology(n, tuple(links), switches, name="random")


@st.composite
def clusters(draw, *, max_servers: int = 3):
    """Small switched clusters with drawn sizes, speeds and link model."""
    nodes, gpus = draw(st.integers(2, max_servers)), draw(st.sampled_from([2, 4]))
    kind = draw(st.sampled_from(["dgx", "xgmi"]))
    fast = draw(st.sampled_from([50, 100, 400]))
    nic = draw(st.sampled_from([12.5, 25, 50]))
    inside = "nvlink" if kind == "dgx" else "xgmi"
    topo = tacos.load_topology(f"{kind}:{nodes}x{gpus},{inside}={fast},nic={nic}")
    return topo.with_cost(CostModel(draw(st.sampled_from(["paper", "pipelined"]))))


@st.composite
def host_fabrics(draw):
    """Two to eight hosts, each cabled to one of one to four switches; the switches joined by
    a random spanning tree plus random extra cables, every cable at its own speed."""
    hosts, switches = draw(st.integers(2, 8)), draw(st.integers(1, 4))
    cables = [(host, hosts + draw(st.integers(0, switches - 1))) for host in range(hosts)]
    cables += [(hosts + s, hosts + draw(st.integers(0, s - 1))) for s in range(1, switches)]
    extra = st.tuples(st.integers(0, switches - 1), st.integers(0, switches - 1))
    cables += [(hosts + a, hosts + b) for a, b in draw(st.lists(extra, max_size=3)) if a != b]
    links = []
    for a, b in cables:
        bandwidth, latency = draw(bandwidths), draw(latencies)
        links += [Link(a, b, bandwidth, latency), Link(b, a, bandwidth, latency)]
    return Topology(hosts, tuple(links), switches, name="hosts")
