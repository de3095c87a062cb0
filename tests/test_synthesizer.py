"""The TACOS greedy synthesizer: determinism, optimality where it is known, composition."""

import pytest

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.synthesizer import attempts
from tacos.topology import Link, Topology, from_spec

AG, RS, AR = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE


def spec_for(topo, kind, chunks=1, nbytes=2**20):
    return Collective(kind, tuple(topo.npus), chunks, nbytes)


def test_same_seed_gives_the_same_schedule_byte_for_byte():
    topo = from_spec("torus2d:4x4")
    first = tacos.synthesize(topo, spec_for(topo, AR, 2), seed=11)
    second = tacos.synthesize(topo, spec_for(topo, AR, 2), seed=11)
    assert first.to_json() == second.to_json()


def test_different_seeds_explore_different_tie_breaks():
    topo = from_spec("torus2d:4x4")
    schedules = {tacos.synthesize(topo, spec_for(topo, AG), seed=s).to_json() for s in range(4)}
    assert len(schedules) > 1


@pytest.mark.parametrize(
    "grid", ["mesh2d:2x2", "mesh2d:3x3", "mesh2d:4x4", "mesh2d:5x5", "mesh2d:4x8", "mesh2d:8x8",
             "mesh3d:2x2x2", "mesh3d:3x3x3", "mesh3d:2x3x4", "mesh3d:4x4x4"],
)  # fmt: skip
@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_all_gather_on_homogeneous_meshes_reaches_the_chunk_granular_ingress_bound(grid, chunks):
    topo = from_spec(grid)
    spec = spec_for(topo, AG, chunks)
    schedule = tacos.synthesize(topo, spec, seed=0)
    bound = tacos.lower_bounds(topo, spec).chunk_ingress_us
    assert schedule.collective_time_us == pytest.approx(bound, rel=1e-12)


@pytest.mark.parametrize("n", [4, 8, 16])
def test_all_gather_on_a_ring_takes_n_minus_1_over_2_steps(n):
    topo = from_spec(f"ring:{n}")
    step = topo.links[0].transfer_time_us(2**20)
    time = tacos.synthesize(topo, spec_for(topo, AG)).collective_time_us
    assert time == pytest.approx(-(-(n - 1) // 2) * step)


def test_all_gather_moves_every_chunk_to_every_other_rank_exactly_once():
    topo = from_spec("hypercube:3")
    spec = spec_for(topo, AG, chunks=3)
    schedule = tacos.synthesize(topo, spec)
    assert len(schedule.transfers) == spec.num_chunks * (spec.num_ranks - 1)
    delivered = {(t.dst, t.chunk) for t in schedule.transfers}
    assert len(delivered) == len(schedule.transfers)


def test_heterogeneous_links_free_at_their_own_times():
    # A fast and a slow path into NPU 2: the fast link should carry more chunks.
    links = (
        Link(0, 1, 100.0, 0.5), Link(1, 0, 100.0, 0.5),
        Link(1, 2, 100.0, 0.5), Link(2, 1, 100.0, 0.5),
        Link(0, 2, 10.0, 0.5), Link(2, 0, 10.0, 0.5),
    )  # fmt: skip
    topo = Topology(3, links, name="hetero")
    schedule = tacos.synthesize(topo, spec_for(topo, AG, chunks=6))
    assert tacos.verify(schedule).ok
    durations = {round(t.end - t.start, 9) for t in schedule.transfers}
    assert len(durations) == 2  # both link speeds are used, each with its own duration
    fast_into_2 = sum(1 for t in schedule.transfers if t.link == 2)
    slow_into_2 = sum(1 for t in schedule.transfers if t.link == 4)
    assert fast_into_2 > slow_into_2


def test_reduce_scatter_mirrors_an_all_gather_on_the_transposed_topology():
    text_links = (Link(0, 1, 50, 0.5), Link(1, 2, 25, 0.5), Link(2, 0, 50, 2.0), Link(1, 0, 10, 1))
    topo = Topology(3, text_links, name="asym")
    rs = tacos.synthesize(topo, spec_for(topo, RS, 2))
    ag_on_transpose = tacos.synthesize(topo.transposed(), spec_for(topo, AG, 2))
    assert all(t.op is tacos.Op.REDUCE for t in rs.transfers)
    assert len(rs.transfers) == len(ag_on_transpose.transfers)
    assert rs.collective_time_us <= ag_on_transpose.collective_time_us


def test_all_reduce_overlaps_its_two_phases():
    topo = from_spec("mesh2d:3x4")
    rs = tacos.synthesize(topo, spec_for(topo, RS, 2)).collective_time_us
    ag = tacos.synthesize(topo, spec_for(topo, AG, 2)).collective_time_us
    ar = tacos.synthesize(topo, spec_for(topo, AR, 2))
    assert tacos.verify(ar).ok
    assert ar.collective_time_us <= rs + ag
    ops = [t.op for t in ar.transfers]
    assert ops.count(tacos.Op.REDUCE) == ops.count(tacos.Op.COPY)


def test_plain_random_policy_is_available_and_correct():
    topo = from_spec("torus2d:4x4")
    schedule = tacos.synthesize(topo, spec_for(topo, AR, 2), policy="random", seed=3)
    assert tacos.verify(schedule).ok
    assert schedule.meta["policy"] == "random"


def test_rarest_first_is_not_worse_than_random_on_rings_and_tori():
    for name in ("ring:8", "torus2d:4x4", "torus3d:4x4x4"):
        topo = from_spec(name)
        for chunks in (1, 2):
            spec = spec_for(topo, AG, chunks)
            rarest = [tacos.synthesize(topo, spec, seed=s).collective_time_us for s in range(3)]
            plain = [
                tacos.synthesize(topo, spec, seed=s, policy="random").collective_time_us
                for s in range(3)
            ]
            assert sum(rarest) <= sum(plain) + 1e-9, (name, chunks)


@pytest.mark.parametrize("kind", [AR, CollectiveKind.REDUCE, CollectiveKind.BROADCAST])
def test_progress_reports_reach_the_total(kind):
    """Five NPUs take each of 6 chunks, twice for All-Reduce (a Reduce counts as its
    mirror, a Broadcast; it used to count as an All-Gather with a root, which raised)."""
    topo = from_spec("ring:6")
    seen = []
    spec = Collective(kind, tuple(topo.npus), 1 if kind is AR else 6, 2**20)
    tacos.synthesize(topo, spec, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == (2 if kind is AR else 1) * 5 * 6


def test_ranks_must_be_npus_of_the_topology():
    topo = from_spec("ring:4")
    with pytest.raises(TacosError, match="rank 9 is not an NPU"):
        tacos.synthesize(topo, Collective(AG, (0, 9)))


def test_a_subset_of_ranks_can_use_the_other_npus_as_relays():
    topo = from_spec("ring:6")
    spec = Collective(AG, (0, 3), 1, 4096)
    schedule = tacos.synthesize(topo, spec)
    assert tacos.verify(schedule).ok
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us


@pytest.mark.parametrize("kind", [AG, RS, AR, CollectiveKind.ALL_TO_ALL])
@pytest.mark.parametrize("spec", ["ring:6", "torus2d:3x3", "switch:5"])
def test_one_port_npus_never_have_two_messages_in_flight(spec, kind):
    topo = from_spec(spec)
    schedule = tacos.synthesize(topo, spec_for(topo, kind, 2), sends_in_flight=1, seed=5)
    assert tacos.verify(schedule).ok
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    busy: dict[int, list[tuple[float, float]]] = {}
    for hops in schedule.messages():
        first, last = schedule.transfers[hops[0]], schedule.transfers[hops[-1]]
        busy.setdefault(first.src, []).append((first.start, last.end))
    for spans in busy.values():
        spans.sort()
        for (_, earlier_end), (later_start, _) in zip(spans, spans[1:], strict=False):
            assert earlier_end <= later_start
    assert schedule.meta["sends_in_flight"] == 1


def _fast_rows_slow_columns() -> Topology:
    """A 4x4 mesh whose row links (200 GB/s) are four times its column links' speed."""
    mesh = from_spec("mesh2d:4x4")
    return Topology(
        16,
        tuple(
            Link(lk.src, lk.dst, 200.0 if abs(lk.src - lk.dst) == 1 else 50.0, lk.latency_us)
            for lk in mesh.links
        ),
    )


def test_a_reduce_scatter_mirrors_the_all_gather_of_the_network_itself_when_that_is_faster(
    monkeypatch,
):
    """On a 4x4 mesh with fast rows and slow columns the greedy's All-Gather meets its bound;
    built on the transposed mesh (the same mesh, its links numbered otherwise) it broke
    ties otherwise, and the Reduce-Scatter it mirrored did not."""
    hetero = _fast_rows_slow_columns()

    def time_us(kind):
        return tacos.synthesize(hetero, Collective(kind, tuple(range(16)), 1, 2**20))

    gather = time_us(CollectiveKind.ALL_GATHER).collective_time_us
    scatter = time_us(CollectiveKind.REDUCE_SCATTER)
    assert tacos.verify(scatter).ok
    assert (
        scatter.collective_time_us
        == gather
        == tacos.lower_bounds(hetero, scatter.collective).best_us
    )
    monkeypatch.setattr(tacos.synthesizer, "MIRRORED_GATHER_MAX_DELIVERIES", -1)
    monkeypatch.setattr(attempts, "MAX_GREEDY_RESTARTS", 1)  # restarts find it too
    assert time_us(CollectiveKind.REDUCE_SCATTER).collective_time_us > gather


def test_restarts_of_the_greedy_may_only_gain(monkeypatch):
    """The same mesh at four chunks per NPU: one run of the greedy ends 2.9% above the
    bound, the fastest of its restarts 0.8% (the hierarchical ring meets it); for any
    seed the restarts keep the single run's schedule unless one is faster."""
    hetero = _fast_rows_slow_columns()
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(range(16)), 4, 2**20)
    bound_us = tacos.lower_bounds(hetero, spec).best_us
    assert tacos.synthesize(hetero, spec).collective_time_us <= 1.01 * bound_us
    for seed in range(4):
        restarted = tacos.synthesize(hetero, spec, seed=seed)
        monkeypatch.setattr(attempts, "MAX_GREEDY_RESTARTS", 1)
        once = tacos.synthesize(hetero, spec, seed=seed)
        monkeypatch.undo()
        if seed == 0:
            assert once.collective_time_us >= 1.02 * bound_us
        faster = restarted.collective_time_us < once.collective_time_us
        assert faster or list(restarted.transfers) == list(once.transfers)


@pytest.mark.parametrize(
    "kind",
    [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE],
)
def test_a_restart_matching_links_fewest_first_reaches_the_bound_on_a_small_torus(
    kind, monkeypatch
):
    """torus2d:3x3 at one chunk per NPU: each NPU's four neighbours can each bring two of
    the chunks it lacks, so links matched in a shuffled order may take each other's
    only chunk and the All-Gather takes three chunk times (1.5 of the bound; the
    All-Reduce 1.25-1.5) at every seed; a restart matching them fewest sendable chunks
    first takes two."""
    torus = tacos.from_spec("torus2d:3x3")
    spec = Collective(kind, tuple(torus.npus), 1, 2**20)
    bound_us = tacos.lower_bounds(torus, spec).best_us
    for seed in range(3):
        schedule = tacos.synthesize(torus, spec, seed=seed, algorithm="tacos")
        assert tacos.verify(schedule).ok
        assert schedule.collective_time_us == pytest.approx(bound_us)
    monkeypatch.setattr(attempts, "FEWEST_FIRST_RUNS", 0)
    shuffled = tacos.synthesize(torus, spec, algorithm="tacos")
    assert shuffled.collective_time_us >= 1.2 * bound_us


def test_all_reduce_trees_on_a_heterogeneous_mesh_beat_the_hierarchical_ring():
    """At one chunk per NPU the chains decide the time: scheduled chunk by chunk or phase
    by phase, the trees held corner-owned chunks behind others (177.9 us, the ring
    160.9); the critical-path-first pass reaches the corners' chain (152.5)."""
    hetero = _fast_rows_slow_columns()
    spec = Collective(CollectiveKind.ALL_REDUCE, tuple(range(16)), 1, 2**20)
    ours = tacos.synthesize(hetero, spec)
    ring = tacos.synthesize(hetero, spec, algorithm="hierarchical-ring")
    assert tacos.verify(ours).ok
    assert tacos.simulate(ours).collective_time_us == ours.collective_time_us
    assert ours.collective_time_us < ring.collective_time_us
