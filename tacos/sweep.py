"""Design-space sweeps: synthesize every point of a YAML grid on a process pool or a Dask cluster.

One synthesis is one process; a study of topologies x bandwidth splits x chunk
counts x sizes is hundreds of them, so the grid is farmed out to worker
processes (locally) or to a Dask cluster, and every finished point is kept.

A sweep file lists values; the sweep is the product of its lists::

    topologies: [ring:16, torus2d:4x4, my-net.csv]   # specs or files (relative to the YAML)
    collectives: [all-gather, all-reduce]
    chunk_sizes: [64KiB, 1MiB]
    chunks_per_npu: [1, 4]
    seeds: [0, 1]                       # optional, default [0]
    bandwidths: [null, 100, [150, 50]]  # optional, GB/s
    latencies: [0.5]                    # optional, us

A topology is a spec or any file ``--topology`` accepts (tacos .csv/.json,
ASTRA-sim network .yml, ns-3 .txt, htsim .topo). A bandwidth or latency entry
is ``null`` (keep the topology's own links), a number (every link), or a list
with one value per dimension of a mesh or torus (its grid dimensions) or
hypercube (its bits), as in LIBRA's per-dimension bandwidth split: the
dimensions a topology's :class:`~tacos.topology.Structure` names. A list only
combines with topologies of as many dimensions; other combinations are not
points of the design space and are skipped, but a list that fits no topology at
all is an error.

The results table is CSV, not Parquet, because it is the sweep's journal: one
line is appended and flushed per finished point, so an interrupted sweep keeps
every finished point and loses at most a half-written last line (dropped on
resume). A Parquet file is only readable once its footer is written at close,
so it could not serve that role. ``pandas.read_csv`` reads the table directly.
When a sweep completes, the table is rewritten in grid order, so it is
deterministic except for :data:`TIMING_COLUMNS`.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import logging
import math
import multiprocessing
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from tacos.bounds import lower_bounds
from tacos.collective import Collective, CollectiveKind, parse_size
from tacos.errors import TacosError, describe
from tacos.inputfile import require_file
from tacos.limits import MAX_SWEEP_POINTS
from tacos.output import write_text_atomic
from tacos.registry import names_topology_file, read_topology_file
from tacos.synthesizer import synthesize
from tacos.topology import Link, Topology, from_spec
from tacos.verify import verify
from tacos.yamlfile import parse_yaml

TABLE_NAME = "results.csv"
REQUIRED_KEYS = ("topologies", "collectives", "chunk_sizes", "chunks_per_npu")
OPTIONAL_KEYS = ("seeds", "bandwidths", "latencies")
_AXES = ("collectives", "chunk_sizes", "chunks_per_npu", "seeds", "bandwidths", "latencies")
"""The grid's axes after ``topologies``, in the order points are enumerated."""
COLUMNS = (
    "key",
    "topology",
    "collective",
    "chunk_bytes",
    "chunks_per_npu",
    "seed",
    "bandwidth_GBps",
    "latency_us",
    "npus",
    "links",
    "collective_bytes",
    "transfers",
    "collective_time_us",
    "lower_bound_us",
    "ratio",
    "verified",
    "error",
    "synthesis_seconds",
)
_HEADER = ",".join(COLUMNS) + "\n"
TIMING_COLUMNS = ("synthesis_seconds",)
"""Columns that differ between runs of the same point; every other column is deterministic."""

Scheduler = Literal["local", "dask"]
LinkValue = float | tuple[float, ...] | None
"""A bandwidth or latency setting: keep the topology's, one for every link, or one per dimension."""
Row = dict[str, str]


# ------------------------------------------------------------------ dimensions
def dimensions(topology: Topology) -> tuple[int, ...] | None:
    """Sizes of the dimensions the NPU-to-NPU links run along (its structure), or None."""
    structure = topology.structure
    direct = not topology.num_switches  # a switch's links join no two NPUs of a dimension
    return structure.dims if structure is not None and structure.dims and direct else None


def link_dimension(link: Link, dims: Sequence[int]) -> int:
    """The dimension along which ``link`` moves: the one coordinate its two ends differ in."""
    stride = 1
    for dim, size in enumerate(dims):
        if (link.src // stride) % size != (link.dst // stride) % size:
            return dim
        stride *= size
    raise TacosError(f"link {link.src}->{link.dst} does not move along any of dimensions {dims}")


# ---------------------------------------------------------------------- points
@dataclass(frozen=True)
class SweepPoint:
    """One synthesis of the grid: everything a worker needs, nothing it must read from disk.

    ``topology`` is the spec or file name as written in the sweep file; a file
    is parsed once up front into ``topology_file`` and shipped with the point,
    so workers on other machines need not see the file.
    """

    topology: str
    collective: CollectiveKind
    chunk_bytes: int
    chunks_per_npu: int
    seed: int = 0
    bandwidth: LinkValue = None
    latency: LinkValue = None
    topology_file: Topology | None = field(default=None, repr=False)

    @cached_property
    def key(self) -> str:
        """A stable identity of the point's inputs, what resuming a sweep matches on.

        A file topology is identified by its contents, not its path, so an
        edited file is recomputed and a moved one is not.
        """
        where: Any = self.topology.strip().lower()  # as from_spec reads it
        if self.topology_file is not None:
            where = {k: v for k, v in self.topology_file.to_dict().items() if k != "name"}
        identity = {
            "topology": where,
            "collective": self.collective.value,
            "chunk_bytes": self.chunk_bytes,
            "chunks_per_npu": self.chunks_per_npu,
            "seed": self.seed,
            "bandwidth": self.bandwidth,
            "latency": self.latency,
        }
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def input_row(self) -> Row:
        """The table's input columns for this point (results left empty)."""
        row = dict.fromkeys(COLUMNS, "")
        row.update(
            key=self.key,
            topology=self.topology,
            collective=self.collective.value,
            chunk_bytes=str(self.chunk_bytes),
            chunks_per_npu=str(self.chunks_per_npu),
            seed=str(self.seed),
            bandwidth_GBps=_format_link_value(self.bandwidth),
            latency_us=_format_link_value(self.latency),
        )
        return row


def build_topology(point: SweepPoint) -> Topology:
    """The point's topology with its bandwidth and latency settings applied to every link."""
    base = point.topology_file or from_spec(point.topology)
    if point.bandwidth is None and point.latency is None:
        return base
    dims = dimensions(base)
    links = tuple(
        replace(
            link,
            bandwidth_GBps=_setting_for(point.bandwidth, link, dims, link.bandwidth_GBps),
            latency_us=_setting_for(point.latency, link, dims, link.latency_us),
        )
        for link in base.links
    )
    return replace(base, links=links)


def run_point(point: SweepPoint) -> Row:
    """Synthesize, verify and bound one point; any failure becomes the row's ``error``.

    Runs in a worker process. It never raises, so one bad point (a
    disconnected topology, a synthesizer bug) cannot stop the sweep.
    """
    row = point.input_row()
    try:
        topology = build_topology(point)
        collective = Collective(
            point.collective, tuple(topology.npus), point.chunks_per_npu, point.chunk_bytes
        )
        row.update(
            npus=str(topology.num_npus),
            links=str(len(topology.links)),
            collective_bytes=str(collective.num_chunks * collective.chunk_bytes),
        )
        started = time.perf_counter()
        schedule = synthesize(topology, collective, seed=point.seed)
        seconds = time.perf_counter() - started
        report = verify(schedule)
        bound = lower_bounds(topology, collective).best_us
    except Exception as err:  # a point's failure is data, not a reason to stop the sweep
        row["error"] = str(err) if isinstance(err, TacosError) else f"{type(err).__name__}: {err}"
        return row
    elapsed = schedule.collective_time_us
    row.update(
        transfers=str(len(schedule.transfers)),
        collective_time_us=repr(elapsed),
        lower_bound_us=repr(bound),
        ratio=repr(elapsed / bound) if bound > 0 else "",
        verified=str(report.ok),
        error="" if report.ok else f"schedule does not verify: {report.errors[0]}",
        synthesis_seconds=f"{seconds:.6f}",
    )
    return row


# ------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class SweepSpec:
    """The validated grid: its points in grid order, and how many combinations did not fit."""

    points: tuple[SweepPoint, ...]
    skipped: int = 0


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML; every problem is a one-line error naming the key."""
    path = Path(path)
    require_file(path, "sweep")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read sweep file: {err}") from None
    _, data = parse_yaml(text, str(path))
    return parse_spec(data, str(path), base_dir=path.parent)


def parse_spec(data: Any, source: str = "sweep", base_dir: Path | None = None) -> SweepSpec:
    """Validate a sweep mapping (as loaded from YAML) and expand it into points.

    Topology files are resolved against ``base_dir`` and parsed here, so a bad
    file fails before any work starts; connectivity is left to each point.
    """
    if not isinstance(data, dict):
        raise TacosError(f"{source}: expected a mapping with keys {', '.join(REQUIRED_KEYS)}")
    known = REQUIRED_KEYS + OPTIONAL_KEYS
    for key in data:
        if key not in known:
            raise TacosError(f"{source}: unknown key {describe(key)}; use {', '.join(known)}")
    lists = {key: _entries(data, key, source) for key in known}
    topologies = [
        _topology_entry(v, f"{source}: topologies[{i}]", base_dir or Path("."))
        for i, v in enumerate(lists["topologies"])
    ]
    values: dict[str, list[Any]] = {
        "collectives": [
            _wrap(CollectiveKind.parse, v, f"{source}: collectives[{i}]")
            for i, v in enumerate(lists["collectives"])
        ],
        "chunk_sizes": [
            _wrap(parse_size, _size_text(v), f"{source}: chunk_sizes[{i}]")
            for i, v in enumerate(lists["chunk_sizes"])
        ],
        "chunks_per_npu": [
            _integer(v, f"{source}: chunks_per_npu[{i}]", minimum=1)
            for i, v in enumerate(lists["chunks_per_npu"])
        ],
        "seeds": [_integer(v, f"{source}: seeds[{i}]") for i, v in enumerate(lists["seeds"])],
    }
    for key, positive in (("bandwidths", True), ("latencies", False)):
        values[key] = [
            _link_value(v, f"{source}: {key}[{i}]", positive=positive)
            for i, v in enumerate(lists[key])
        ]
        _check_lists_fit(values[key], [dims for *_, dims in topologies], f"{source}: {key}")

    combinations = len(topologies) * math.prod(len(values[axis]) for axis in _AXES)
    if combinations > MAX_SWEEP_POINTS:
        raise TacosError(
            f"{source}: the grid has {combinations} combinations, more than one sweep runs "
            f"({MAX_SWEEP_POINTS}); split it into several sweep files"
        )
    points: dict[str, SweepPoint] = {}
    skipped = 0
    grid = itertools.product(topologies, *(values[axis] for axis in _AXES))
    for (name, parsed, dims), kind, size, chunks, seed, bandwidth, latency in grid:  # _AXES order
        if not (_fits(bandwidth, dims) and _fits(latency, dims)):
            skipped += 1
            continue
        point = SweepPoint(name, kind, size, chunks, seed, bandwidth, latency, parsed)
        points.setdefault(point.key, point)
    if not points:
        raise TacosError(
            f"{source}: every combination is skipped: no topology has the dimensions of both "
            "a 'bandwidths' and a 'latencies' list; add a number or null to one of them"
        )
    return SweepSpec(tuple(points.values()), skipped)


def _entries(data: dict[str, Any], key: str, source: str) -> list[Any]:
    if key not in data:
        if key in REQUIRED_KEYS:
            raise TacosError(f"{source}: missing key {key!r}")
        return [0] if key == "seeds" else [None]
    value = data[key]
    if not isinstance(value, list):
        raise TacosError(f"{source}: {key!r} must be a list, e.g. {key}: [{_EXAMPLES[key]}]")
    if not value:
        raise TacosError(f"{source}: {key!r} is empty; give at least one value")
    return value


_EXAMPLES = {
    "topologies": "ring:8, torus2d:4x4",
    "collectives": "all-gather, all-reduce",
    "chunk_sizes": "64KiB, 1MiB",
    "chunks_per_npu": "1, 4",
    "seeds": "0, 1",
    "bandwidths": "50, [100, 25]",
    "latencies": "0.5, [0.5, 1.0]",
}


def _topology_entry(
    value: Any, where: str, base_dir: Path
) -> tuple[str, Topology | None, tuple[int, ...] | None]:
    """(name as written, parsed file or None, dimensions) for one ``topologies`` entry."""
    if not isinstance(value, str):
        raise TacosError(f"{where}: {describe(value)} is not a topology spec or file name")
    if not names_topology_file(value):
        return value, None, dimensions(_wrap(from_spec, value, where))
    topology = _wrap(read_topology_file, base_dir / value, where)
    return value, topology, dimensions(topology)


def _wrap(parse: Callable[..., Any], value: Any, where: str, *more: Any) -> Any:
    """``parse(value)`` with any error message prefixed by the key it came from."""
    try:
        return parse(value, *more)
    except TacosError as err:
        raise TacosError(f"{where}: {err}") from None


def _size_text(value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return repr(value)  # let parse_size reject it with its usual message
    return value


def _integer(value: Any, where: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TacosError(f"{where}: {describe(value)} is not a whole number")
    if minimum is not None and value < minimum:
        raise TacosError(f"{where}: {value} must be at least {minimum}")
    return value


def _link_value(value: Any, where: str, *, positive: bool) -> LinkValue:
    if value is None:
        return None
    if isinstance(value, list):
        if not value:
            raise TacosError(f"{where}: an empty list; give one value per dimension")
        return tuple(_number(v, f"{where}[{i}]", positive=positive) for i, v in enumerate(value))
    return _number(value, where, positive=positive)


def _number(value: Any, where: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TacosError(f"{where}: {describe(value)} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise TacosError(f"{where}: {describe(value)} must be {'> 0' if positive else '>= 0'}")
    return number


def _fits(setting: LinkValue, dims: tuple[int, ...] | None) -> bool:
    return not isinstance(setting, tuple) or (dims is not None and len(dims) == len(setting))


def _check_lists_fit(
    settings: list[LinkValue], all_dims: list[tuple[int, ...] | None], where: str
) -> None:
    for i, setting in enumerate(settings):
        if not any(_fits(setting, dims) for dims in all_dims):
            assert isinstance(setting, tuple)
            raise TacosError(
                f"{where}[{i}]: {len(setting)} values (one per dimension), but no topology has "
                f"{len(setting)} dimensions (meshes and tori have one per grid size, "
                "hypercube:D has D); use a single number for the others"
            )


def _setting_for(
    setting: LinkValue, link: Link, dims: tuple[int, ...] | None, current: float
) -> float:
    if setting is None:
        return current
    if isinstance(setting, tuple):
        assert dims is not None  # _fits() kept only points whose lists match
        return setting[link_dimension(link, dims)]
    return setting


def _format_link_value(setting: LinkValue) -> str:
    """``""`` (the topology's own), ``"100"`` or ``"100/25"`` (per dimension)."""
    if setting is None:
        return ""
    numbers = setting if isinstance(setting, tuple) else (setting,)
    return "/".join(repr(v).removesuffix(".0") for v in numbers)


# ---------------------------------------------------------------- the table
def table_path(out_dir: str | Path) -> Path:
    """Where a sweep writing to ``out_dir`` keeps its results table."""
    return Path(out_dir) / TABLE_NAME


def read_table(path: str | Path) -> list[Row]:
    """The rows of a results table (a file, or the sweep's output directory).

    A last line without its newline is the one a killed sweep was writing; it
    is ignored, and resuming recomputes its point.
    """
    path = Path(path)
    if path.is_dir():
        path = table_path(path)
    require_file(path, "results table")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read results table: {err}") from None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    if not lines:
        return []
    reader = csv.reader(lines)
    header = tuple(next(reader))
    if header != COLUMNS:
        raise TacosError(
            f"{path}: not a results table of this tacos (its columns differ); "
            "move it away or choose another -o"
        )
    rows = []
    for values in reader:
        if len(values) != len(COLUMNS):
            raise TacosError(
                f"{path}: line {reader.line_num}: {len(values)} fields, not {len(COLUMNS)}; "
                "delete that line and rerun the sweep to recompute its point"
            )
        rows.append(dict(zip(COLUMNS, values, strict=True)))
    return rows


def _format_row(row: Row) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(row[c] for c in COLUMNS)
    return out.getvalue()


# ------------------------------------------------------------------ running
@dataclass(frozen=True)
class SweepPlan:
    """A spec against its results table: which points are finished and which are not."""

    spec: SweepSpec
    table: Path
    finished: frozenset[str]

    @property
    def pending(self) -> tuple[SweepPoint, ...]:
        return tuple(p for p in self.spec.points if p.key not in self.finished)


@dataclass(frozen=True)
class SweepOutcome:
    """What one :func:`run_sweep` call did: the keys it computed (in finishing order)."""

    table: Path
    computed: tuple[str, ...]
    errors: int


def plan_sweep(spec: SweepSpec, out_dir: str | Path) -> SweepPlan:
    """Match ``spec`` against the table in ``out_dir``; finished points (errors included) stay."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise TacosError(f"{out_dir}: exists and is not a directory; choose another -o")
    table = table_path(out_dir)
    return SweepPlan(spec, table, frozenset(row["key"] for row in read_table(table)))


def run_sweep(
    plan: SweepPlan,
    *,
    scheduler: Scheduler = "local",
    jobs: int | None = None,
    address: str | None = None,
    on_row: Callable[[Row], None] | None = None,
) -> SweepOutcome:
    """Compute the plan's pending points, appending each row to the table as it finishes.

    ``scheduler="local"`` uses ``jobs`` worker processes (default: one per
    CPU); ``"dask"`` uses the Dask scheduler at ``address`` or, without one, a
    ``LocalCluster`` of ``jobs`` single-threaded worker processes. ``on_row``
    sees every row right after it is written (the CLI's progress bar). When
    every point is done, the table is rewritten in grid order.

    One sweep at a time writes a table; the finished points are read again
    once that is assured, so rows another sweep added since the plan count.
    """
    if jobs is not None and jobs < 1:
        raise TacosError(f"--jobs must be at least 1, got {jobs}")
    if address is not None:
        if scheduler != "dask":
            raise TacosError("--address names a Dask scheduler; add --scheduler dask")
        if not _DASK_ADDRESS.match(address):
            raise TacosError(
                f"--address {address[:80]!r} is not a Dask scheduler address; "
                "write it as tcp://HOST:PORT (or tls://, ws://, wss://, ucx://)"
            )
    computed: list[str] = []
    errors = 0
    with _only_sweep_writing(plan.table):
        finished = {row["key"] for row in read_table(plan.table)}
        pending = [point for point in plan.pending if point.key not in finished]
        if pending:
            workers = min(jobs or os.cpu_count() or 1, len(pending))
            rows = (
                _dask_rows(pending, workers, address)
                if scheduler == "dask"
                else _local_rows(pending, workers)
            )
            with _open_for_append(plan.table) as table, contextlib.closing(rows):
                for row in rows:
                    table.write(_format_row(row))
                    table.flush()
                    computed.append(row["key"])
                    errors += bool(row["error"])
                    if on_row is not None:
                        on_row(row)
        _rewrite_in_grid_order(plan)
    return SweepOutcome(plan.table, tuple(computed), errors)


@contextlib.contextmanager
def _only_sweep_writing(table: Path) -> Iterator[None]:
    """Hold an exclusive lock on the table's directory, or fail at once if another sweep does.

    The directory, not the file, is locked because the final grid-order
    rewrite replaces the file; the kernel drops the lock if the process dies.
    """
    import fcntl  # POSIX only; imported here so that importing tacos needs no fcntl

    try:
        table.parent.mkdir(parents=True, exist_ok=True)
        directory = os.open(table.parent, os.O_RDONLY)
    except OSError as err:
        raise TacosError(f"{table.parent}: cannot create the results directory: {err}") from None
    try:
        try:
            fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TacosError(
                f"{table}: another tacos sweep is writing it; wait for it or choose another -o"
            ) from None
        yield
    finally:
        os.close(directory)


@contextlib.contextmanager
def _open_for_append(table: Path) -> Iterator[io.TextIOWrapper]:
    """The table opened for appending, after dropping a half-written last line."""
    try:
        with table.open("a+", encoding="utf-8", newline="") as handle:
            handle.seek(0)
            text = handle.read()
            complete = text[: text.rfind("\n") + 1]
            if complete != text:
                handle.truncate(len(complete.encode()))
            if not complete:
                handle.write(_HEADER)
            yield handle
    except OSError as err:
        raise TacosError(f"{table}: cannot write results table: {err}") from None


def _rewrite_in_grid_order(plan: SweepPlan) -> None:
    """Sort the table by grid position (rows of other grids last, as they were)."""
    rows = read_table(plan.table)
    position = {point.key: i for i, point in enumerate(plan.spec.points)}
    rows.sort(key=lambda row: position.get(row["key"], len(position)))
    write_text_atomic(plan.table, _HEADER + "".join(_format_row(row) for row in rows))


def _local_rows(points: Sequence[SweepPoint], workers: int) -> Generator[Row, None, None]:
    # spawn: workers start clean instead of forking a parent that may hold threads
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(run_point, point) for point in points]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BrokenProcessPool:
            raise TacosError(
                "a sweep worker process died (out of memory?); finished points are kept, "
                "rerun the same command to resume"
            ) from None
        except BaseException:  # ^C, SIGTERM, an error: stop the workers' points too
            _terminate_workers()
            raise
        finally:
            pool.shutdown(cancel_futures=True)


def _terminate_workers() -> None:
    """Kill this process's workers: ``shutdown()`` alone waits for their current points
    (minutes each), so a stopped sweep would leave them running."""
    for process in multiprocessing.active_children():
        process.terminate()


_DASK_ADDRESS = re.compile(r"^(tcp|tls|ws|wss|ucx)://([\w.-]+|\[[0-9a-fA-F:.]+\]):\d{1,5}$")
"""A scheduler address Dask's client connects to: a protocol, a host and a port."""


def _dask_rows(
    points: Sequence[SweepPoint], workers: int, address: str | None
) -> Generator[Row, None, None]:
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_as_completed
    except ImportError:
        raise TacosError(
            "--scheduler dask needs dask.distributed: pip install 'tacos-toolchain[sweep]'"
        ) from None
    with contextlib.ExitStack() as stack:
        if address:
            try:
                client = stack.enter_context(Client(address, timeout="20s"))
            except (OSError, TimeoutError, ValueError) as err:
                raise TacosError(f"cannot reach the Dask scheduler at {address}: {err}") from None
        else:
            with _children_ignore_ctrl_c():
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
            stack.enter_context(cluster)
            client = stack.enter_context(Client(cluster))
        futures = client.map(run_point, list(points), pure=False)
        try:
            for future in dask_as_completed(futures):
                try:
                    row: Row = future.result()
                except Exception as err:  # run_point never raises: this is the cluster failing
                    raise TacosError(
                        f"the Dask cluster lost a point ({type(err).__name__}: {err}); "
                        "finished points are kept, rerun the same command to resume"
                    ) from None
                future.release()
                yield row
        finally:
            client.cancel(futures)


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes started in this block ignore SIGINT (it survives exec), so Ctrl-C stops the
    sweep here, which shuts them down, instead of in every worker with a traceback of its own.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may change signal handlers (and only it gets SIGINT)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
