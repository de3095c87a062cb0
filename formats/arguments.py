"""Where a format's command-line options go: readers and writers add their own.

Each format declares its options as a frozen dataclass and a function that adds
them to the command line (``add_arguments(parser)``); the registry hands that
function the ``tacos`` or ``tacos-export`` parser's group for the format.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol


class ArgumentAdder(Protocol):
    """An argparse parser or argument group: both take ``add_argument``."""

    def add_argument(self, *names: str, **settings: Any) -> argparse.Action: ...
