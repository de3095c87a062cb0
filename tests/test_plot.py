"""tacos plot: link timelines, chunk arrivals and topologies of schedules; sweep ratio curves."""

import dataclasses
import random
import time

import numpy as np
import pytest
from matplotlib.figure import Figure

import tacos
from tacos.cli import main
from tacos.plot import (
    draw_arrivals,
    draw_timeline,
    draw_topology,
    save_figure,
    schedule_figure,
    sweep_figure,
)
from tacos.schedule import Schedule, Transfer
from tacos.sweep import COLUMNS, SweepPoint, build_topology
from tacos.topology import Link, Topology


def synthesized(topology, kind=tacos.CollectiveKind.ALL_REDUCE, chunks=2):
    spec = tacos.Collective(kind, tuple(topology.npus), chunks, 2**16)
    return tacos.synthesize(topology, spec, seed=0)


def star(npus=3):
    """NPUs 0..npus-1 around one switch (node ``npus``)."""
    links = [Link(a, b, 50.0, 0.5) for i in range(npus) for a, b in ((i, npus), (npus, i))]
    return Topology(npus, tuple(links), num_switches=1, name="star")


def axes():
    return Figure().add_subplot()


@pytest.fixture(scope="module")
def schedule():
    return synthesized(tacos.from_spec("mesh2d:2x3"))


# ---------------------------------------------------------------- timeline
def test_the_timeline_draws_one_bar_per_transfer_over_its_time_on_its_links_row(schedule):
    ax = axes()
    bars = draw_timeline(ax, schedule)
    paths = bars.get_paths()
    assert len(ax.collections) == 1 and len(paths) == len(schedule.transfers) > 0
    for transfer, path in zip(schedule.transfers, paths, strict=True):
        box = path.get_extents()
        assert (box.x0, box.x1) == (transfer.start, transfer.end)
        assert (box.y0 + box.y1) / 2 == pytest.approx(transfer.link)  # the link's row
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [f"{lk.src}→{lk.dst}" for lk in schedule.topology.links]


def test_bars_are_coloured_by_chunk_or_by_the_npu_the_chunk_comes_from(schedule):
    by_chunk = draw_timeline(axes(), schedule, "chunk").get_array()
    by_source = draw_timeline(axes(), schedule, "source").get_array()
    collective = schedule.collective
    assert list(by_chunk) == [t.chunk for t in schedule.transfers]
    assert list(by_source) == [collective.owner(t.chunk) for t in schedule.transfers]
    assert len(set(by_source)) == collective.num_ranks < len(set(by_chunk))


def test_a_100k_transfer_timeline_renders_in_seconds(tmp_path):
    topology = tacos.from_spec("torus2d:16x16")
    spec = tacos.Collective(tacos.CollectiveKind.ALL_GATHER, tuple(topology.npus), 2, 2**20)
    rng = random.Random(0)
    per_link = 100_000 // len(topology.links) + 1
    transfers = [
        Transfer(rng.randrange(spec.num_chunks), link.src, link.dst, i, 20.0 * k, 20.0 * k + 19)
        for i, link in enumerate(topology.links)
        for k in range(per_link)
    ]
    started = time.perf_counter()
    figure = schedule_figure(Schedule(topology, spec, transfers), kind="timeline")
    save_figure(figure, tmp_path / "big.png")
    assert time.perf_counter() - started < 30  # about 2 s on one core
    (bars,) = figure.axes[0].collections
    assert len(bars.get_paths()) == len(transfers) >= 100_000


# ---------------------------------------------------------------- arrivals
def test_arrivals_put_a_tick_at_every_npu_when_a_chunk_arrives_and_none_at_switches():
    schedule = synthesized(star(), tacos.CollectiveKind.ALL_GATHER)
    into_npus = [t for t in schedule.transfers if t.dst < 3]
    assert len(into_npus) < len(schedule.transfers)  # some transfers end at the switch
    ticks = draw_arrivals(axes(), schedule)
    offsets = np.asarray(ticks.get_offsets())
    assert offsets.tolist() == [[t.end, t.dst] for t in into_npus]
    assert list(ticks.get_array()) == [t.chunk for t in into_npus]


# ---------------------------------------------------------------- topology
def test_the_topology_has_every_node_and_one_line_per_linked_pair_width_by_bandwidth():
    point = SweepPoint(
        "mesh2d:2x3", tacos.CollectiveKind.ALL_GATHER, 1024, 1, bandwidth=(100.0, 25.0)
    )
    topology = build_topology(point)
    lines, nodes = draw_topology(axes(), topology)
    segments = lines.get_segments()
    pairs = {(min(lk.src, lk.dst), max(lk.src, lk.dst)) for lk in topology.links}
    assert len(segments) == len(pairs) == 7
    assert [len(n.get_offsets()) for n in nodes] == [6]
    widths = dict(zip(sorted(pairs), lines.get_linewidths(), strict=True))
    fast = {widths[p] for p in pairs if p[1] - p[0] == 1}  # along dimension 0
    slow = {widths[p] for p in pairs if p[1] - p[0] == 2}
    assert len(fast) == len(slow) == 1 and fast.pop() > slow.pop()


def test_switches_are_drawn_apart_from_npus():
    lines, (npus, switches) = draw_topology(axes(), star(4))
    assert (len(npus.get_offsets()), len(switches.get_offsets())) == (4, 1)
    assert len(lines.get_segments()) == 4
    hub, around = switches.get_offsets()[0], npus.get_offsets().mean(axis=0)
    assert np.allclose(hub, around, atol=1e-6)


def test_wrap_around_links_of_a_torus_bow_around_the_nodes_they_would_cross():
    topology = tacos.from_spec("torus2d:3x3")
    lines, _ = draw_topology(axes(), topology)
    pairs = sorted({(min(lk.src, lk.dst), max(lk.src, lk.dst)) for lk in topology.links})
    for (u, v), segment in zip(pairs, lines.get_segments(), strict=True):
        wraps = v - u in (2, 6)  # 0<->2 along a row, 0<->6 along a column
        assert (len(segment) > 2) == wraps


def test_the_layout_follows_the_structure_not_the_name():
    torus = dataclasses.replace(tacos.from_spec("torus2d:3x3"), name="my cluster")
    lines, _ = draw_topology(axes(), torus)
    assert any(len(segment) > 2 for segment in lines.get_segments())  # laid out as a grid


# ---------------------------------------------------------------- figures
@pytest.mark.parametrize(("kind", "panels"), [("all", 3), ("timeline", 1), ("topology", 1)])
def test_one_figure_holds_the_panels_asked_for(schedule, kind, panels):
    figure = schedule_figure(schedule, kind=kind)
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert len(titles) == panels


def test_equal_figures_give_equal_files(schedule, tmp_path):
    for name in ("a.svg", "b.svg", "a.png", "b.png"):
        save_figure(schedule_figure(schedule, kind="timeline"), tmp_path / name)
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def sweep_row(topology, collective, size, ratio, npus="4", error=""):
    row = dict.fromkeys(COLUMNS, "")
    row.update(topology=topology, collective=collective, collective_bytes=str(size),
               ratio=str(ratio), npus=npus, error=error)  # fmt: skip
    return row


def test_a_sweep_plots_the_mean_ratio_by_size_per_topology_and_by_npus_per_collective():
    rows = [
        sweep_row("ring:4", "all-gather", 1024, 1.0),
        sweep_row("ring:4", "all-gather", 1024, 1.5),  # another seed: averaged
        sweep_row("ring:4", "all-gather", 4096, 1.25),
        sweep_row("mesh2d:2x4", "all-gather", 1024, 2.0, npus="8"),
        sweep_row("split.csv", "all-gather", 1024, "", error="disconnected"),
    ]
    by_size, by_npus = sweep_figure(rows).axes
    curves = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
              for line in by_size.get_lines() if not line.get_label().startswith("_")}  # fmt: skip
    assert curves == {
        "ring:4 all-gather": ([1024, 4096], [1.25, 1.25]),
        "mesh2d:2x4 all-gather": ([1024], [2.0]),
    }
    (npus_curve,) = [line for line in by_npus.get_lines() if line.get_label() == "all-gather"]
    assert list(npus_curve.get_xdata()) == [4, 8]
    assert list(npus_curve.get_ydata()) == pytest.approx([(1.0 + 1.5 + 1.25) / 3, 2.0])


# ------------------------------------------------------------------ the CLI
def test_the_cli_writes_png_and_svg_from_a_schedule_and_a_sweep(schedule, tmp_path, capsys):
    schedule.save(tmp_path / "s.json")
    assert main(["plot", str(tmp_path / "s.json"), "-o", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes().startswith(b"\x89PNG\r\n")
    argv = ["plot", str(tmp_path / "s.json"), "-o", str(tmp_path / "t.svg"), "--kind", "timeline",
            "--color-by", "source"]  # fmt: skip
    assert main(argv) == 0
    assert b"<svg" in (tmp_path / "t.svg").read_bytes()
    table = tmp_path / "sweep" / "results.csv"
    table.parent.mkdir()
    row = sweep_row("ring:4", "all-gather", 1024, 1.0)
    table.write_text(",".join(COLUMNS) + "\n" + ",".join(row.values()) + "\n")
    assert main(["plot", str(table.parent), "-o", str(tmp_path / "r.png")]) == 0
    assert (tmp_path / "r.png").stat().st_size > 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {tmp_path / 'r.png'}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{d}/s.json", "-o", "{d}/s.gif"], "s.gif: use a .png, .svg or .pdf output file"),
        (["{d}/results.csv", "-o", "{d}/r.png", "--kind", "timeline"], "--kind timeline draws"),
        (["{d}/missing.json", "-o", "{d}/m.png"], "missing.json: cannot read schedule"),
        (["{d}/results.csv", "-o", "{d}/r.png"], "no results table rows"),
    ],
)
def test_bad_plot_requests_are_one_line_and_exit_2(schedule, tmp_path, capsys, args, message):
    schedule.save(tmp_path / "s.json")
    (tmp_path / "results.csv").write_text(",".join(COLUMNS) + "\n")
    assert main(["plot", *(a.format(d=tmp_path) for a in args)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not list(tmp_path.glob("*.png")) + list(tmp_path.glob("*.gif"))


def test_tenants_are_drawn_together(tmp_path):
    """A schedule set (tenants) is drawn as the traffic they make together, once each
    tenant's schedule verifies."""
    schedules = tmp_path / "tenants.json"
    assert main(["synthesize", "--topology", "dgx:2x4", "--collective", "all-reduce",
                 "--groups", "0-3;4-7", "-o", str(schedules)]) == 0  # fmt: skip
    assert main(["plot", str(schedules), "-o", str(tmp_path / "tenants.png")]) == 0
    assert (tmp_path / "tenants.png").stat().st_size > 0


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_a_plot_is_the_same_file_every_time(tmp_path, suffix):
    schedule = tmp_path / "s.json"
    assert main(["synthesize", "--topology", "ring:4", "-o", str(schedule), "-q"]) == 0
    made = []
    for name in ("a", "b"):
        assert main(["plot", str(schedule), "-o", str(tmp_path / f"{name}{suffix}")]) == 0
        made.append((tmp_path / f"{name}{suffix}").read_bytes())
        time.sleep(1.1)  # a date stamp would now differ
    assert made[0] == made[1]
