"""A direct link leaves a node's last chunks to faster links when they bring them sooner.

The rule (``tacos/synthesizer/greedy.py``, module docs) is checked three ways:
its matching test is Hall's condition (against a max-flow), it reaches
upstream TACOS's expected time where the plain greedy did not, and the
compiled engines, NPU-only and switched, make the reference's decisions.
"""

import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast import random_topology

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.stream import stream_all_gather
from tacos.synthesizer import fast, greedy
from tacos.synthesizer.fast import Block
from tacos.synthesizer.greedy import MAX_RIVALS, rivals_deliver_all
from tacos.synthesizer.routes import faster_rivals
from tacos.topology import Link, Topology

AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE


def two_speed_mesh(width, height, row_GBps, column_GBps, latency_us):
    """Upstream TACOS's Mesh2D_Hetero: NPU ``row * width + col``, rows at ``row_GBps``."""
    links = []
    for npu in range(width * height):
        row, col = divmod(npu, width)
        if col + 1 < width:
            links += [Link(npu, npu + 1, row_GBps, latency_us),
                      Link(npu + 1, npu, row_GBps, latency_us)]  # fmt: skip
        if row + 1 < height:
            links += [Link(npu, npu + width, column_GBps, latency_us),
                      Link(npu + width, npu, column_GBps, latency_us)]  # fmt: skip
    return Topology(width * height, tuple(links), name=f"hetero:{width}x{height}")


def max_flow_delivers_all(lacking, capacities, holdings):
    """The matching question asked the long way: a max-flow from the rivals to the chunks."""
    chunks = [c for c in range(lacking.bit_length()) if lacking >> c & 1]
    graph = nx.DiGraph()
    for i, (capacity, have) in enumerate(zip(capacities, holdings, strict=True)):
        graph.add_edge("s", ("rival", i), capacity=capacity)
        for c in chunks:
            if have >> c & 1:
                graph.add_edge(("rival", i), ("chunk", c), capacity=1)
    for c in chunks:
        graph.add_edge(("chunk", c), "t", capacity=1)
    graph.add_nodes_from(["s", "t"])
    return nx.maximum_flow_value(graph, "s", "t") == len(chunks)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**10 - 1),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2**10 - 1)), max_size=MAX_RIVALS),
)
def test_rivals_deliver_all_when_a_matching_of_the_lacking_chunks_exists(lacking, rivals):
    capacities = [capacity for capacity, _ in rivals]
    holdings = [have & lacking for _, have in rivals]
    expected = max_flow_delivers_all(lacking, capacities, holdings)
    assert rivals_deliver_all(lacking, capacities, holdings) == expected


def test_more_rivals_than_the_limit_are_not_waited_for():
    many = MAX_RIVALS + 1
    assert rivals_deliver_all(0b1, [1] * MAX_RIVALS, [0b1] * MAX_RIVALS)
    assert not rivals_deliver_all(0b1, [1] * many, [0b1] * many)


def test_only_links_with_a_strictly_faster_rival_into_their_npu_get_rivals():
    uniform = tacos.from_spec("mesh2d:3x3")
    assert not any(faster_rivals(uniform, uniform.link_times_us(2**20)))
    mesh = two_speed_mesh(3, 2, 16.0, 73.0, 1.5)
    rivals = faster_rivals(mesh, mesh.link_times_us(2**20))
    for link_id, link in enumerate(mesh.links):
        into = {other for other in mesh.in_links[link.dst] if other != link_id}
        slow_row_link = link.bandwidth_GBps == 16.0
        assert rivals[link_id] == (tuple(sorted(into)) if slow_row_link else ())
    switched = tacos.from_spec("dgx:2x4")
    assert not any(faster_rivals(switched, switched.link_times_us(2**20)))


def test_a_corners_last_chunk_waits_for_the_fast_link_as_upstream_tacos_expects():
    """Upstream's Mesh2DHetero7x10 test: 38 chunks over a corner's slow link finished at
    45295.09 us; the bound (and upstream's expected time) sends 37 there: 44612.47 us."""
    mesh = two_speed_mesh(7, 10, 16.0, 73.0, 1.5)
    spec = Collective(AG, tuple(mesh.npus), 3, (4096 << 20) // (70 * 3))
    reference = tacos.synthesize(mesh, spec, engine="reference")
    compiled = tacos.synthesize(mesh, spec, engine="fast")
    assert list(compiled.transfers) == list(reference.transfers)
    assert reference.collective_time_us == pytest.approx(44612.47, abs=0.01)
    assert reference.collective_time_us == pytest.approx(tacos.lower_bounds(mesh, spec).best_us)
    assert tacos.verify(compiled).ok


def leaving_counted(monkeypatch):
    """Count the reference's decisions to leave chunks to rivals."""
    left = []
    decide = greedy._SpreadState._left_to_rivals

    def counting(self, link_id, candidates, now, overtakes):
        leaves = decide(self, link_id, candidates, now, overtakes)
        left.append(leaves)
        return leaves

    monkeypatch.setattr(greedy._SpreadState, "_left_to_rivals", counting)
    return left


@pytest.mark.parametrize("kind", [AG, RS, AR])
@pytest.mark.parametrize("policy", ["rarest", "random"])
def test_the_npu_only_kernel_leaves_chunks_to_rivals_as_the_reference(monkeypatch, kind, policy):
    left = leaving_counted(monkeypatch)
    mesh = two_speed_mesh(5, 4, 50.0, 200.0, 0.5)
    spec = Collective(kind, tuple(mesh.npus), 3, 2**20)
    reference = tacos.synthesize(mesh, spec, seed=4, policy=policy, engine="reference")
    compiled = tacos.synthesize(mesh, spec, seed=4, policy=policy, engine="fast")
    assert any(left)
    assert list(compiled.transfers) == list(reference.transfers)


def mixed_speed_switched(num_npus):
    """NPUs on one switch, and a ring of direct links alternately fast and slow."""
    switch = num_npus
    links = []
    for npu in range(num_npus):
        links += [Link(npu, switch, 25.0, 1.0), Link(switch, npu, 25.0, 1.0)]
        bandwidth = 300.0 if npu % 2 else 40.0
        after = (npu + 1) % num_npus
        links += [Link(npu, after, bandwidth, 0.5), Link(after, npu, bandwidth, 0.5)]
    return Topology(num_npus, tuple(links), num_npus + 1, name="switch+ring")


@pytest.mark.parametrize("kind", [AG, RS, AR])
def test_the_switched_kernel_leaves_chunks_to_rivals_as_the_reference(monkeypatch, kind):
    left = leaving_counted(monkeypatch)
    topo = mixed_speed_switched(6)
    spec = Collective(kind, tuple(topo.npus), 4, 2**20)
    reference = tacos.synthesize(topo, spec, seed=1, engine="reference")
    compiled = tacos.synthesize(topo, spec, seed=1, engine="fast")
    assert any(left)
    assert list(compiled.transfers) == list(reference.transfers)
    assert tacos.verify(compiled).ok


@pytest.mark.parametrize(
    "topology_seed, kind, chunk_bytes",
    [(1196, AR, 1), (1317, RS, 2**20), (1350, AR, 2**20)],
)
def test_late_transfers_are_re_timed_as_the_reference_re_times_them(
    monkeypatch, topology_seed, kind, chunk_bytes
):
    """When rivals do not bring what a link left them (here, with random picks, one
    takes the chunk the other needed), the link sends after all, later than it could
    have; the reference's re-timing moves that transfer (and what follows from it)
    earlier, and the compiled engine re-times exactly then (Block.late)."""
    late = []
    run = fast._SpreadKernel.run

    def counting(self):
        status, block, delivered = run(self)
        late.append(block.late)
        return status, block, delivered

    monkeypatch.setattr(fast._SpreadKernel, "run", counting)
    rnd = random.Random(topology_seed)
    topo = random_topology(rnd, rnd.randint(4, 14))
    spec = Collective(kind, tuple(topo.npus), 2, chunk_bytes)
    reference = tacos.synthesize(topo, spec, policy="random", engine="reference")
    compiled = tacos.synthesize(topo, spec, policy="random", engine="fast")
    assert sum(late) > 0
    assert list(compiled.transfers) == list(reference.transfers)
    assert tacos.simulate(compiled).collective_time_us == compiled.collective_time_us


def test_a_stream_whose_transfers_would_need_re_timing_writes_nothing(tmp_path, monkeypatch):
    """A link that left chunks to faster links and then sent one after all may start late;
    only the in-memory engine re-times, so the stream refuses rather than write it."""
    from tacos import stream

    def late_blocks(*args, **kwargs):
        yield Block(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1), late=1)

    monkeypatch.setattr(stream, "spread_blocks", late_blocks)
    monkeypatch.setattr(stream, "MAX_TAIL_TRANSFERS", 0)  # else made whole in memory
    monkeypatch.setattr(stream, "MAX_REORDERED_TRANSFERS", 0)
    ring = tacos.from_spec("ring:4")
    spec = Collective(AG, tuple(ring.npus), 1, 2**20)
    with pytest.raises(TacosError, match="not written: 1 transfers .* without --stream"):
        stream_all_gather(ring, spec, tmp_path / "ag.bin")
    assert list(tmp_path.iterdir()) == []
