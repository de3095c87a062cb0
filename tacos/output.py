"""Output files and directories: written atomically, and never at the cost of a user's data.

Users point exports at directories that tools like ASTRA-sim read later, and at
paths that already hold things. The rules, in the order a write checks them:

* **Inputs are never outputs.** Inside :func:`protect_inputs` (the CLI wraps
  every command in it) a write or removal that would hit one of the command's
  input files is refused, so ``tacos synthesize --topology t.json -o t.json``
  cannot replace its own topology with a schedule.
* **A file output replaces only a regular file.** A symbolic link is followed:
  the file it points to is replaced and the link kept. Directories, devices,
  FIFOs and sockets are refused (``-o /dev/full`` must not replace the device).
  The data goes to a temporary file beside the target, renamed over it only
  when complete, so a crash or a full disk leaves the old file as it was.
* **A file named by tacos replaces only a file tacos wrote.** Given a directory
  (``-o DIR``), an exporter picks the file's name itself (``schedule.json``, an
  MSCCL algorithm's name); a file of that name already there is replaced only
  if it begins as the format's own files do (:func:`check_named_file`), so a
  user's ``schedule.json`` is refused, not lost. Naming the file in ``-o``
  replaces it as any file output does.
* **A directory output deletes only what tacos wrote.** A directory that does
  not exist yet is built beside its destination and renamed into place whole.
  An existing one is written into: the export's files are moved in, files that
  an earlier export recorded in the directory's ledger (:data:`LEDGER`) and
  this one no longer writes are removed, and every other file is left alone.
  A non-empty directory without a ledger was not written by tacos and is
  refused unless the caller passes ``force=True`` (``--force``), which adds
  the export's files beside the others.

:func:`check_file_target` and :func:`check_directory_target` apply the same
rules up front, so the CLI can refuse a bad ``-o`` before a long synthesis.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from tacos.errors import TacosError

LEDGER = ".tacos-files"
"""The file in an output directory listing (one relative path a line) what tacos wrote there."""

_PROTECTED: ContextVar[frozenset[Path]] = ContextVar("tacos_protected_inputs", default=frozenset())


# ------------------------------------------------------------------ inputs
@contextmanager
def protect_inputs(paths: Iterable[Path]) -> Iterator[None]:
    """Within the block, refuse every write or removal that would hit one of ``paths``."""
    resolved = frozenset(Path(p).resolve() for p in paths)
    token = _PROTECTED.set(_PROTECTED.get() | resolved)
    try:
        yield
    finally:
        _PROTECTED.reset(token)


def _refuse_inputs(targets: Iterable[Path], shown: Path) -> None:
    protected = _PROTECTED.get()
    for target in targets:
        if target.resolve() in protected:
            raise TacosError(
                f"{shown}: writing there would overwrite the input {target}; "
                "choose another output path"
            )


# ------------------------------------------------------------------ files
def check_file_target(path: Path) -> Path:
    """The regular file a file output at ``path`` will replace or create (links followed).

    Raises :class:`TacosError` if ``path`` is empty, names a directory, a device, a FIFO
    or a socket, or is one of the command's inputs.
    """
    if str(path) == "":
        raise TacosError("the output path is empty; give a file name")
    linked = Path(path).is_symlink()
    target = Path(path).resolve() if linked else Path(path)
    if linked and not target.parent.is_dir():  # tacos makes folders for -o, not for links
        raise TacosError(
            f"{path}: is a symbolic link into {target.parent}, which does not exist; "
            "fix the link or give another path"
        )
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise TacosError(f"{path}: cannot use as output: {err.strerror}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise TacosError(f"{path}: is a directory; give a file name for this output")
    if mode is not None and not stat.S_ISREG(mode):
        raise TacosError(
            f"{path}: is not a regular file (a device, FIFO or socket); "
            "tacos writes only regular files, give another path"
        )
    _refuse_inputs([target], path)
    return target


def check_file_in_directory(directory: Path, name: str | None = None) -> None:
    """Check an output that writes the file ``name`` (if known yet) into ``directory``."""
    _check_directory_or_nothing(directory)
    if name is not None:
        check_file_target(directory / name)


NAMED_FILE_HEAD_BYTES = 256
"""How much of an existing file :func:`check_named_file` reads to tell whether tacos wrote it."""


def check_named_file(path: Path, signatures: tuple[bytes, ...]) -> Path:
    """The file an export names itself in a directory (``-o DIR``), once it is safe to write.

    It may replace an existing file only if that file starts with one of
    ``signatures`` (what the format's writer puts first, within
    :data:`NAMED_FILE_HEAD_BYTES`):
    one tacos wrote. Anything else is the user's and is refused; the user can
    name the file in ``-o`` to replace it on purpose.
    """
    target = check_file_target(path)
    try:
        with open(target, "rb") as handle:
            head = handle.read(NAMED_FILE_HEAD_BYTES)
    except FileNotFoundError:
        return target
    except OSError as err:
        raise TacosError(f"{path}: cannot read the file there: {err.strerror}") from None
    if not head.startswith(signatures):
        raise TacosError(
            f"{path}: exists and was not written by tacos; move it away, or name it in -o "
            "to replace it"
        )
    return target


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass
class _Held:
    """What :func:`_hold_stops` changed, for :func:`_release_stops` to put back."""

    mask: set[int | signal.Signals]
    handlers: dict[int, Any]
    arrived: list[int]


def _hold_stops() -> _Held:
    """Hold ^C, SIGTERM and SIGHUP back until :func:`_release_stops`.

    A scratch file or directory is made, then its cleanup takes over; a stop
    landing in between (the command line turns it into an exception where the
    program is) would leave the scratch behind. Held, it lands once the cleanup
    is in place. The signal mask holds a signal for this thread only: another
    thread (a progress bar's monitor) takes it instead, and Python then runs the
    handler here at once. So in the main thread, where handlers run, each is
    also swapped for one that notes what came.
    """
    held = _Held(signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS), {}, [])
    if threading.current_thread() is threading.main_thread():
        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is not None:  # None: set outside Python, kept as is
                held.handlers[signum] = signal.signal(
                    signum, lambda got, _: held.arrived.append(got)
                )
    return held


def _release_stops(held: _Held) -> None:
    """Let the stops held by :func:`_hold_stops` land (any that came meanwhile, now)."""
    for signum, handler in held.handlers.items():
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, held.mask)
    for signum in held.arrived:
        signal.raise_signal(signum)


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` only if the block succeeds (else it is removed).

    For outputs written piece by piece, such as streamed schedules of many GB.
    Write errors (a full disk, a read-only file system) become one-line errors.
    """
    target = check_file_target(Path(path))
    _ensure_parent(target)
    held = _hold_stops()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        _release_stops(held)
        raise TacosError(f"{path}: cannot write there: {err.strerror}") from None
    try:
        _release_stops(held)
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename not in (None, tmp, str(target)):
            raise
        raise TacosError(f"{path}: cannot write: {_reason(err)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    with atomic_file(path) as handle:
        handle.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


# ------------------------------------------------------------------ directories
def check_directory_target(path: Path, *, force: bool = False) -> None:
    """Refuse a directory output that would put a user's files at risk (see the module doc)."""
    path = Path(path)
    _check_directory_or_nothing(path)
    if not path.is_dir() or force or (path / LEDGER).is_file():
        return
    try:
        empty = next(path.iterdir(), None) is None
    except OSError as err:
        raise TacosError(f"{path}: cannot read the directory: {err.strerror}") from None
    if not empty:
        raise TacosError(
            f"{path}: is not empty and was not written by tacos (it has no {LEDGER}); "
            "choose a new or empty directory, or add --force to write beside its files"
        )


@contextmanager
def atomic_directory(path: Path, *, force: bool = False) -> Iterator[Path]:
    """Yield a scratch directory whose files land in ``path`` only if the block succeeds.

    See the module doc for what happens to an existing ``path``; ``force`` allows a
    non-empty directory that tacos did not write.
    """
    path = Path(path)
    check_directory_target(path, force=force)
    existing = path.is_dir()
    if not existing:
        _ensure_parent(path)
    home = path if existing else path.parent
    held = _hold_stops()
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".{path.resolve().name}.", dir=home))
    except OSError as err:
        _release_stops(held)
        raise TacosError(f"{path}: cannot write there: {err.strerror}") from None
    try:
        _release_stops(held)
        os.chmod(scratch, 0o777 & ~_umask())
        yield scratch
        written = sorted(_files_under(scratch))
        (scratch / LEDGER).write_text("".join(f"{name}\n" for name in written), "utf-8")
        if existing:
            _merge_into(path, scratch, written)
        else:
            _refuse_inputs([path / name for name in written], path)
            os.replace(scratch, path)
    except OSError as err:
        raise TacosError(f"{path}: cannot write: {_reason(err)}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _merge_into(root: Path, scratch: Path, written: list[str]) -> None:
    """Move the export's files into ``root``; remove what the last export wrote and this did not.

    Everything is checked before the first file moves, so a refusal changes nothing.
    """
    stale = sorted(set(_ledger(root)) - set(written))
    _refuse_inputs([root / name for name in [*written, *stale]], root)
    for name in [*written, *stale]:  # a linked folder would take tacos outside ``root``
        for parent in PurePosixPath(name).parents[:-1]:
            if (root / parent).is_symlink():
                raise TacosError(
                    f"{root / parent}: is a symbolic link; tacos writes and removes files only "
                    "inside the output directory, so make it a plain directory"
                )
    for name in written:
        target = root / name
        for parent in reversed(PurePosixPath(name).parents[:-1]):
            if (root / parent).exists() and not (root / parent).is_dir():
                raise TacosError(f"{root / parent}: is in the way of {name}; move it away")
        if target.is_dir() and not target.is_symlink():
            raise TacosError(f"{target}: is a directory in the way of a file; move it away")
    for name in written:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(scratch / name, root / name)
    for name in stale:
        target = root / name
        if target.is_file() and not target.is_symlink():
            target.unlink()
            _remove_empty_parents(root, PurePosixPath(name))
    os.replace(scratch / LEDGER, root / LEDGER)


def _ledger(root: Path) -> list[str]:
    """The relative paths a previous export recorded; anything that could escape ``root`` is
    ignored (the ledger is a file in the user's directory, so it is not trusted)."""
    try:
        lines = (root / LEDGER).read_text("utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    except OSError as err:
        raise TacosError(f"{root / LEDGER}: cannot read: {err.strerror}") from None
    safe = []
    for line in lines:
        name = PurePosixPath(line)
        if line and not name.is_absolute() and ".." not in name.parts and str(name) == line:
            safe.append(line)
    return safe


def _files_under(scratch: Path) -> Iterator[str]:
    for directory, _, names in os.walk(scratch):
        for name in names:
            yield (Path(directory) / name).relative_to(scratch).as_posix()


def _remove_empty_parents(root: Path, name: PurePosixPath) -> None:
    for parent in name.parents[:-1]:
        try:
            (root / parent).rmdir()
        except OSError:
            return


# ------------------------------------------------------------------ helpers
def _check_directory_or_nothing(path: Path) -> None:
    """A directory output, or one that writes into a directory, needs one there or nothing."""
    if str(path) == "":
        raise TacosError("the output path is empty; give a directory name")
    if path.exists() and not path.is_dir():
        raise TacosError(f"{path}: exists and is not a directory; choose another -o")


def _ensure_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TacosError(f"{path}: cannot create its directory: {_reason(err)}") from None


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "no space left on the device"
    return err.strerror or str(err)


def _umask() -> int:
    """The process umask (read by setting and restoring it; there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
