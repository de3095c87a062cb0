"""The combining bound: a hand-checked value, its counting, and that no schedule beats it."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import REFERENCE_DIR
from random_networks import clusters, host_fabrics, random_topologies

import tacos
from tacos import combining_bound
from tacos.collective import Collective, CollectiveKind
from tacos.combining_bound import combining_bound_us
from tacos.latency_cuts import earliest_to_spread, soonest_arrivals

AR = CollectiveKind.ALL_REDUCE
HTSIM_TREE = REFERENCE_DIR / "astra-sim" / "network" / "htsim" / "8nodes.topo"


@pytest.mark.skipif(not HTSIM_TREE.is_file(), reason="reference files absent")
def test_a_host_takes_in_the_far_pods_sums_only_once_they_can_be_gathered():
    # htsim's 8-host tree, one 1 MiB chunk per host: a link takes 42.94 us a chunk, a core
    # link 84.89. Host 0 needs, for each of the 8 chunks, the data of the 4 hosts of the
    # other pod, 341.54 us away. A message from there can carry one host's data at once,
    # two (a rack-mate's too) after 85.89 us, all four after 171.77 (the other rack's
    # two): it reaches host 0 at 341.54, 427.43 and 513.32 us at the soonest. Host 0's one
    # link takes in a message every 42.94 us: by 770.97 us the 7 latest can bring 4 each,
    # the 2 before them 2 each: 32 = 8 chunks x 4. The cut bounds give 644.15.
    topo = tacos.load_topology(str(HTSIM_TREE))
    spec = Collective(AR, tuple(topo.npus), 1, 2**20)
    host = 2**20 / (200e9 / 8) * 1e6 + 1
    core = 2**20 / (100e9 / 8) * 1e6 + 1
    far = 4 * host + 2 * core
    bounds = tacos.lower_bounds(topo, spec)
    assert bounds.combining_us == pytest.approx(far + 10 * host)
    assert bounds.best_us == bounds.combining_us
    assert bounds.latency_cut_us == pytest.approx(644.1456)


def test_the_latest_transfers_are_counted_as_carrying_the_most():
    # One link, a transfer every 2 us, able to bring 1 contribution from 1 us and 3 from
    # 4 us: by 6 us the transfers ending at 6, 4 and 2 bring 3 + 3 + 1 = 7.
    first, step = combining_bound._entries(np.array([[1.0, 4.0, 4.0]]), np.array([2.0]))
    assert earliest_to_spread(first, step, 7, np.zeros(1)) == 6.0
    assert earliest_to_spread(first, step, 8, np.zeros(1)) == 7.0  # 7, 5, 3 (3 + 3 + 1) and 1
    assert soonest_arrivals(first, step, 8)[-2:].tolist() == [6.0, 7.0]


def test_it_holds_for_all_reduce_on_small_enough_networks_only(monkeypatch):
    topo = tacos.load_topology("dgx:2x4")
    for kind in CollectiveKind:
        if kind is not AR:
            spec = Collective(kind, tuple(topo.npus), 1, 2**20, root=0 if kind.rooted else None)
            assert combining_bound_us(topo, spec) == 0.0
    spec = Collective(AR, tuple(topo.npus), 1, 2**20)
    assert combining_bound_us(topo, spec) > 0.0
    monkeypatch.setattr(combining_bound, "MAX_NPUS", 7)
    assert combining_bound_us(topo, spec) == 0.0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(clusters(), random_topologies(switch=True), host_fabrics()),
    st.integers(1, 3),
    st.sampled_from([4096, 2**20]),
    st.booleans(),
)
def test_no_schedule_beats_it(topo, chunks, size, subset):
    # TACOS and every classic algorithm (``best`` builds them all when none meets the bound),
    # over every NPU or over all but one of them (which may then relay).
    ranks = tuple(topo.npus)[: -1 if subset and topo.num_npus > 2 else None]
    spec = Collective(AR, ranks, chunks, size)
    bound = combining_bound_us(topo, spec)
    schedule = tacos.synthesize(topo, spec, algorithm="best")
    times = [schedule.collective_time_us, *schedule.meta.get("candidates_us", {}).values()]
    assert min(times) >= bound * (1 - 1e-9)


def test_a_gpu_knows_other_servers_data_only_once_its_servers_nics_brought_it():
    # dgx:4x8, the 24 GPUs outside server 0. By distances alone GPU 8 (server 1) could know
    # all of them at 77.46 us, once the farthest one's data could be there. But 16 are
    # outside its server, and they come in over its NIC links one message at a time, each
    # carrying at most what its sender knew: the sums of 8 from the two other servers
    # (summed inside them by 10.8 us) reach GPU 8 at 82.8 us at the soonest.
    topo = tacos.load_topology("dgx:4x8")
    links = combining_bound._Links(topo, 2**20)
    far = np.arange(8, 32)
    server = np.zeros(topo.num_nodes, bool)
    server[[*range(8, 16), 65]] = True  # its GPUs and their NVSwitch
    alone = links.knowing_us(far, [])
    grouped = links.knowing_us(far, [server])
    assert (grouped >= alone).all()
    assert alone[8, -1] == pytest.approx(77.46, abs=0.01)
    assert grouped[8, -1] == pytest.approx(82.8, abs=0.05)
    spec = Collective(AR, tuple(topo.npus), 1, 2**20)
    # 196.0 without; 200.65 if the last GPU of a server could hear one NVSwitch hop after the
    # first, where it is five (:func:`tacos.latency_cuts.knowing_us`).
    assert combining_bound_us(topo, spec) == pytest.approx(204.06, abs=0.01)
