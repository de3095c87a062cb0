"""Outputs never cost a user's data: no file deleted or replaced that tacos did not write.

Every refusal is one line on stderr without a traceback, exit 2, names the path,
leaves no partial output and no hidden scratch file, and leaves the user's files
byte for byte as they were.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tacos.cli import export_main, main
from tacos.output import atomic_directory, atomic_file


def run(capsys, *argv, entry=main):
    code = entry(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones too) with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def assert_refused(code: int, err: str, *names: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "error:" in err, err
    assert "Traceback" not in err
    for name in names:
        assert name in err, err


def user_files(directory: Path) -> dict[str, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "notes.txt").write_text("my notes")
    (directory / "results").mkdir(exist_ok=True)
    (directory / "results" / "run1.log").write_text("precious")
    return snapshot(directory)


# ------------------------------------------------------------------ directories
def test_a_bundle_is_not_written_into_a_directory_of_the_users(capsys, tmp_path):
    out = tmp_path / "mine"
    before = user_files(out)
    code, _, err = run(capsys, "--format", "chakra", "-o", str(out), entry=export_main)
    assert_refused(code, err, str(out), "--force")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_the_current_directory_is_refused_too_and_force_writes_beside_the_users_files(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    before = user_files(tmp_path)
    code, _, err = run(capsys, "--format", "chakra", "-o", ".", entry=export_main)
    assert_refused(code, err, "--force")
    assert snapshot(tmp_path) == before
    code, _, err = run(capsys, "--format", "chakra", "-o", ".", "--force", entry=export_main)
    assert code == 0, err
    after = snapshot(tmp_path)
    assert {name: after[name] for name in before} == before
    assert "run.sh" in after and "et/tacos.7.et" in after
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.is_dir()]


def test_a_new_export_into_a_bundle_replaces_its_files_and_keeps_the_users(capsys, tmp_path):
    out = tmp_path / "bundle"
    assert run(capsys, "--format", "chakra", "--topology", "ring:8", "-o", str(out),
               entry=export_main)[0] == 0  # fmt: skip
    (out / "astra.log").write_text("ASTRA-sim output the user kept")
    code, _, err = run(capsys, "--format", "chakra", "--topology", "ring:4", "-o", str(out),
                       entry=export_main)  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in (out / "et").iterdir()) == [f"tacos.{r}.et" for r in range(4)]
    assert (out / "astra.log").read_text() == "ASTRA-sim output the user kept"


def test_an_empty_directory_is_used(capsys, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    code, _, err = run(capsys, "--format", "chakra", "-o", str(out), entry=export_main)
    assert code == 0, err
    assert (out / "run.sh").is_file()


def test_a_ledger_cannot_make_tacos_delete_outside_the_bundle(capsys, tmp_path):
    out = tmp_path / "bundle"
    assert run(capsys, "--format", "chakra", "-o", str(out), entry=export_main)[0] == 0
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    with (out / ".tacos-files").open("a") as ledger:
        ledger.write(f"../outside.txt\n{outside}\n")
    assert run(capsys, "--format", "chakra", "-o", str(out), entry=export_main)[0] == 0
    assert outside.read_text() == "keep"


@pytest.mark.parametrize("fmt, name, groups", [
    ("json", "schedule.json", []),
    ("json", "schedule.json", ["--topology", "dgx:2x4", "--groups", "0-3;4-7"]),
    ("msccl", "tacos_allreduce_ring-4_Simple_ch1.xml", []),
])  # fmt: skip
def test_a_file_tacos_names_in_a_directory_replaces_only_one_tacos_wrote(
    capsys, tmp_path, fmt, name, groups
):
    argv = ["--format", fmt, "--topology", "ring:4", "--collective", "all-reduce", *groups]
    mine, ours = tmp_path / "mine", tmp_path / "ours"
    kept = user_files(mine)
    if not groups:
        (mine / name).write_text("the user's own file of that name")
        kept = snapshot(mine)
        code, _, err = run(capsys, *argv, "-o", str(mine), entry=export_main)
        assert_refused(code, err, str(mine / name), "not written by tacos")
        assert snapshot(mine) == kept
    for _ in range(2):  # a new export replaces the one before
        code, _, err = run(capsys, *argv, "-o", str(ours), entry=export_main)
        assert code == 0, err
    written = [p.name for p in ours.iterdir()]
    assert len(written) == 1 and (not groups or written == [name]), written
    named = mine / written[0]  # naming the file in -o replaces it on purpose
    named.write_text("replace me")
    code, _, err = run(capsys, *argv, "-o", str(named), entry=export_main)
    assert code == 0, err
    assert named.read_bytes() == (ours / written[0]).read_bytes()


# ------------------------------------------------------------------ files
@pytest.mark.parametrize("entry, argv", [
    (main, ["synthesize", "--topology", "ring:4", "-o"]),
    (export_main, ["--format", "json", "--topology", "ring:4", "-o"]),
    (export_main, ["--format", "msccl", "--topology", "ring:4", "-o"]),
    (main, ["synthesize", "--topology", "mesh2d:4x4", "--collective", "all-gather", "--stream"]),
])  # fmt: skip
def test_a_fifo_or_a_directory_is_never_replaced_by_a_file(capsys, tmp_path, entry, argv):
    suffix = ".xml" if "msccl" in argv else ".json"
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    for target, why in ((fifo, "not a regular file"), (folder, "directory")):
        code, _, err = run(capsys, *argv, str(target), entry=entry)
        assert_refused(code, err, str(target), why)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and folder.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fifo.name, folder.name])


def test_a_link_into_a_folder_that_does_not_exist_is_refused_not_followed(capsys, tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "nowhere" / "deeper" / "x.json")
    code, _, err = run(capsys, "synthesize", "--topology", "ring:4", "-o", str(link))
    assert_refused(code, err, str(link), "does not exist")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_is_never_replaced(capsys, tmp_path):
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code, _, err = run(capsys, "synthesize", "--topology", "ring:4", "-o", str(device))
    assert_refused(code, err, str(device), "not a regular file")
    assert stat.S_ISCHR(device.lstat().st_mode)


def test_a_symbolic_link_is_followed_and_kept(capsys, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert run(capsys, "synthesize", "--topology", "ring:4", "-o", str(link))[0] == 0
    assert link.is_symlink() and real.read_text().startswith("{")


def test_an_empty_output_path_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["synthesize", "--topology", "ring:4", "-o", ""])
    assert stop.value.code == 2
    assert "output path is empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ inputs
def test_synthesize_does_not_overwrite_its_own_topology(capsys, tmp_path):
    topology = tmp_path / "t.json"
    topology.write_text(
        '{"format": "tacos-topology", "version": 1, "npus": 2, "switches": 0, '
        '"links": [[0, 1, 50.0, 0.5], [1, 0, 50.0, 0.5]]}'
    )
    before = topology.read_bytes()
    code, _, err = run(capsys, "synthesize", "--topology", str(topology), "-o", str(topology))
    assert_refused(code, err, str(topology), "input")
    assert topology.read_bytes() == before


def test_an_export_does_not_overwrite_the_schedule_it_reads(capsys, tmp_path):
    out = tmp_path / "out"
    assert run(capsys, "--format", "json", "-o", str(out), entry=export_main)[0] == 0
    schedule = out / "schedule.json"
    before = schedule.read_bytes()
    for fmt, force in (("json", []), ("chakra", ["--force"])):
        code, _, err = run(capsys, "--format", fmt, "--schedule", str(schedule), "-o", str(out),
                           *force, entry=export_main)  # fmt: skip
        assert_refused(code, err, "input")
        assert schedule.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["schedule.json"]


# ------------------------------------------------------------------ write errors and signals
def _tacos(*argv: str, cwd: Path, limit_bytes: int | None = None) -> subprocess.Popen[str]:
    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    entry, rest = ("export_main", argv[1:]) if argv[0] == "export" else ("main", argv)
    code = f"import sys; from tacos.cli import {entry}; sys.exit({entry}(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *rest],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )


def test_a_full_disk_is_a_one_line_error_and_leaves_nothing(tmp_path):
    for argv in (
        ["export", "--format", "chakra", "--topology", "ring:16", "-o", "bundle"],
        ["synthesize", "--topology", "ring:16", "-o", "s.json"],
    ):
        process = _tacos(*argv, cwd=tmp_path, limit_bytes=4096)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 2, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_clean_up_like_ctrl_c(tmp_path, signum):
    process = _tacos(
        "synthesize", "--topology", "mesh2d:96x96", "--collective", "all-gather", "-q",
        "--stream", "s.bin", cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 600  # a fresh install compiles the engine first
    while not list(tmp_path.glob(".s.bin.*.tmp")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
            if int(fields["PPid"]) == pid and not fields["State"].startswith("Z"):
                found.append(int(status.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/status").read_text().split("State:\t")[1].startswith("Z")
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_stopped_sweep_leaves_no_worker_running(tmp_path):
    (tmp_path / "grid.yaml").write_text(
        "topologies: [mesh2d:40x40]\ncollectives: [all-reduce]\nchunk_sizes: [1MiB]\n"
        "chunks_per_npu: [4]\nseeds: [0, 1, 2, 3]\n"
    )
    process = _tacos("sweep", "grid.yaml", "-o", "out", "-j", "2", "-q", cwd=tmp_path)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while len(workers) < 2 and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
        workers = [pid for pid in _children(process.pid) if "spawn_main" in
                   Path(f"/proc/{pid}/cmdline").read_text(errors="replace")]  # fmt: skip
    time.sleep(1.0)  # let the workers start their points
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers and not any(_alive(pid) for pid in workers)


FINALIZER_STOP = """
import os, signal, sys, time
import tacos.cli as cli

real = cli.lower_bounds

class SignalledWhileFinalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, where Python swallows what it raises

def slow_bounds(*args, **kwargs):
    SignalledWhileFinalized()  # dropped at once: its __del__ runs now
    time.sleep(30)  # the stop must land here, not after
    return real(*args, **kwargs)

cli.lower_bounds = slow_bounds
sys.exit(cli.main(["bounds", "--topology", "ring:4"]))
"""


def test_a_signal_arriving_inside_a_finalizer_still_stops_the_command(tmp_path):
    """numba's compiler runs __del__ finalizers; a SIGTERM landing in one must not be lost."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", FINALIZER_STOP], cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert time.monotonic() - started < 20, "the stop waited for the command to finish"


STOP_SWALLOWED_BY_A_CALLBACK = """
import argparse, ctypes, os, signal, sys, time
from tacos import cli

def handler(args):
    def inside():  # numba's compiler calls back into Python like this
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the stop is raised here, and ctypes swallows it
    ctypes.CFUNCTYPE(None)(inside)()
    time.sleep(5)
    print("finished as if never stopped")
    return 0

parser = argparse.ArgumentParser(prog="tacos")
parser.set_defaults(handler=handler)
sys.exit(cli._run(parser, []))
"""


def test_a_stop_swallowed_inside_a_callback_is_raised_again_quietly():
    done = subprocess.run(
        [sys.executable, "-c", STOP_SWALLOWED_BY_A_CALLBACK],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "finished" not in done.stdout
    assert done.stderr.strip() == "tacos: SIGTERM, stopped"


STOPS_IN_AWKWARD_PLACES = """
import argparse, os, signal, sys, time
from tacos import cli

def handler(args):
    if args.where == "compiled":  # numba hands a stop raised in its code back wrapped
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        except BaseException as stop:
            raise SystemError("CPUDispatcher returned a result with an exception set") from stop
    else:  # a stop just before the command returns: its retry timer must not outlive it
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000_000):
            pass
    return 0

parser = argparse.ArgumentParser(prog="tacos")
parser.add_argument("where")
parser.set_defaults(handler=handler)
code = cli._run(parser, [sys.argv[1]])
time.sleep(0.2)  # the retry timer, had it been left armed, would fire here
sys.exit(code)
"""


@pytest.mark.parametrize("where", ["compiled", "late"])
def test_a_stop_anywhere_is_one_line_and_exit_128_plus_its_number(where):
    done = subprocess.run(
        [sys.executable, "-c", STOPS_IN_AWKWARD_PLACES, where],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.strip() == "tacos: SIGTERM, stopped"


class _Stopped(Exception):
    pass


def _stop(_signum, _frame):
    raise _Stopped


@pytest.mark.parametrize("from_another_thread", [False, True])
@pytest.mark.parametrize("maker", ["mkstemp", "mkdtemp"])
def test_a_stop_right_after_the_scratch_is_made_still_removes_it(
    tmp_path, monkeypatch, maker, from_another_thread
):
    """A stop landing just as the scratch file or directory appears (where the CI once
    sent one) is held until its cleanup is in place, also when another thread takes the
    signal (a progress bar's monitor thread did: the mask holds a signal for its own
    thread only, and Python then ran the handler in the main thread at once)."""
    original = getattr(tempfile, maker)

    def stop() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # lands as soon as Python may run a handler

    def made_then_stopped(*args, **kwargs):
        made = original(*args, **kwargs)
        if from_another_thread:  # the kernel gives it to a thread that does not block it
            sender = threading.Thread(target=stop)
            sender.start()
            sender.join()
        else:
            stop()
        return made

    monkeypatch.setattr(tempfile, maker, made_then_stopped)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        with pytest.raises(_Stopped):
            if maker == "mkstemp":
                with atomic_file(tmp_path / "out.bin") as handle:
                    handle.write(b"never")
            else:
                with atomic_directory(tmp_path / "bundle") as scratch:
                    (scratch / "a.et").write_bytes(b"never")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_the_bundle_linked_elsewhere_is_never_written_through(capsys, tmp_path):
    out = tmp_path / "bundle"
    argv = ["--format", "chakra", "--topology", "ring:8", "-o", str(out)]
    assert run(capsys, *argv, entry=export_main)[0] == 0
    elsewhere = tmp_path / "my-traces"
    (out / "et").rename(elsewhere)
    (out / "et").symlink_to(elsewhere)
    (elsewhere / "tacos.7.et").write_bytes(b"edited by hand")
    kept = snapshot(elsewhere)
    argv[3] = "ring:4"  # this export no longer writes tacos.4-7.et: they would be removed
    code, _, err = run(capsys, *argv, entry=export_main)
    assert_refused(code, err, str(out / "et"), "symbolic link")
    assert snapshot(elsewhere) == kept
