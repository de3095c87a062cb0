"""What every writer declares and returns, so the registry and the CLI treat formats alike.

A writer module declares its options as a frozen dataclass (with a
``from_args`` that builds it from the parsed command line), a function that
adds those options to the command line, ``check_target`` (refuses a bad ``-o``
before a long synthesis) and ``export``; :class:`Writer` bundles the four for
the format registry (:mod:`tacos.registry`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from tacos.formats.arguments import ArgumentAdder
from tacos.schedule import Schedule

OptionsT = TypeVar("OptionsT")


@dataclass
class ExportResult:
    """What an exporter wrote, for the one-line summary."""

    files: list[Path]
    ranks: int
    nodes: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Writer(Generic[OptionsT]):
    """A format's writer: its command-line options, the check of ``-o``, the export.

    ``export`` takes every tenant's schedule (one, unless ``--groups`` made
    several); the format decides whether to write them apart or merged.
    """

    add_arguments: Callable[[ArgumentAdder], None]
    options_from_args: Callable[[argparse.Namespace], OptionsT]
    check_target: Callable[[Path, OptionsT], None]
    export: Callable[[Sequence[Schedule], Path, OptionsT], ExportResult]
