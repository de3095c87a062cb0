"""Importers: each reads one external format into a Topology or a Schedule.

Installed as ``tacos.importers``. The registry says which importer reads which file:

* topologies by file suffix (:data:`TOPOLOGY_IMPORTERS`): ASTRA-sim analytical
  network ``.yml``/``.yaml``, ns-3 topology ``.txt``, htsim fat tree ``.topo``.
  :func:`tacos.topology.load_topology` (and so every ``--topology`` option)
  goes through :func:`import_topology` for these suffixes;
* schedules by format name (:data:`SCHEDULE_IMPORTERS`), as ``tacos verify
  --format``, ``tacos-export --from`` and ``tacos import`` name them: ``chakra``
  reads an ET set ``PREFIX.<rank>.et``.

A topology importer is ``read(text, source) -> TopologyImport``; a schedule
importer is ``read(source, *, collective, topology) -> Schedule``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tacos.collective import CollectiveKind
from tacos.errors import TacosError
from tacos.importers import astrasim, chakra, htsim, msccl, ns3
from tacos.importers.base import TopologyImport
from tacos.schedule import Schedule
from tacos.topology import Topology

TopologyReader = Callable[[str, str], TopologyImport]


class ScheduleReader(Protocol):
    def __call__(
        self,
        source: str | Path,
        *,
        collective: CollectiveKind | None = None,
        topology: Topology | None = None,
    ) -> Schedule: ...


TOPOLOGY_IMPORTERS: dict[str, TopologyReader] = {
    ".yml": astrasim.read_network,
    ".yaml": astrasim.read_network,
    ".txt": ns3.read_topology,
    ".topo": htsim.read_topology,
}
SCHEDULE_IMPORTERS: dict[str, ScheduleReader] = {
    chakra.FORMAT_NAME: chakra.import_schedule,
    "msccl": msccl.import_schedule,
}
SCHEDULE_SUFFIXES: dict[str, str] = {".et": chakra.FORMAT_NAME, ".xml": "msccl"}
"""File suffix -> schedule format; any other path is taken for a Chakra ET prefix."""


def reads_topology(path: str | Path) -> bool:
    """Whether ``path`` names a topology file one of the importers reads (by suffix)."""
    return Path(path).suffix.lower() in TOPOLOGY_IMPORTERS


def import_topology(path: str | Path) -> TopologyImport:
    """Read a topology file with the importer its suffix selects."""
    path = Path(path)
    reader = TOPOLOGY_IMPORTERS.get(path.suffix.lower())
    if reader is None:
        known = ", ".join(TOPOLOGY_IMPORTERS)
        raise TacosError(f"{path}: no topology importer reads this file; use one of {known}")
    if not path.is_file():
        raise TacosError(f"{path}: no such topology file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read: {err}") from None
    return reader(text, str(path))


def schedule_format_of(path: str | Path) -> str:
    """The schedule format a path names (see :data:`SCHEDULE_SUFFIXES`)."""
    return SCHEDULE_SUFFIXES.get(Path(path).suffix.lower(), chakra.FORMAT_NAME)


def import_schedule(
    import_format: str,
    source: str | Path,
    *,
    collective: CollectiveKind | None = None,
    topology: Topology | None = None,
) -> Schedule:
    """Read a schedule with the importer registered as ``import_format``."""
    reader = SCHEDULE_IMPORTERS.get(import_format)
    if reader is None:
        known = ", ".join(sorted(SCHEDULE_IMPORTERS))
        raise TacosError(f"unknown import format {import_format!r}: use one of {known}")
    return reader(source, collective=collective, topology=topology)


__all__ = [
    "SCHEDULE_IMPORTERS",
    "SCHEDULE_SUFFIXES",
    "TOPOLOGY_IMPORTERS",
    "ScheduleReader",
    "TopologyImport",
    "TopologyReader",
    "import_schedule",
    "import_topology",
    "reads_topology",
    "schedule_format_of",
]
