"""Columnar transfers (TransferTable) and streamed All-Gathers stand in for transfer lists."""

import json
from dataclasses import replace

import numpy as np
import pytest

import tacos
from tacos.cli import main
from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Schedule
from tacos.stream import open_stream, stream_all_gather, to_table
from tacos.synthesizer.timing import renumber
from tacos.transfers import TransferTable


@pytest.fixture(scope="module")
def all_reduce():
    topo = tacos.from_spec("torus2d:3x3")
    spec = Collective(CollectiveKind.ALL_REDUCE, tuple(topo.npus), 2, 3000)
    return tacos.synthesize(topo, spec, seed=7, engine="reference")


def test_a_table_is_the_same_sequence_as_its_list(all_reduce):
    transfers = list(all_reduce.transfers)
    table = TransferTable.from_transfers(transfers)
    assert len(table) == len(transfers)
    assert list(table) == transfers
    assert [table[i] for i in range(-3, 3)] == transfers[-3:] + transfers[:3]
    assert table[2:7] == transfers[2:7]
    assert TransferTable.from_transfers(table) is table
    with pytest.raises(IndexError):
        table[len(transfers)]


def test_json_of_a_table_is_byte_identical_to_json_of_the_list(all_reduce):
    table = TransferTable.from_transfers(list(all_reduce.transfers))
    as_table = Schedule(all_reduce.topology, all_reduce.collective, table, all_reduce.meta)
    assert as_table.to_json() == all_reduce.to_json()
    assert as_table.collective_time_us == all_reduce.collective_time_us
    again = Schedule.from_json(as_table.to_json())
    assert list(again.transfers) == list(table)


def test_take_renumbers_dependencies_like_renumber(all_reduce):
    transfers = list(all_reduce.transfers)
    order = np.random.default_rng(1).permutation(len(transfers))
    table = TransferTable.from_transfers(transfers)
    assert list(table.take(order)) == renumber(transfers, order.tolist())


def test_a_take_with_new_times_keeps_all_else_of_the_plain_take(all_reduce):
    table = TransferTable.from_transfers(list(all_reduce.transfers))
    order = np.random.default_rng(2).permutation(len(table))
    start, end = np.arange(len(table), dtype=float), np.arange(len(table)) + 0.5
    retimed = table.take(order, start=start, end=end)
    plain = table.take(order)
    expected = [replace(t, start=s, end=e) for t, s, e in zip(plain, start, end, strict=True)]
    assert list(retimed) == expected


def test_joined_tables_are_one_after_another_with_chunks_and_dependencies_shifted(all_reduce):
    transfers = list(all_reduce.transfers)
    table = TransferTable.from_transfers(transfers)
    both = TransferTable.joined([table, table], [0, 100])
    shifted = [
        replace(t, chunk=t.chunk + 100, deps=tuple(d + len(transfers) for d in t.deps))
        for t in transfers
    ]
    assert list(both) == transfers + shifted


def test_columns_must_agree_in_length():
    ints, floats = np.zeros(2, np.int64), np.zeros(2)
    with pytest.raises(ValueError, match="column 'src' has 1 rows"):
        TransferTable(ints, ints[:1], ints, ints, floats, floats, ints.astype(np.uint8),
                      np.zeros(3, np.int64), ints[:0])  # fmt: skip


def test_a_streamed_all_gather_is_the_synthesized_one(tmp_path):
    topo = tacos.from_spec("mesh2d:4x6")
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 2, 2**20)
    seen = []
    summary = stream_all_gather(
        topo,
        spec,
        tmp_path / "ag.bin",
        seed=3,
        policy="random",
        progress=lambda d, t: seen.append(d),
    )
    synthesized = tacos.synthesize(topo, spec, seed=3, policy="random")
    header, records = open_stream(tmp_path / "ag.bin")
    assert header["count"] == summary.transfers == len(records) == len(synthesized.transfers)
    assert summary.collective_time_us == synthesized.collective_time_us
    assert seen[-1] == 23 * 48
    loaded = to_table(tmp_path / "ag.bin")
    assert list(loaded.transfers) == list(synthesized.transfers)
    assert [p.name for p in tmp_path.iterdir()] == ["ag.bin"]  # no temporary file left


@pytest.mark.parametrize("spec_text", ["fat-tree:4", "dgx:8x8,nodes-per-leaf=4"])
def test_a_streamed_all_gather_takes_every_attempt_synthesize_takes(tmp_path, spec_text):
    """Hosts with one uplink (fat-tree:4) send their own chunks first or not, and on a
    switched network a path leaves its chunk to nearer nodes or only to much nearer ones
    (rails over two leaves): the stream writes the fastest, as synthesize keeps it (the
    stream once took the first only: 440.69 us on fat-tree:4 for synthesize's 420.66),
    and the trees where they are faster still (rails' All-Gather at one chunk per GPU)."""
    topo = tacos.from_spec(spec_text)
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 2**20)
    synthesized = tacos.synthesize(topo, spec, seed=0, engine="fast")
    stream_all_gather(topo, spec, tmp_path / "ag.bin", seed=0)
    streamed = to_table(tmp_path / "ag.bin").transfers
    # The records hold chunk, link and start; a switch forwarding one chunk twice leaves
    # which arrival each copy left from to the reader, so dependencies may differ.
    assert [(t.chunk, t.link, t.start, t.end) for t in streamed] == [
        (t.chunk, t.link, t.start, t.end) for t in synthesized.transfers
    ]


def test_only_all_gathers_in_scope_stream(tmp_path):
    ring = tacos.from_spec("ring:4")
    with pytest.raises(TacosError, match="only All-Gathers"):
        stream_all_gather(ring, Collective(CollectiveKind.ALL_REDUCE, (0, 1, 2, 3)), tmp_path / "x")
    with pytest.raises(TacosError, match="ranks are a subset of the NPUs"):
        stream_all_gather(ring, Collective(CollectiveKind.ALL_GATHER, (0, 2)), tmp_path / "x")
    assert not (tmp_path / "x").exists()
    (tmp_path / "junk").write_text("hello\n")
    with pytest.raises(TacosError, match="not a TACOS transfer stream"):
        open_stream(tmp_path / "junk")


def test_the_command_line_streams_an_all_gather_and_reports_it(tmp_path, capsys):
    code = main(["synthesize", "--topology", "torus2d:4x4", "--collective", "all-gather",
                 "--seed", "2", "--stream", str(tmp_path / "ag.bin"), "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    topo = tacos.from_spec("torus2d:4x4")
    spec = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), 1, 2**20)
    synthesized = tacos.synthesize(topo, spec, seed=2)
    assert code == 0
    assert report["transfers"] == len(synthesized.transfers) == 16 * 15
    assert report["collective_time_us"] == synthesized.collective_time_us
    assert report["ratio_to_bound"] >= 1.0
    assert report["stream_bytes"] == (tmp_path / "ag.bin").stat().st_size
    assert list(to_table(tmp_path / "ag.bin").transfers) == list(synthesized.transfers)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--collective", "all-reduce"], "only All-Gathers can be streamed"),
        (["--collective", "all-gather", "--groups", "0-7;8-15"], "drop --groups"),
        (["--collective", "all-gather", "--tries", "2"], "drop -o/--output, --tries"),
    ],
)
def test_streaming_what_cannot_stream_is_a_one_line_error(tmp_path, capsys, extra, message):
    code = main(["synthesize", "--topology", "ring:16", "--stream", str(tmp_path / "x.bin"),
                 *extra])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_large_take_in_two_threads_equals_the_plain_one(all_reduce, monkeypatch):
    table = TransferTable.from_transfers(list(all_reduce.transfers))
    order = np.random.default_rng(3).permutation(len(table))
    plain = table.take(order)
    monkeypatch.setattr(tacos.transfers, "PARALLEL_TAKE_ROWS", 0)
    threaded = table.take(order)
    assert list(threaded) == list(plain)
    assert np.array_equal(threaded.deps_ptr, plain.deps_ptr)
