"""Export a Schedule as the versioned IR JSON (``tacos-export --format json``).

``-o DIR`` writes ``DIR/schedule.json``; ``-o FILE.json`` writes that file.
"""

from __future__ import annotations

from pathlib import Path

from tacos.exporters.base import ExportOptions, ExportResult
from tacos.output import write_text_atomic
from tacos.schedule import Schedule

FORMAT_NAME = "json"


def export(schedule: Schedule, out: Path, options: ExportOptions) -> ExportResult:
    """Write the schedule JSON; the file is replaced atomically."""
    target = out if out.suffix.lower() == ".json" else out / "schedule.json"
    write_text_atomic(target, schedule.to_json())
    return ExportResult(files=[target], ranks=schedule.collective.num_ranks)
