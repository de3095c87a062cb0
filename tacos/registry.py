"""The format registry: every external format by name and file suffix.

One table (:data:`FORMATS`) says what each format can do: read a topology,
read a schedule, check its own files, write a schedule. The CLI (and the
front door ``tacos.load_topology``, and sweeps) find readers and writers here
and nowhere else, and the core never imports a format. A new format is a
model in ``formats/``, a reader in ``importers/`` and/or a writer in
``exporters/``, and one :class:`Format` entry below.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tacos.collective import CollectiveKind
from tacos.errors import TacosError
from tacos.exporters import chakra as chakra_writer
from tacos.exporters import ir_json
from tacos.exporters import msccl as msccl_writer
from tacos.exporters import workload as workload_writer
from tacos.exporters.base import Writer
from tacos.exporters.workload import WorkloadWriter
from tacos.formats.astrasim import AnalyticalNetwork, parse_network
from tacos.importers import astrasim, htsim, ns3
from tacos.importers import chakra as chakra_reader
from tacos.importers import msccl as msccl_reader
from tacos.importers import workload as workload_reader
from tacos.importers.base import Checker, ScheduleReader, TopologyImport, TopologyReader
from tacos.inputfile import require_file
from tacos.linkmodel import KEEP_COST, CostChoice
from tacos.schedule import Schedule
from tacos.topology import (
    DEFAULT_BANDWIDTH_GBPS,
    DEFAULT_LATENCY_US,
    TOPOLOGY_FILE_SUFFIXES,
    Topology,
)
from tacos.topology import load_topology as load_generated_or_tacos_topology
from tacos.topology import read_topology_file as read_tacos_topology_file


@dataclass(frozen=True)
class Format:
    """One external format and what tacos does with it.

    ``suffixes`` are the file suffixes that name it (lower case). ``writer`` and
    ``checker`` are generic in their options dataclass, which differs per
    format, hence ``Any`` here; each module builds its own with matching types.
    ``workload_writer`` turns a whole training workload of the format into a bundle.
    """

    name: str
    suffixes: tuple[str, ...] = ()
    topology_reader: TopologyReader | None = None
    schedule_reader: ScheduleReader | None = None
    checker: Checker[Any] | None = None
    writer: Writer[Any] | None = None
    workload_writer: WorkloadWriter | None = None


FORMATS: tuple[Format, ...] = (
    Format(ir_json.FORMAT_NAME, writer=ir_json.WRITER),
    Format(
        chakra_reader.FORMAT_NAME,
        (".et",),
        schedule_reader=chakra_reader.import_schedule,
        writer=chakra_writer.WRITER,
        workload_writer=workload_writer.WRITER,
    ),
    Format(
        msccl_writer.FORMAT_NAME,
        (".xml",),
        schedule_reader=msccl_reader.import_schedule,
        checker=msccl_reader.CHECKER,
        writer=msccl_writer.WRITER,
    ),
    Format("astra-sim", (".yml", ".yaml"), topology_reader=astrasim.read_network),
    Format("astra-sim-json", (".json",), topology_reader=astrasim.read_json_network),
    Format("ns-3", (".txt",), topology_reader=ns3.read_topology),
    Format("htsim", (".topo",), topology_reader=htsim.read_topology),
)
"""Every format, in the order help texts list them."""

_BY_SUFFIX = {suffix: entry for entry in FORMATS for suffix in entry.suffixes}


def writers() -> dict[str, Writer[Any]]:
    """Format name -> writer, for ``tacos-export --format``."""
    return {f.name: f.writer for f in FORMATS if f.writer is not None}


def workload_writers() -> dict[str, WorkloadWriter]:
    """Format name -> the writer of whole workloads (``tacos-export --workload``)."""
    return {f.name: f.workload_writer for f in FORMATS if f.workload_writer is not None}


def schedule_formats() -> list[str]:
    """Names of the formats a schedule can be read from."""
    return [f.name for f in FORMATS if f.schedule_reader is not None]


def checkers() -> dict[str, Checker[Any]]:
    """Format name -> the check of its own files, for ``tacos verify --format``."""
    return {f.name: f.checker for f in FORMATS if f.checker is not None}


# ---------------------------------------------------------------- topologies
def reads_topology(path: str | Path) -> bool:
    """Whether ``path`` names a topology file a format's reader takes (by suffix)."""
    entry = _BY_SUFFIX.get(Path(path).suffix.lower())
    return entry is not None and entry.topology_reader is not None


def import_topology(path: str | Path) -> TopologyImport:
    """Read a topology file with the reader its suffix selects."""
    path = Path(path)
    entry = _BY_SUFFIX.get(path.suffix.lower())
    if entry is None or entry.topology_reader is None:
        known = ", ".join(s for f in FORMATS if f.topology_reader for s in f.suffixes)
        raise TacosError(f"{path}: no topology importer reads this file; use one of {known}")
    require_file(path, "topology")
    if not path.is_file():
        raise TacosError(f"{path}: no such topology file")
    try:
        text = path.read_text(encoding="utf-8-sig")  # editors on Windows add a byte order mark
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read: {err}") from None
    return entry.topology_reader(text, str(path))


def names_topology_file(name: str | Path) -> bool:
    """Whether ``name`` is a topology file by its suffix (tacos's or another tool's), not a spec."""
    return Path(name).suffix.lower() in TOPOLOGY_FILE_SUFFIXES or reads_topology(name)


def read_topology_file(path: str | Path) -> Topology:
    """Any topology file ``--topology`` accepts, as it is (connected or not)."""
    if reads_topology(path):
        return import_topology(path).topology
    return read_tacos_topology_file(path)


def load_topology(
    spec_or_path: str,
    *,
    bandwidth_GBps: float = DEFAULT_BANDWIDTH_GBPS,
    latency_us: float = DEFAULT_LATENCY_US,
) -> Topology:
    """Whatever ``--topology`` accepts, checked for connectivity: a spec, a .csv/.json
    topology, or another tool's file (ASTRA-sim network .yml, ns-3 .txt, htsim .topo)."""
    if reads_topology(spec_or_path):
        topology = import_topology(spec_or_path).topology
        topology.check_connected()
        return topology
    return load_generated_or_tacos_topology(
        spec_or_path, bandwidth_GBps=bandwidth_GBps, latency_us=latency_us
    )


def analytical_network_file(path: str | Path) -> list[AnalyticalNetwork] | None:
    """The dimensions of an ASTRA-sim network file (None for anything else): what a
    topology built from it no longer says, such as which dimension is which."""
    entry = _BY_SUFFIX.get(Path(path).suffix.lower())
    if entry is None or entry.topology_reader is not astrasim.read_network:
        return None
    return parse_network(Path(path).read_text(encoding="utf-8"), str(path))


# ---------------------------------------------------------------- workloads
read_workload = workload_reader.read_workload


# ---------------------------------------------------------------- schedules
def schedule_format_of(path: str | Path) -> str:
    """The schedule format a path names by its suffix; any other path is a Chakra ET prefix."""
    entry = _BY_SUFFIX.get(Path(path).suffix.lower())
    if entry is not None and entry.schedule_reader is not None:
        return entry.name
    return chakra_reader.FORMAT_NAME


def import_schedule(
    import_format: str,
    source: str | Path,
    *,
    collective: CollectiveKind | None = None,
    topology: Topology | None = None,
    chunk_bytes: int | None = None,
    cost: CostChoice = KEEP_COST,
) -> Schedule:
    """Read a schedule with the reader of the format named ``import_format``."""
    reader = next(
        (f.schedule_reader for f in FORMATS if f.name == import_format and f.schedule_reader),
        None,
    )
    if reader is None:
        known = ", ".join(sorted(schedule_formats()))
        raise TacosError(f"unknown import format {import_format!r}: use one of {known}")
    return reader(
        source, collective=collective, topology=topology, chunk_bytes=chunk_bytes, cost=cost
    )
