"""Export a Schedule as the versioned IR JSON (``tacos-export --format json``).

``-o DIR`` writes ``DIR/schedule.json``; ``-o FILE.json`` writes that file.
Several tenants (``--groups``) are written as one schedule-set file, each
tenant's schedule verifiable on its own.
"""

from __future__ import annotations

from pathlib import Path

from tacos.exporters.base import ExportOptions, ExportResult
from tacos.output import check_file_in_directory, check_file_target
from tacos.schedule import Schedule, save_schedules

FORMAT_NAME = "json"


def _target(out: Path) -> Path:
    return out if out.suffix.lower() == ".json" else out / "schedule.json"


def check_target(out: Path, options: ExportOptions) -> None:
    """``-o FILE.json``, or a directory that gets ``schedule.json``."""
    target = _target(out)
    if target != out:
        check_file_in_directory(out)
    check_file_target(target)


def export(schedule: Schedule, out: Path, options: ExportOptions) -> ExportResult:
    """Write the schedule JSON; the file is replaced atomically."""
    target = _target(out)
    save_schedules(target, options.get("tenant_schedules") or [schedule])
    return ExportResult(files=[target], ranks=schedule.collective.num_ranks)
