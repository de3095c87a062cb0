"""What every exporter takes and returns, so the CLI treats formats alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ExportOptions:
    """Format-specific settings from the command line (``name -> value``)."""

    settings: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.settings.get(name, default)


@dataclass
class ExportResult:
    """What an exporter wrote, for the one-line summary."""

    files: list[Path]
    ranks: int
    nodes: int = 0
    notes: list[str] = field(default_factory=list)
