"""The format registry: one entry per format, found by name and by file suffix."""

from __future__ import annotations

import argparse

import pytest

from tacos.errors import TacosError
from tacos.registry import (
    FORMATS,
    checkers,
    import_schedule,
    names_topology_file,
    reads_topology,
    schedule_format_of,
    schedule_formats,
    writers,
)


def test_names_and_suffixes_each_name_one_format():
    names = [f.name for f in FORMATS]
    suffixes = [s for f in FORMATS for s in f.suffixes]
    assert len(set(names)) == len(names) and len(set(suffixes)) == len(suffixes)
    assert all(s == s.lower() and s.startswith(".") for s in suffixes)


def test_every_format_does_something():
    for entry in FORMATS:
        assert entry.topology_reader or entry.schedule_reader or entry.writer, entry.name


def test_what_each_command_offers():
    assert sorted(writers()) == ["chakra", "json", "msccl"]
    assert schedule_formats() == ["chakra", "msccl"]
    assert sorted(checkers()) == ["msccl"]


@pytest.mark.parametrize(
    ("path", "topology", "schedule_format"),
    [
        ("net.yml", True, "chakra"),
        ("net.YAML", True, "chakra"),
        ("ring.txt", True, "chakra"),
        ("fat.topo", True, "chakra"),
        ("algo.xml", False, "msccl"),
        ("traces/x.0.et", False, "chakra"),
        ("traces/x", False, "chakra"),
        ("ring.csv", False, "chakra"),
    ],
)
def test_a_path_is_recognised_by_its_suffix(path, topology, schedule_format):
    assert reads_topology(path) is topology
    assert schedule_format_of(path) == schedule_format


def test_topology_files_are_told_from_specs():
    for name in ("net.yml", "ring.csv", "grid.json", "fat.topo"):
        assert names_topology_file(name)
    for spec in ("ring:8", "dgx:2x8,nic=25", "xgmi:2x4,xgmi=0.5"):
        assert not names_topology_file(spec)


def test_each_writer_builds_its_typed_options_from_the_arguments_it_adds():
    parser = argparse.ArgumentParser()
    for name, writer in writers().items():
        writer.add_arguments(parser.add_argument_group(name))
    args = parser.parse_args(["--nchannels", "2", "--proto", "LL", "--force"])
    options = {name: writer.options_from_args(args) for name, writer in writers().items()}
    assert (options["msccl"].nchannels, options["msccl"].proto) == (2, "LL")
    assert options["chakra"].force is True


def test_an_unknown_import_format_names_the_known_ones():
    with pytest.raises(TacosError, match="use one of chakra, msccl"):
        import_schedule("nccl", "x.xml")
