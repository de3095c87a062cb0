"""Exporters: each turns a Schedule into one external format.

Installed as ``tacos.exporters``. An exporter is a module with
``export(schedule, out, options) -> ExportResult`` and ``check_target(out, options)``
(refuses a bad ``-o`` before a long synthesis); register it in :data:`EXPORTERS`
under the name ``tacos-export --format`` uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tacos.errors import TacosError
from tacos.exporters import chakra, ir_json, msccl
from tacos.exporters.base import ExportOptions, ExportResult
from tacos.schedule import Schedule


@dataclass(frozen=True)
class Exporter:
    """A format's writer and the check of its output path."""

    export: Callable[[Schedule, Path, ExportOptions], ExportResult]
    check_target: Callable[[Path, ExportOptions], None]


EXPORTERS: dict[str, Exporter] = {
    module.FORMAT_NAME: Exporter(module.export, module.check_target)
    for module in (ir_json, chakra, msccl)
}


def get_exporter(name: str) -> Exporter:
    try:
        return EXPORTERS[name]
    except KeyError:
        known = ", ".join(sorted(EXPORTERS))
        raise TacosError(f"unknown export format {name!r}: use one of {known}") from None


__all__ = ["EXPORTERS", "ExportOptions", "ExportResult", "Exporter", "get_exporter"]
