"""The cost model: the paper's links stay the default; pipelined links and reduction costs
are used alike by synthesis, the replay, the verifier, the bounds and the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import tacos
from tacos.cli import main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.linkmodel import CostModel
from tacos.schedule import Op, Schedule
from tacos.topology import Topology

K = CollectiveKind
PIPELINED = CostModel("pipelined")


def synthesized(spec: str, kind: CollectiveKind, cost: CostModel, chunks: int = 1) -> Schedule:
    topology = tacos.from_spec(spec).with_cost(cost)
    return tacos.synthesize(topology, Collective(kind, tuple(topology.npus), chunks, 2**20))


def test_default_schedules_do_not_mention_the_cost_model():
    schedule = synthesized("ring:4", K.ALL_REDUCE, CostModel())
    assert "cost" not in schedule.to_json()
    assert Topology.from_dict(schedule.topology.to_dict()).cost == CostModel()


@pytest.mark.parametrize("cost", [PIPELINED, CostModel("paper", 20.0), CostModel("pipelined", 8)])
@pytest.mark.parametrize("kind", [K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_REDUCE, K.BROADCAST])
@pytest.mark.parametrize("spec", ["ring:6", "switch:5", "torus2d:3x3"])
def test_every_model_synthesizes_schedules_that_verify_and_replay_to_the_bit(spec, kind, cost):
    schedule = synthesized(spec, kind, cost, chunks=2)
    assert tacos.verify(schedule).ok, tacos.verify(schedule).summary()
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
    again = Schedule.from_json(schedule.to_json())
    assert again.topology.cost == cost and tacos.verify(again).ok


def test_a_pipelined_link_takes_the_next_chunk_after_serialization_only():
    schedule = synthesized("ring:4", K.ALL_GATHER, PIPELINED, chunks=3)
    link = schedule.topology.links[0]
    on_link = sorted((t.start, t.end) for t in schedule.transfers if t.link == 0)
    serialization = PIPELINED.busy_us(link, 2**20)
    gaps = [b[0] - a[0] for a, b in zip(on_link, on_link[1:], strict=False)]
    assert min(gaps) == pytest.approx(serialization)
    assert all(end - start == pytest.approx(link.transfer_time_us(2**20)) for start, end in on_link)
    paper = synthesized("ring:4", K.ALL_GATHER, CostModel(), chunks=3)
    assert schedule.collective_time_us < paper.collective_time_us


def test_reductions_take_bytes_over_the_reduce_bandwidth_before_their_result_is_used():
    free = synthesized("ring:4", K.REDUCE_SCATTER, CostModel())
    costly = synthesized("ring:4", K.REDUCE_SCATTER, CostModel("paper", 50.0))
    reduce_us = 2**20 / (50.0 * 2**30) * 1e6
    for t in costly.transfers:
        needed = costly.topology.links[t.link].transfer_time_us(2**20)
        assert t.end - t.start == pytest.approx(needed + (reduce_us if t.op is Op.REDUCE else 0))
    # on a ring of 4 each chunk is reduced along chains of two messages, from both sides
    link_us = free.topology.links[0].transfer_time_us(2**20)
    assert free.collective_time_us == pytest.approx(2 * link_us)
    assert costly.collective_time_us == pytest.approx(2 * (link_us + reduce_us))


def test_the_verifier_checks_the_model_the_schedule_was_made_for():
    pipelined = synthesized("ring:4", K.ALL_GATHER, PIPELINED, chunks=3)
    # read with the paper's links, consecutive chunks on a link overlap
    as_paper = replace(pipelined, topology=pipelined.topology.with_cost(CostModel()))
    report = tacos.verify(as_paper)
    assert not report.ok and "overlap" in report.errors[0]
    # a reduction that does not leave time to reduce is too short
    costly = synthesized("ring:4", K.REDUCE_SCATTER, CostModel("paper", 50.0))
    hurried = replace(costly, topology=costly.topology.with_cost(CostModel("paper", 1.0)))
    assert any("shorter than the link allows" in e for e in tacos.verify(hurried).errors)


def test_the_compiled_engine_keeps_to_the_default_model():
    topology = tacos.from_spec("ring:4").with_cost(PIPELINED)
    spec = Collective(K.ALL_GATHER, tuple(topology.npus))
    with pytest.raises(TacosError, match="fast engine cannot .* pipelined links"):
        tacos.synthesize(topology, spec, engine="fast")
    assert tacos.synthesize(topology, spec, engine="auto").meta["engine"] == "reference"


def test_bounds_stay_below_pipelined_schedules():
    for spec in ("switch:8", "ring:8"):
        schedule = synthesized(spec, K.ALL_GATHER, PIPELINED, chunks=2)
        bound = tacos.lower_bounds(schedule.topology, schedule.collective).best_us
        assert bound <= schedule.collective_time_us


def test_command_line_synthesizes_simulates_and_bounds_with_the_model(tmp_path, capsys):
    out = tmp_path / "s.json"
    argv = ["synthesize", "--topology", "switch:4", "--collective", "all-reduce", "-q",
            "--link-model", "pipelined", "--reduce-bandwidth", "100", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    cost = json.loads(out.read_text())["topology"]["cost"]
    assert cost == {"link_model": "pipelined", "reduce_bandwidth_GBps": 100.0}
    capsys.readouterr()
    assert main(["simulate", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["matches_recorded"] and data["cost"] == cost
    assert main(["simulate", str(out), "--link-model", "paper", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective_time_us"] > data["recorded_time_us"]  # the paper's links are slower


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_reduce_bandwidth_is_a_one_line_error(value, capsys):
    code = main(["synthesize", "--topology", "ring:4", "--reduce-bandwidth", value])
    err = capsys.readouterr().err
    assert code == 2 and f"reduce bandwidth {value}" in err and err.count("\n") == 1


def test_a_reduction_slower_than_any_real_one_is_refused_when_it_is_used(capsys):
    argv = ["synthesize", "--topology", "ring:4", "--reduce-bandwidth", "1e-300"]
    assert main([*argv, "--collective", "all-gather"]) == 0  # nothing to reduce
    capsys.readouterr()
    assert main([*argv, "--collective", "all-reduce"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use a realistic reduce bandwidth" in err


def test_an_unknown_link_model_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["synthesize", "--topology", "ring:4", "--link-model", "held"])
    assert stop.value.code == 2 and "invalid choice: 'held'" in capsys.readouterr().err
