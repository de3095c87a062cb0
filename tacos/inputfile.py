"""Input files users name are files: a device, FIFO or directory is refused before reading.

``tacos verify /dev/zero`` (or a ``schedule.json`` that is a link to it) would read
forever and end killed for want of memory; a FIFO can block the command for good.
Every reader of a whole input file calls :func:`require_file` first, and then
reads and reports its own errors as before.

Example:
    >>> try:
    ...     require_file("/dev/null", "schedule")
    ... except TacosError as err:
    ...     print(err)
    /dev/null: is not a regular file (a device, FIFO, socket or directory); give a schedule file
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tacos.errors import TacosError


def require_file(path: str | os.PathLike[str], what: str) -> None:
    """Refuse ``path`` unless it is a regular file (links followed) or does not exist
    (the reader then says so in its own words)."""
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        raise TacosError(f"{os.fspath(path)}: cannot read the {what}: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        raise TacosError(
            f"{os.fspath(path)}: is not a regular file (a device, FIFO, socket or directory); "
            f"give a {what} file"
        )
