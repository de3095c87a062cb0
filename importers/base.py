"""What readers return and declare, so the registry and the CLI treat formats alike.

Other tools number and describe nodes their own way: ns-3 lets switch ids sit
between NPU ids, htsim builds a fat tree from per-tier radixes. A
:class:`Topology` always numbers NPUs first and switches after them, so an
importer returns the topology together with the file's own id of every node
(when they differ) and notes on the modelling choices it made.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from tacos.collective import CollectiveKind
from tacos.formats.arguments import ArgumentAdder
from tacos.linkmodel import KEEP_COST, CostChoice
from tacos.schedule import Schedule
from tacos.topology import GIB, Link, Topology

OptionsT = TypeVar("OptionsT")


class TopologyReader(Protocol):
    """Reads a topology file's text (``source`` names it in errors)."""

    def __call__(self, text: str, source: str) -> TopologyImport: ...


class ScheduleReader(Protocol):
    """Reads a schedule; the keywords are what the command line says (None: the file's).

    ``chunk_bytes`` sizes chunks of formats that do not say (MSCCL XML); ``cost``
    overrides the cost model (:mod:`tacos.linkmodel`) the schedule is timed with.
    """

    def __call__(
        self,
        source: str | Path,
        /,
        *,
        collective: CollectiveKind | None = None,
        topology: Topology | None = None,
        chunk_bytes: int | None = None,
        cost: CostChoice = KEEP_COST,
    ) -> Schedule: ...


@dataclass(frozen=True)
class FileCheck:
    """A format's verdict on one of its files, judged by the file alone (``tacos verify``)."""

    ok: bool
    data: dict[str, Any]
    text: str


@dataclass(frozen=True)
class Checker(Generic[OptionsT]):
    """A format's check of its own files, with the options it adds to ``tacos verify``."""

    add_arguments: Callable[[ArgumentAdder], None]
    options_from_args: Callable[[argparse.Namespace], OptionsT]
    check: Callable[[Path, OptionsT], FileCheck]


@dataclass(frozen=True)
class TopologyImport:
    """A topology read from a file.

    ``file_ids[i]`` is the id the file gave our node ``i``; None when the ids are
    the same (or the file gives switches no ids at all). ``notes`` say how the
    file was modelled, for ``tacos import`` to show.
    """

    topology: Topology
    format: str
    file_ids: tuple[int, ...] | None = None
    notes: tuple[str, ...] = ()

    def renumbered(self) -> dict[int, int]:
        """File id -> our id, for the nodes whose id changed."""
        if self.file_ids is None:
            return {}
        return {old: new for new, old in enumerate(self.file_ids) if old != new}

    def link_classes(self) -> list[dict[str, Any]]:
        """Distinct (bandwidth, latency) pairs with their directed-link counts, fastest first."""
        counts = Counter((lk.bandwidth_GBps, lk.latency_us) for lk in self.topology.links)
        return [
            {"bandwidth_GBps": bandwidth, "latency_us": latency, "links": count}
            for (bandwidth, latency), count in sorted(
                counts.items(), key=lambda kv: (-kv[0][0], kv[0][1])
            )
        ]

    def describe(self) -> str:
        """A few lines for people: counts, link classes, renumbering, notes."""
        topo = self.topology
        lines = [
            f"{topo.name}: {self.format}, {topo.num_npus} NPUs, {topo.num_switches} switches, "
            f"{len(topo.links)} directed links"
        ]
        lines += [
            f"  {c['links']} links at {c['bandwidth_GBps']:.6g} GB/s, {c['latency_us']:.6g} us"
            for c in self.link_classes()
        ]
        moved = self.renumbered()
        if moved:
            shown = ", ".join(f"{old}->{new}" for old, new in list(moved.items())[:12])
            more = f" and {len(moved) - 12} more" if len(moved) > 12 else ""
            lines.append(f"  renumbered (file id->ours): {shown}{more}")
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """The figures ``tacos import --json`` prints."""
        topo = self.topology
        return {
            "kind": "topology",
            "format": self.format,
            "name": topo.name,
            "npus": topo.num_npus,
            "switches": topo.num_switches,
            "links": len(topo.links),
            "link_classes": self.link_classes(),
            "renumbered": {str(old): new for old, new in self.renumbered().items()},
            "notes": list(self.notes),
        }


def cable(a: int, b: int, bandwidth_GBps: float, latency_us: float) -> tuple[Link, Link]:
    """A bidirectional cable: one directed link each way with the same speed."""
    return Link(a, b, bandwidth_GBps, latency_us), Link(b, a, bandwidth_GBps, latency_us)


def bits_per_second_to_GBps(bits_per_second: float) -> float:
    """Network rates are quoted in bits/s with decimal prefixes; a Topology wants GB/s of 2**30."""
    return bits_per_second / 8 / GIB
