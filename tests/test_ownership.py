"""All-Reduce ownership: who reduces and gathers which chunk (tacos.synthesizer.ownership)."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.schedule import Schedule
from tacos.synthesizer import fastest_greedy
from tacos.synthesizer.collectives import Tenants
from tacos.synthesizer.ownership import (
    collective_owners,
    level_shares,
    owned_chunks,
    owner_layouts,
    reduction_owners,
)
from tacos.topology import from_spec

bandwidths = st.lists(st.sampled_from([1.0, 2.0, 3.0, 4.0, 12.5, 50.0]), min_size=2, max_size=12)


@given(st.integers(1, 500), bandwidths)
def test_shares_are_whole_chunks_that_add_up(total, bandwidth):
    shares = level_shares(total, bandwidth)
    assert sum(shares) == total
    assert all(k >= 0 for k in shares)


@given(st.integers(1, 500), bandwidths)
def test_an_npu_with_less_bandwidth_never_owns_fewer_chunks(total, bandwidth):
    shares = level_shares(total, bandwidth)
    for i, j in zip(range(len(bandwidth)), range(1, len(bandwidth)), strict=False):
        if bandwidth[i] < bandwidth[j]:
            assert shares[i] >= shares[j] - 1  # one for rounding


def test_equal_npus_keep_the_collectives_own_layout():
    for spec_text in ("ring:8", "torus2d:4x4", "dgx:2x4"):
        topology = from_spec(spec_text)
        spec = Collective(CollectiveKind.ALL_REDUCE, tuple(topology.npus), 3, 2**20)
        owners = reduction_owners(topology, spec).tolist()
        assert owners == [spec.owner(chunk) for chunk in range(spec.num_chunks)]


def test_levelled_ownership_speeds_up_all_reduce_on_a_mesh():
    """Corners own more, so they are not the last to finish either phase (1.75x -> 1.38x).
    The greedy alone (trees do better still, :mod:`tacos.synthesizer.trees`)."""
    topology = from_spec("mesh2d:8x8")
    spec = Collective(CollectiveKind.ALL_REDUCE, tuple(topology.npus), 4, 2**20)
    transfers, _ = fastest_greedy(
        topology, Tenants((spec,)), random.Random(0), "rarest", None, "fast"
    )
    schedule = Schedule(topology, spec, transfers, {})
    assert tacos.verify(schedule).ok
    assert schedule.collective_time_us <= 1.45 * tacos.lower_bounds(topology, spec).best_us


def test_both_layouts_are_tried_only_where_they_differ():
    def layouts(spec_text: str) -> tuple[Collective, list[list[list[int]]]]:
        topology = from_spec(spec_text)
        spec = Collective(CollectiveKind.ALL_REDUCE, tuple(topology.npus), 2, 2**20)
        found = owner_layouts(topology, [spec])
        return spec, [[owners.tolist() for owners in layout] for layout in found]

    spec, torus = layouts("torus2d:4x4")
    assert torus == [[[spec.owner(chunk) for chunk in range(spec.num_chunks)]]]
    spec, mesh = layouts("mesh2d:4x4")
    assert len(mesh) == 2 and mesh[0] != mesh[1]
    assert mesh[1] == [[spec.owner(chunk) for chunk in range(spec.num_chunks)]]


@given(st.permutations(range(6)), st.integers(1, 4))
def test_owned_chunks_names_each_ranks_chunks_as_the_collective_lays_them_out(ranks, per_rank):
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(ranks), per_rank, 2**20)
    owners = collective_owners(spec)
    for rank in ranks:
        places = np.arange(per_rank)
        chunks = owned_chunks(spec, np.full(per_rank, rank), places)
        assert chunks.tolist() == np.flatnonzero(owners == rank).tolist()
