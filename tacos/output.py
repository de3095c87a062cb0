"""Atomic output: a file or directory either appears complete or not at all.

Users point exports at directories that tools like ASTRA-sim read later; a
crash half-way must not leave something that looks valid. Everything is
written next to its destination under a temporary name and renamed into place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from tacos.errors import TacosError


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    with atomic_file(path) as handle:
        handle.write(data)


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` only if the block succeeds (else it is removed).

    For outputs written piece by piece, such as streamed schedules of many GB.
    """
    path = Path(path)
    _ensure_parent(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise TacosError(f"{path}: cannot write there: {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


@contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Yield a scratch directory that replaces ``path`` only if the block succeeds.

    An existing ``path`` is replaced as a whole (never merged with stale files).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise TacosError(f"{path}: exists and is not a directory; choose another -o")
    _ensure_parent(path)
    scratch = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    os.chmod(scratch, 0o777 & ~_umask())
    try:
        yield scratch
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(scratch, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(scratch, path)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _ensure_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TacosError(f"{path}: cannot create its directory: {err}") from None


def _umask() -> int:
    """The process umask (read by setting and restoring it; there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
