"""The fast engine makes exactly the reference's schedules; its helpers agree with the originals.

The reference greedy (tacos.synthesizer.greedy) is the oracle: same seed, same
policy, same transfers, byte for byte, and the same random-number state after.
"""

import random

import numpy as np
import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.linkmodel import CostModel
from tacos.simulate import replay_times
from tacos.synthesizer import _kernels, fast, synthesize_tenants
from tacos.synthesizer.collectives import Settings, Tenants, synthesize_transfers
from tacos.synthesizer.fast_fabric import FabricArrays, fabric_arrays, replay_times_of
from tacos.synthesizer.routes import Fabric, routes_from
from tacos.topology import Link, Topology
from tacos.transfers import TransferTable

AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE


def heterogeneous_mesh(x, y):
    """Fast links along dimension 0, slow ones along dimension 1 (two link durations)."""
    base = tacos.from_spec(f"mesh2d:{x}x{y}")
    links = tuple(
        Link(lk.src, lk.dst, 200.0 if abs(lk.src - lk.dst) == 1 else 50.0, lk.latency_us)
        for lk in base.links
    )
    return Topology(base.num_npus, links, name="hetero")


def random_topology(rnd, n):
    """A directed cycle plus random links (some parallel), random bandwidths and latencies."""
    order = rnd.sample(range(n), n)
    pairs = sorted({(order[i], order[(i + 1) % n]) for i in range(n)}
                   | {(rnd.randrange(n), rnd.randrange(n)) for _ in range(2 * n)})  # fmt: skip
    links = [Link(u, v, rnd.choice([12.5, 50.0, 300.0]), rnd.choice([0.0, 0.5, 3.0]))
             for u, v in pairs if u != v]  # fmt: skip
    return Topology(n, tuple(links + links[:2]), name="random")


def both_engines(topo, spec, seed, policy, sends_in_flight=None):
    options = {"seed": seed, "policy": policy, "sends_in_flight": sends_in_flight}
    reference = tacos.synthesize(topo, spec, engine="reference", **options)
    compiled = tacos.synthesize(topo, spec, engine="fast", **options)
    return reference, compiled


SWITCHED = ["switch:5", "fat-tree:4", "dgx:2x4", "dgx:4x4,rails=2,nodes-per-leaf=2,spines=2",
            "xgmi:2x4"]  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["ring:6", "mesh2d:4x5", "torus2d:4x4", "torus3d:3x3x3", "hypercube:4", "hetero", *SWITCHED],
)
@pytest.mark.parametrize("kind", [AG, RS, AR])
@pytest.mark.parametrize("policy", ["rarest", "random"])
def test_fast_makes_the_reference_schedule(name, kind, policy):
    topo = heterogeneous_mesh(4, 3) if name == "hetero" else tacos.from_spec(name)
    spec = Collective(kind, tuple(topo.npus), 2, 2**20)
    reference, compiled = both_engines(topo, spec, 5, policy)
    assert list(compiled.transfers) == list(reference.transfers)
    assert compiled.meta == {**reference.meta, "engine": "fast"}
    assert compiled.to_json() == reference.to_json().replace('"reference"', '"fast"')
    assert tacos.verify(compiled).ok and tacos.verify(reference).ok


@pytest.mark.parametrize(
    "name", ["ring:6", "mesh2d:4x5", "torus2d:4x4", "hypercube:4", "hetero", *SWITCHED]
)
@pytest.mark.parametrize("kind", [AG, RS, AR])
def test_fast_makes_the_reference_schedule_for_one_port_npus(name, kind):
    """A port limit stops a node's sends while its messages are on their way, and with it
    no link leaves chunks to faster ones or is overtaken: both engines alike."""
    topo = heterogeneous_mesh(4, 3) if name == "hetero" else tacos.from_spec(name)
    spec = Collective(kind, tuple(topo.npus), 2, 2**20)
    reference, compiled = both_engines(topo, spec, 5, "rarest", sends_in_flight=1)
    assert list(compiled.transfers) == list(reference.transfers)
    assert compiled.meta == {**reference.meta, "engine": "fast"}
    assert compiled.sends_in_flight == 1 and tacos.verify(compiled).ok


def test_fast_matches_with_port_limits_on_random_topologies():
    rnd = random.Random(13)
    for trial in range(24):
        npus = rnd.randint(2, 9)
        topo = random_switched_topology(rnd, npus) if trial % 2 else random_topology(rnd, npus)
        kind = rnd.choice([AG, RS, AR])
        spec = Collective(kind, tuple(topo.npus), rnd.choice([1, 3, 20]), rnd.choice([1, 2**20]))
        policy, ports = rnd.choice(["rarest", "random"]), rnd.choice([1, 2, 3])
        reference, compiled = both_engines(topo, spec, rnd.randrange(10**6), policy, ports)
        assert list(compiled.transfers) == list(reference.transfers), trial


def test_the_compiled_replay_gives_the_replays_times_under_port_limits():
    """Schedules made without ports, replayed with 1-3: ports contend, ends at one instant
    free them in order of position, and the compiled replay times it as tacos.simulate."""
    rnd = random.Random(17)
    for trial in range(45):
        npus = rnd.randint(2, 9)
        if trial % 3 == 2:
            topo = tacos.from_spec(rnd.choice([*SWITCHED, "mesh2d:3x3"]))
        else:
            topo = random_switched_topology(rnd, npus) if trial % 3 else random_topology(rnd, npus)
        spec = Collective(rnd.choice([AG, RS, AR]), tuple(topo.npus), rnd.choice([1, 3, 8]))
        transfers = list(tacos.synthesize(topo, spec, seed=trial, engine="reference").transfers)
        ports = rnd.choice([1, 2, 3])
        expected = replay_times(transfers, topo, spec.chunk_bytes, ports)
        table = TransferTable.from_transfers(transfers)
        start, end = replay_times_of(table, topo, spec.chunk_bytes, ports)
        assert (tuple(start.tolist()), tuple(end.tolist())) == expected, trial


@pytest.mark.parametrize("spec", ["dgx:2x4", "fat-tree:4"])
def test_the_compiled_replay_orders_each_npu_link_by_recorded_start_itself(spec):
    """Rows in any order replay to the same times: an NPU's link runs its transfers by
    recorded start (then position), a switch's by readiness, whatever the row order."""
    topo = tacos.from_spec(spec)
    collective = Collective(AR, tuple(topo.npus), 2)
    table = TransferTable.from_transfers(list(tacos.synthesize(topo, collective).transfers))
    start, end = replay_times_of(table, topo, collective.chunk_bytes)
    assert (tuple(start.tolist()), tuple(end.tolist())) == replay_times(
        list(table), topo, collective.chunk_bytes
    )
    shuffled = np.random.default_rng(5).permutation(len(table))
    moved_start, moved_end = replay_times_of(table.take(shuffled), topo, collective.chunk_bytes)
    assert np.array_equal(moved_start, start[shuffled])
    assert np.array_equal(moved_end, end[shuffled])


def test_fast_matches_on_random_heterogeneous_topologies_and_many_chunks():
    rnd = random.Random(7)
    for trial in range(40):
        topo = random_topology(rnd, rnd.randint(2, 8))
        kind = rnd.choice([AG, RS, AR])
        # Up to 8 * 90 = 720 chunks: several words and blocks per bit row.
        spec = Collective(kind, tuple(topo.npus), rnd.choice([1, 3, 90]), rnd.choice([1, 2**20]))
        policy = rnd.choice(["rarest", "random"])
        reference, compiled = both_engines(topo, spec, rnd.randrange(10**6), policy)
        assert list(compiled.transfers) == list(reference.transfers), trial


def random_switched_topology(rnd, npus):
    """NPUs hanging off a random strongly connected fabric of switches, some NPUs also
    linked directly; random bandwidths and latencies, some parallel cables."""
    switches = rnd.randint(1, 4)
    cables = [(npus + s, npus + (s + 1) % switches) for s in range(switches) if switches > 1]
    cables += [(v, npus + rnd.randrange(switches)) for v in range(npus)]
    cables += [(rnd.randrange(npus), rnd.randrange(npus)) for _ in range(npus // 2)]
    cables += cables[:1]
    links = []
    for a, b in cables:
        if a != b:
            bandwidth, latency = rnd.choice([25.0, 50.0, 400.0]), rnd.choice([0.0, 0.5, 1.0])
            links += [Link(a, b, bandwidth, latency), Link(b, a, bandwidth, latency)]
    return Topology(npus, tuple(links), npus + switches, name="random-switched")


def test_fast_matches_on_random_switched_topologies():
    rnd = random.Random(11)
    for trial in range(25):
        topo = random_switched_topology(rnd, rnd.randint(2, 9))
        kind = rnd.choice([AG, RS, AR])
        spec = Collective(kind, tuple(topo.npus), rnd.choice([1, 3, 20]), 2**20)
        policy = rnd.choice(["rarest", "random"])
        reference, compiled = both_engines(topo, spec, rnd.randrange(10**6), policy)
        assert list(compiled.transfers) == list(reference.transfers), trial


def both_engines_for_tenants(topo, groups, kind, chunks, seed, policy, sends_in_flight=None):
    specs = [Collective(kind, tuple(group), chunks, 2**20) for group in groups]
    options = {"seed": seed, "policy": policy, "sends_in_flight": sends_in_flight}
    reference = synthesize_tenants(topo, specs, engine="reference", **options)
    compiled = synthesize_tenants(topo, specs, engine="fast", **options)
    return reference, compiled


@pytest.mark.parametrize(
    "name", ["ring:8", "mesh2d:4x5", "torus2d:4x4", "hypercube:4", "hetero", *SWITCHED]
)
@pytest.mark.parametrize("groups", ["halves", "interleaved", "every third", "inner"])
@pytest.mark.parametrize("kind", [AG, RS, AR])
def test_fast_makes_the_reference_schedule_for_tenants_and_subsets(name, groups, kind):
    """Where nodes want only some chunks, other nodes relay them on their way (over
    direct links and paths through switches): the same relays, pruned, re-timed, in
    both engines, one schedule per tenant."""
    topo = heterogeneous_mesh(4, 3) if name == "hetero" else tacos.from_spec(name)
    n = topo.num_npus
    chosen = {
        "halves": [range(n // 2), range(n // 2, n)],
        "interleaved": [range(0, n, 2), range(1, n, 2)],
        "every third": [range(0, n, 3)],
        "inner": [range(1, n - 1)],
    }[groups]
    for policy, ports in [("rarest", None), ("random", None), ("rarest", 1)]:
        reference, compiled = both_engines_for_tenants(topo, chosen, kind, 2, 3, policy, ports)
        for ours, theirs in zip(compiled, reference, strict=True):
            assert list(ours.transfers) == list(theirs.transfers), policy
            assert ours.meta == {**theirs.meta, "engine": "fast"}
            assert tacos.verify(ours).ok


@pytest.mark.parametrize("name", ["ring:6", "torus2d:4x4", "hetero", *SWITCHED])
@pytest.mark.parametrize("kind", ["broadcast", "reduce", "gather", "scatter", "all-to-all"])
def test_fast_makes_the_reference_schedule_for_every_other_collective(name, kind):
    """Rooted collectives, Gather, Scatter and All-to-All (each chunk wanted by some NPUs,
    relayed by the others; Reduce mirrors Broadcast), over all NPUs and over a subset."""
    topo = heterogeneous_mesh(4, 3) if name == "hetero" else tacos.from_spec(name)
    n = topo.num_npus
    for ranks in [range(n), range(0, n, 2)]:
        spec = Collective(CollectiveKind.parse(kind), tuple(ranks), 2, 2**20)
        for policy, ports in [("rarest", None), ("random", None), ("rarest", 1)]:
            reference, compiled = both_engines(topo, spec, 7, policy, ports)
            assert list(compiled.transfers) == list(reference.transfers), (policy, ports)
            assert compiled.meta == {**reference.meta, "engine": "fast"}
            assert tacos.verify(compiled).ok


def test_fast_matches_for_tenants_and_subsets_on_random_topologies():
    rnd = random.Random(19)
    for trial in range(45):
        npus = rnd.randint(5, 12)
        topo = random_switched_topology(rnd, npus) if trial % 3 else random_topology(rnd, npus)
        ranks = rnd.sample(range(npus), rnd.randint(4, npus))
        cut = rnd.randint(2, len(ranks) - 2)
        groups = [sorted(ranks[:cut]), sorted(ranks[cut:])] if trial % 2 else [sorted(ranks)]
        kind = rnd.choice([AG, RS, AR]) if len(groups) > 1 else rnd.choice(list(CollectiveKind))
        policy, ports = rnd.choice(["rarest", "random"]), rnd.choice([None, None, 1, 2])
        seed = rnd.randrange(10**6)
        reference, compiled = both_engines_for_tenants(
            topo, groups, kind, rnd.choice([1, 3, 40]), seed, policy, ports
        )
        for ours, theirs in zip(compiled, reference, strict=True):
            assert list(ours.transfers) == list(theirs.transfers), trial


@pytest.mark.parametrize("trial", range(12))
def test_the_compiled_fabric_paths_and_routes_are_the_references(trial):
    """What the fast engine precomputes equals what the reference finds as it goes."""
    rnd = random.Random(trial)
    topo = (
        tacos.from_spec(SWITCHED[trial])
        if trial < len(SWITCHED)
        else random_switched_topology(rnd, rnd.randint(2, 9))
    )
    arrays = FabricArrays.of(topo, 2**20)
    fabric = Fabric(topo, topo.link_times_us(2**20))
    first_links = {r.links[0] for routes in routes_from(topo, 2**20, fabric) for r in routes}
    assert set(np.nonzero(arrays.has_routes)[0].tolist()) == first_links
    for link_id in sorted(first_links):
        dag = arrays.dag_of_link[link_id]
        if dag < 0:
            assert not topo.is_switch(topo.links[link_id].dst)
            continue
        paths = fabric.paths_from(topo.links[link_id].dst)
        base, end = arrays.dag_node_ptr[dag], arrays.dag_node_ptr[dag + 1]
        assert tuple(arrays.dag_nodes[base:end].tolist()) == paths.nodes
        assert arrays.dag_first_npu[dag] == paths.first_npu
        assert tuple(arrays.dag_path_us[base:end].tolist()) == paths.path_us
        edges = [
            tuple(
                (int(arrays.dag_edge_link[e]), int(arrays.dag_edge_pred[e]))
                for e in range(arrays.dag_edge_ptr[i], arrays.dag_edge_ptr[i + 1])
            )
            for i in range(base, end)
        ]
        assert tuple(edges) == paths.edges_into


@pytest.mark.parametrize("policy", ["rarest", "random"])
def test_the_random_number_generator_ends_where_the_reference_leaves_it(policy):
    topo = tacos.from_spec("torus2d:3x4")
    tenants = Tenants((Collective(AR, tuple(topo.npus), 2),))
    reference_rng, fast_rng = random.Random(3), random.Random(3)
    synthesize_transfers(topo, tenants, Settings(reference_rng, policy))
    fast.fast_transfers(topo, tenants, fast.FastSettings(fast_rng, policy))
    assert fast_rng.getstate() == reference_rng.getstate()


def test_auto_takes_the_fast_engine_only_where_it_applies():
    mesh = tacos.from_spec("mesh2d:10x10")
    spec = Collective(AG, tuple(mesh.npus))
    assert tacos.synthesize(mesh, spec).meta["engine"] == "fast"
    small = tacos.from_spec("ring:4")
    assert tacos.synthesize(small, Collective(AG, (0, 1, 2, 3))).meta["engine"] == "reference"
    switch = tacos.from_spec("switch:80")
    switched = Collective(AG, tuple(switch.npus))
    assert tacos.synthesize(switch, switched).meta["engine"] == "fast"
    tenants = (Collective(AG, tuple(range(40))), Collective(AG, tuple(range(40, 80))))
    assert {s.meta["engine"] for s in synthesize_tenants(switch, tenants)} == {"fast"}
    subset = Collective(AG, tuple(range(0, 100, 2)))
    assert tacos.synthesize(mesh, subset).meta["engine"] == "fast"
    all_to_all = Collective(CollectiveKind.ALL_TO_ALL, tuple(mesh.npus))
    assert tacos.synthesize(mesh, all_to_all).meta["engine"] == "fast"
    pipelined = mesh.with_cost(CostModel("pipelined"))
    assert tacos.synthesize(pipelined, spec).meta["engine"] == "reference"
    with pytest.raises(TacosError, match="cannot synthesize this: it models the paper's links"):
        tacos.synthesize(pipelined, spec, engine="fast")
    one_port = tacos.synthesize(mesh, spec, sends_in_flight=1)
    assert one_port.meta["engine"] == "fast"


def test_progress_reaches_the_total_with_the_fast_engine():
    topo = tacos.from_spec("ring:6")
    seen = []
    tacos.synthesize(
        topo,
        Collective(AR, tuple(topo.npus)),
        engine="fast",
        progress=lambda d, t: seen.append((d, t)),
    )
    assert seen[-1] == (2 * 5 * 6, 2 * 5 * 6)


def test_best_of_several_seeds_keeps_the_fastest_and_is_deterministic():
    topo = tacos.from_spec("torus2d:4x4")
    spec = Collective(AG, tuple(topo.npus), 2)
    alone = [tacos.synthesize(topo, spec, seed=s, policy="random") for s in range(5, 8)]
    best = tacos.synthesize(topo, spec, seed=5, policy="random", tries=3)
    fastest = min(alone, key=lambda s: s.collective_time_us)
    assert best.collective_time_us == fastest.collective_time_us
    assert best.meta["seed"] == fastest.meta["seed"] and best.meta["tries"] == 3
    assert list(best.transfers) == list(fastest.transfers)
    with pytest.raises(TacosError, match="use 1..1000"):
        tacos.synthesize(topo, spec, tries=0)


def test_the_event_loop_sort_orders_a_prefix_and_leaves_the_rest():
    rnd = np.random.default_rng(3)
    for count in [0, 1, 2, 3, 17, 500]:
        items = rnd.integers(0, 50, count + 7)  # duplicates too
        expected = np.concatenate([np.sort(items[:count]), items[count:]])
        _kernels.heapsort(items, count)
        assert items.tolist() == expected.tolist()


@pytest.mark.parametrize("dtype", [np.uint64, np.uint16])
def test_bit_matrix_rows_start_on_cache_lines(dtype):
    matrix = fast._line_aligned_zeros(1000, 79, dtype)
    line = _kernels.CACHE_LINE
    assert matrix.ctypes.data % line == 0 and matrix.strides[0] % line == 0
    assert matrix.shape[0] == 1000 and 79 <= matrix.shape[1] < 79 + line
    assert matrix.flags.c_contiguous and not matrix.any()


@pytest.mark.parametrize("name", SWITCHED)
@pytest.mark.parametrize("kind", [AG, RS, AR])
def test_both_engines_leave_chunks_to_the_same_nearer_nodes(name, kind):
    """The attempt where a path through switches leaves a chunk only to nodes nearer than
    half its time (:mod:`tacos.synthesizer.attempts`) is the same schedule on both."""
    topo = tacos.from_spec(name)
    tenants = Tenants((Collective(kind, tuple(topo.npus), 2),))
    reference_rng, fast_rng = random.Random(4), random.Random(4)
    reference = synthesize_transfers(
        topo, tenants, Settings(reference_rng, "rarest", near_fraction=0.5)
    )
    compiled = fast.fast_transfers(
        topo, tenants, fast.FastSettings(fast_rng, "rarest", near_fraction=0.5)
    )
    assert list(compiled) == reference
    assert fast_rng.getstate() == reference_rng.getstate()


def test_both_engines_match_links_fewest_first_alike():
    """The restarts that match free links fewest sendable chunks first
    (:func:`tacos.synthesizer.attempts.restart_runs`) are the same schedules on both,
    on networks of mixed link speeds (links leaving chunks to faster ones, overtaking),
    with port limits and with several words of chunks per bit row."""
    rnd = random.Random(17)
    changed = 0
    for trial in range(30):
        topo = random_topology(rnd, rnd.randint(2, 9)) if trial % 3 else heterogeneous_mesh(4, 3)
        spec = Collective(rnd.choice([AG, RS, AR]), tuple(topo.npus), rnd.choice([1, 2, 24]))
        tenants, seed = Tenants((spec,)), rnd.randrange(10**6)
        policy, ports = rnd.choice(["rarest", "random"]), rnd.choice([None, None, 1, 2])
        reference_rng, fast_rng = random.Random(seed), random.Random(seed)
        reference = synthesize_transfers(
            topo, tenants, Settings(reference_rng, policy, ports, fewest_first=True)
        )
        compiled = fast.fast_transfers(
            topo, tenants, fast.FastSettings(fast_rng, policy, ports, fewest_first=True)
        )
        assert list(compiled) == reference, trial
        assert fast_rng.getstate() == reference_rng.getstate(), trial
        shuffled = synthesize_transfers(topo, tenants, Settings(random.Random(seed), policy, ports))
        changed += shuffled != reference
    assert changed >= 10  # the order matters in most trials: the test sees it


def test_relays_too_big_for_memory_go_to_the_reference():
    """The relays' distance tables are sized before anything is allocated."""
    big = tacos.from_spec("dgx:512x8")
    tenants = [Collective(AG, tuple(range(0, 4096, 2))), Collective(AG, tuple(range(1, 4096, 2)))]
    reason = fast.fast_unsupported(big, tenants)
    assert reason is not None and "8.1 GiB of distance tables" in reason
    assert fast.fast_unsupported(big, [Collective(AG, tuple(big.npus))]) is None
    halves = [Collective(AG, tuple(range(256))), Collective(AG, tuple(range(256, 512)))]
    assert fast.fast_unsupported(tacos.from_spec("dgx:64x8"), halves) is None


def test_the_relays_compare_distances_between_npus_only():
    """Sized as relay_table_bytes says: a row and a column per NPU, none per switch."""
    topo = tacos.from_spec("dgx:2x4")
    dist = fabric_arrays(topo, 2**20).distances(topo.num_npus)
    assert dist.shape == (8, 8) and (np.diag(dist) == 0).all()
    assert dist[0, 1] < dist[0, 4] < np.inf  # over the NVSwitch; to the other server, longer
