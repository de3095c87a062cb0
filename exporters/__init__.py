"""Exporters: each turns a Schedule into one external format.

Installed as ``tacos.exporters``. An exporter is a module with
``export(schedule, out, options) -> ExportResult``; register it in
:data:`EXPORTERS` under the name ``tacos-export --format`` uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tacos.errors import TacosError
from tacos.exporters import chakra, ir_json, msccl
from tacos.exporters.base import ExportOptions, ExportResult
from tacos.schedule import Schedule

Exporter = Callable[[Schedule, Path, ExportOptions], ExportResult]

EXPORTERS: dict[str, Exporter] = {
    ir_json.FORMAT_NAME: ir_json.export,
    chakra.FORMAT_NAME: chakra.export,
    msccl.FORMAT_NAME: msccl.export,
}


def get_exporter(name: str) -> Exporter:
    try:
        return EXPORTERS[name]
    except KeyError:
        known = ", ".join(sorted(EXPORTERS))
        raise TacosError(f"unknown export format {name!r}: use one of {known}") from None


__all__ = ["EXPORTERS", "ExportOptions", "ExportResult", "Exporter", "get_exporter"]
