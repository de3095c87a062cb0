"""Export a Schedule as the versioned IR JSON (``tacos-export --format json``).

``-o DIR`` writes ``DIR/schedule.json``; ``-o FILE.json`` writes that file.
Several tenants (``--groups``) are written as one schedule-set file, each
tenant's schedule verifiable on its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tacos.exporters.base import ExportResult, Writer
from tacos.formats.arguments import ArgumentAdder
from tacos.output import check_file_in_directory, check_file_target, check_named_file
from tacos.schedule import Schedule, save_schedules

FORMAT_NAME = "json"


@dataclass(frozen=True)
class JsonOptions:
    """The IR JSON has no options."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> JsonOptions:
        return cls()


def add_arguments(parser: ArgumentAdder) -> None:
    """Nothing to add: the IR is written as it is."""


SIGNATURES = (b'{\n "format": "tacos-schedule"', b'{"format": "tacos-schedule-set"')
"""How the files this writer makes begin (a schedule, a schedule set): ``schedule.json``
in a directory replaces only such a file."""


def _target(out: Path) -> Path:
    return out if out.suffix.lower() == ".json" else out / "schedule.json"


def check_target(out: Path, options: JsonOptions) -> None:
    """``-o FILE.json``, or a directory that gets ``schedule.json`` (replacing only one
    tacos wrote)."""
    target = _target(out)
    if target == out:
        check_file_target(target)
    else:
        check_file_in_directory(out)
        check_named_file(target, SIGNATURES)


def export(
    schedules: Sequence[Schedule], out: Path, options: JsonOptions = JsonOptions()
) -> ExportResult:
    """Write the schedule JSON (a schedule set for several tenants), replaced atomically."""
    target = _target(out)
    check_target(out, options)
    save_schedules(target, schedules)
    return ExportResult(files=[target], ranks=sum(s.collective.num_ranks for s in schedules))


WRITER = Writer(add_arguments, JsonOptions.from_args, check_target, export)
