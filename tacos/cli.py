"""Command line: ``tacos`` (synthesize, verify, simulate, bounds, import, ...) and ``tacos-export``.

A thin shell over the library: parse arguments, call the library, report.
Errors caused by input print one line ``tacos: error: ...`` and exit 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from tacos.bounds import lower_bounds
from tacos.collective import Collective, CollectiveKind, parse_size
from tacos.errors import TacosError
from tacos.failures import parse_groups, parse_ids, parse_links, to_current_ids, without_failures
from tacos.importers.base import TopologyImport
from tacos.inputfile import require_file
from tacos.linkmodel import LINK_MODELS, CostChoice
from tacos.output import check_file_target, protect_inputs
from tacos.plot import COLOR_BY, PLOT_KINDS, plot_file
from tacos.registry import (
    analytical_network_file,
    checkers,
    import_schedule,
    import_topology,
    load_topology,
    read_workload,
    reads_topology,
    schedule_format_of,
    schedule_formats,
    workload_writers,
    writers,
)
from tacos.schedule import Op, Schedule, load_schedules, merge_tenants, save_schedules
from tacos.simulate import simulate
from tacos.stream import MAGIC as STREAM_MAGIC
from tacos.stream import stream_all_gather
from tacos.sweep import load_spec, plan_sweep, run_sweep
from tacos.synthesizer import (
    ALGORITHM_CHOICES,
    CHUNK_POLICIES,
    ENGINES,
    ProgressCallback,
    synthesize,
    synthesize_tenants,
)
from tacos.topology import (
    DEFAULT_BANDWIDTH_GBPS,
    DEFAULT_LATENCY_US,
    SPEEDS_IN_OPTIONS,
    Topology,
    from_spec,
    is_spec,
)
from tacos.verify import VerificationReport, require_verified, verify

DEFAULT_TOPOLOGY = "ring:8"
DEFAULT_COLLECTIVE = "all-reduce"
DEFAULT_ALGORITHM = "best"
DEFAULT_CHUNK_SIZE = "1MiB"
EXIT_INPUT_ERROR = 2
EXIT_CANNOT_TELL = 3
"""``tacos verify``: the file does not say enough to decide (e.g. traces without chunk labels)."""


# ------------------------------------------------------------------ entry points
class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line (argparse prints its whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INPUT_ERROR, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``tacos``: synthesize, verify, simulate, bounds."""
    parser = _Parser(
        prog="tacos", description="Topology-aware collective algorithm synthesis (TACOS)."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("synthesize", help="synthesize a collective for a topology")
    _add_problem_arguments(p)
    p.add_argument("-o", "--output", type=_output_path, help="write the schedule JSON here")
    p.add_argument(
        "--stream",
        type=_output_path,
        metavar="FILE",
        help="All-Gathers too big for memory (tens of thousands of NPUs): write the transfers "
        "to FILE as they are made (tacos.stream format, 16 bytes each) instead of keeping them",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.set_defaults(handler=_cmd_synthesize)

    p = commands.add_parser("verify", help="check a schedule's correctness")
    p.add_argument("file", type=Path, help="schedule JSON, or PREFIX of a Chakra ET set")
    p.add_argument(
        "--format",
        default="json",
        choices=sorted({"json", *schedule_formats(), *checkers()}),
        help="json (default): a TACOS schedule; chakra: traces PREFIX.<rank>.et; "
        "msccl: an MSCCL algorithm XML, run symbolically as the GPU runtimes would",
    )
    _add_import_arguments(p)
    for name, checker in checkers().items():
        checker.add_arguments(p.add_argument_group(f"{name} format"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_verify)

    p = commands.add_parser(
        "import", help="read another tool's topology or schedule and describe it"
    )
    p.add_argument(
        "file",
        type=Path,
        help="ASTRA-sim network .yml, ns-3 topology .txt, htsim .topo, a topology spec "
        "(dgx:4x8, fat-tree:8, ...), or Chakra ET PREFIX (or one of its PREFIX.<rank>.et files)",
    )
    _add_import_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_import)

    p = commands.add_parser("simulate", help="replay a schedule and report its time")
    p.add_argument("file", type=Path, help="schedule JSON")
    p.add_argument(
        "--sends-in-flight",
        type=int,
        default=None,
        help="at most this many outstanding sends per NPU (1 = ASTRA-sim's standalone workload)",
    )
    _add_cost_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_simulate)

    p = commands.add_parser("bounds", help="lower bounds for a collective on a topology")
    _add_problem_arguments(p, with_seed=False)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_bounds)

    p = commands.add_parser("sweep", help="synthesize every point of a YAML design-space grid")
    p.add_argument("spec", type=Path, help="sweep YAML: topologies, collectives, chunk_sizes, ...")
    p.add_argument(
        "-o", "--output", type=_output_path, required=True,
        help="results directory; its results.csv is resumed, finished points are not recomputed",
    )  # fmt: skip
    p.add_argument("--scheduler", choices=("local", "dask"), default="local",
                   help="local process pool (default) or a Dask cluster")  # fmt: skip
    p.add_argument("--address", help="Dask scheduler tcp://HOST:PORT (default: a LocalCluster)")
    p.add_argument("-j", "--jobs", type=int, help="worker processes (default: one per CPU)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_sweep)

    p = commands.add_parser("plot", help="draw a schedule (link timeline, ...) or a sweep table")
    p.add_argument("file", type=Path, help="schedule JSON, or a sweep's results.csv or directory")
    p.add_argument(
        "-o", "--output", type=_output_path, required=True, help="OUT.png, OUT.svg or OUT.pdf"
    )
    p.add_argument("--kind", choices=PLOT_KINDS, default="all", help="schedule panel(s) to draw")
    p.add_argument("--color-by", choices=COLOR_BY, default="chunk", help="bar and tick colours")
    p.set_defaults(handler=_cmd_plot)

    return _run(parser, argv)


def export_main(argv: Sequence[str] | None = None) -> int:
    """``tacos-export``: write a schedule (given, or synthesized on the spot) in a format."""
    parser = _Parser(
        prog="tacos-export",
        description="Export a collective schedule. Without --schedule, one is synthesized "
        f"(default: {DEFAULT_COLLECTIVE} on {DEFAULT_TOPOLOGY}).",
    )
    parser.add_argument("--format", required=True, choices=sorted(writers()), help="output format")
    parser.add_argument("--schedule", type=Path, help="export this schedule JSON instead")
    parser.add_argument(
        "--from",
        dest="import_from",
        nargs=2,
        metavar=("FORMAT", "SOURCE"),
        help=f"export a schedule imported from another format ({', '.join(schedule_formats())}), "
        "e.g. --from chakra PREFIX; --topology and --collective then apply to the import",
    )
    _add_problem_arguments(parser)
    parser.add_argument(
        "-o", "--output", type=_output_path, required=True, help="output file or directory"
    )
    for name, writer in writers().items():
        writer.add_arguments(parser.add_argument_group(f"{name} format"))
    for name, workload_writer in workload_writers().items():
        workload_writer.add_arguments(parser.add_argument_group(f"{name} workloads"))
    parser.set_defaults(handler=_cmd_export)
    return _run(parser, argv)


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is so that every cleanup runs (as on ^C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    """Raise :class:`_Terminated` where the program is, so that every cleanup runs.

    Python swallows an exception raised while a ``__del__`` or a ctypes
    callback runs ("Exception ignored in ..."), and numba's compiler runs
    both (it finalizes LLVM objects, llvmlite calls back into Python), so a
    signal landing there would be lost and the command would finish as if
    never stopped. So the stop stays pending, a swallowed one is not printed
    (:func:`_quiet_unraisable`), and a timer raises it again until it is
    unwinding (:func:`_retry_stop`).
    """
    _pending_stop[:] = [signum]
    signal.setitimer(signal.ITIMER_REAL, _RETRY_STOP_SECONDS, _RETRY_STOP_SECONDS)
    raise _Terminated(signum)


_PATH_ERRNOS = frozenset(
    {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS}
)
"""What a path the user gave can be wrong in, wherever the command first touches it."""
_SHOWN_PATH_CHARS = 80


def _path_error(err: OSError) -> str:
    """One line for an unusable path: the path (its start, if very long) and why."""
    path = os.fsdecode(err.filename)
    if len(path) > _SHOWN_PATH_CHARS:
        path = f"{path[:_SHOWN_PATH_CHARS]}... ({len(path)} characters)"
    return f"{path}: {err.strerror}; give another path"


_HUGE_NUMBER = (
    "an input holds a number of more than 4,300 digits, which no count, id or size "
    "comes near; check the options and files given"
)
_OUT_OF_MEMORY = (
    "this problem needs more memory than the machine has; use a smaller network, fewer "
    "chunks or fewer ranks"
)


def _stop_retrying() -> None:
    """The stop is handled: no timer raises it again."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    _pending_stop.clear()


def _stopped_by(err: BaseException) -> _Terminated | None:
    """The stop behind ``err``: numba's dispatcher reports an exception raised by a signal
    handler while compiled code ran as a SystemError whose context is that exception."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, _Terminated):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _retry_stop(_signum: int, frame: FrameType | None) -> None:
    """SIGALRM while a stop is pending: raise it again, unless it is already unwinding."""
    if _pending_stop and not isinstance(sys.exc_info()[1], _Terminated):
        _raise_terminated(_pending_stop[0], frame)


def _quiet_unraisable(
    previous: Callable[[Any], object],
) -> Callable[[Any], object]:
    """An ``unraisablehook`` dropping swallowed stops (they are raised again), passing the rest."""

    def hook(unraisable: Any) -> object:
        if isinstance(unraisable.exc_value, _Terminated):
            return None
        return previous(unraisable)

    return hook


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in _CLEANUP_SIGNALS}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, _retry_stop)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(previous_hook)
    try:
        try:
            with protect_inputs(_input_paths(args)):
                return int(args.handler(args))
        except TacosError as err:
            print(f"{parser.prog}: error: {err}", file=sys.stderr)
            return EXIT_INPUT_ERROR
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # e.g. piped into head: stop quietly, as Unix tools do
            sys.stderr.close()
            return 0
        except OSError as err:
            if err.errno not in _PATH_ERRNOS or err.filename is None:
                raise
            print(f"{parser.prog}: error: {_path_error(err)}", file=sys.stderr)
            return EXIT_INPUT_ERROR
        except SystemError as err:  # a stop landing in compiled code comes out wrapped
            stop = _stopped_by(err)
            if stop is None:
                raise
            raise stop from None
        except ValueError as err:  # Python refuses to read integers of over 4,300 digits
            if "integer string conversion" not in str(err):
                raise
            print(f"{parser.prog}: error: {_HUGE_NUMBER}", file=sys.stderr)
            return EXIT_INPUT_ERROR
        except MemoryError:
            print(f"{parser.prog}: error: {_OUT_OF_MEMORY}", file=sys.stderr)
            return EXIT_INPUT_ERROR
    except _Terminated as stop:  # outside the handlers above: a stop may land in one
        _stop_retrying()
        print(f"{parser.prog}: {signal.Signals(stop.signum).name}, stopped", file=sys.stderr)
        return 128 + stop.signum
    finally:
        # Held while the handlers go back: a stop from here on ends the process as usual.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {*_CLEANUP_SIGNALS, signal.SIGALRM})
        _stop_retrying()
        sys.unraisablehook = previous_hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


_CLEANUP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_RETRY_STOP_SECONDS = 0.01
_pending_stop: list[int] = []
"""The stop signal received, pending until the command ends (see :func:`_raise_terminated`)."""


def _given(text: str) -> str:
    """A value that must say something: an empty one would silently mean the default."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a value or leave the option out")
    return text


def _output_path(text: str) -> Path:
    """An ``-o`` value: argparse would turn an empty string into ``.``, the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("the output path is empty")
    return Path(text)


def _input_paths(args: argparse.Namespace) -> list[Path]:
    """Every file this command reads, so that no output may replace one of them."""
    named = [
        getattr(args, name, None) for name in ("topology", "schedule", "groups", "file", "spec")
    ]
    named.append(getattr(args, "comm_groups", None))
    source = getattr(args, "import_from", None)
    for prefix in (source[1] if source else None, getattr(args, "workload", None)):
        if prefix:
            named.append(Path(prefix))
            named.extend(Path(prefix).parent.glob(f"{Path(prefix).name}.*.et"))
    return [Path(p) for p in named if p and Path(p).is_file()]


# ---------------------------------------------------------------- arguments
def _add_problem_arguments(parser: argparse.ArgumentParser, *, with_seed: bool = True) -> None:
    parser.add_argument(
        "--topology",
        type=_given,
        default=None,
        help=f"spec (ring:8, mesh2d:4x4, torus3d:4x4x4, hypercube:3, ...) or a file: .csv/.json, "
        "ASTRA-sim network .yml, ns-3 .txt, htsim .topo "
        f"(default {DEFAULT_TOPOLOGY})",
    )
    parser.add_argument(
        "--collective",
        type=_given,
        default=None,
        help=f"{', '.join(k.value for k in CollectiveKind)} (default {DEFAULT_COLLECTIVE})",
    )
    parser.add_argument(
        "--chunk-size",
        type=_given,
        default=None,
        help=f"bytes per chunk: 4096, 512KiB, 1MiB (default {DEFAULT_CHUNK_SIZE})",
    )
    parser.add_argument(
        "--chunks-per-npu",
        type=int,
        default=None,
        help="chunks each NPU's data splits into (default 1; for --workload, chosen per "
        "collective)",
    )
    parser.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help=f"GB/s (2^30) of generated links (default {DEFAULT_BANDWIDTH_GBPS:g})",
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=None,
        help=f"microseconds of generated links (default {DEFAULT_LATENCY_US:g})",
    )
    _add_cost_arguments(parser)
    parser.add_argument("--root", type=int, default=None, help="root NPU of broadcast/reduce/"
                        "gather/scatter (default: the first rank)")  # fmt: skip
    parser.add_argument("--fail-npus", help="failed NPUs, e.g. 3,7 or 8-11 (original ids)")
    parser.add_argument("--fail-links", help="failed links: 0-1 (both directions) or 0>1")
    parser.add_argument(
        "--groups",
        help='tenants sharing the network: "0-7;8-15" or a JSON file [[0,1,...],[...]]',
    )
    if with_seed:
        parser.add_argument("--seed", type=int, default=0, help="tie-breaking seed (default 0)")
        parser.add_argument(
            "--policy",
            choices=CHUNK_POLICIES,
            default="rarest",
            help="which eligible chunk a link sends: rarest (default) or random (plain TACOS)",
        )
        parser.add_argument(
            "--one-port",
            action="store_true",
            help="each NPU sends one message at a time (as ASTRA-sim's standalone workload runs)",
        )
        parser.add_argument(
            "--engine",
            choices=ENGINES,
            default="auto",
            help="reference (readable) or fast (compiled, same schedules); auto: fast when "
            "it applies and the problem is big",
        )
        parser.add_argument(
            "--tries",
            type=int,
            default=1,
            help="synthesize seeds SEED..SEED+K-1 in parallel and keep the fastest (default 1)",
        )
        parser.add_argument(
            "--algorithm",
            choices=ALGORITHM_CHOICES,
            default=DEFAULT_ALGORITHM,
            help="tacos (the greedy synthesizer), a classic algorithm (ring, hierarchical-ring, "
            "tree = double binary tree, direct, halving-doubling), or best (default): the "
            "fastest of TACOS and every classic algorithm that applies",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """The cost model (tacos.linkmodel); left out, the input's own (default paper, free)."""
    parser.add_argument(
        "--link-model",
        choices=LINK_MODELS,
        default=None,
        help="paper (default): a link is held for latency + size/bandwidth; pipelined: "
        "freed after size/bandwidth, the message arriving latency later (as ASTRA-sim)",
    )
    parser.add_argument(
        "--reduce-bandwidth",
        type=float,
        default=None,
        metavar="GBPS",
        help="GB/s (2^30) at which an NPU adds a received chunk into its own (default 0 = free)",
    )


def _cost_choice(args: argparse.Namespace) -> CostChoice:
    return CostChoice(args.link_model, args.reduce_bandwidth)


def _problem(args: argparse.Namespace) -> tuple[Topology, list[Collective]]:
    """The topology (minus failures) and one collective per tenant group."""
    topology = _topology_of(args, args.topology or DEFAULT_TOPOLOGY)
    cost = _cost_choice(args)
    if cost.given:
        topology = topology.with_cost(cost.apply(topology.cost))
    failed_npus = parse_ids(args.fail_npus, "--fail-npus") if args.fail_npus else []
    failed_links = parse_links(args.fail_links) if args.fail_links else []
    if failed_npus or failed_links:
        topology = without_failures(topology, failed_npus, failed_links)
        topology.check_connected()
    kind = CollectiveKind.parse(args.collective or DEFAULT_COLLECTIVE)
    groups = (
        parse_groups(args.groups) if args.groups else [[topology.label(n) for n in topology.npus]]
    )
    chunks_per_npu = 1 if args.chunks_per_npu is None else args.chunks_per_npu
    collectives = []
    for group in groups:
        ranks = to_current_ids(topology, group, "--groups")
        root = None
        if args.root is not None:
            (root,) = to_current_ids(topology, [args.root], "--root")
            if kind.rooted and len(groups) > 1 and root not in ranks:
                root = None  # each tenant's root defaults to its first NPU
        collectives.append(Collective(kind, tuple(ranks), chunks_per_npu, _chunk_bytes(args), root))
    return topology, collectives


def _chunk_bytes(args: argparse.Namespace) -> int:
    return parse_size(args.chunk_size or DEFAULT_CHUNK_SIZE)


def _synthesize_from_args(args: argparse.Namespace) -> tuple[list[Schedule], float]:
    topology, collectives = _problem(args)
    started = time.perf_counter()
    with _progress_bar(quiet=args.quiet) as progress:
        schedules = synthesize_tenants(
            topology,
            collectives,
            seed=args.seed,
            policy=args.policy,
            sends_in_flight=1 if args.one_port else None,
            progress=progress,
            engine=args.engine,
            tries=args.tries,
            algorithm=args.algorithm,
        )
    return schedules, time.perf_counter() - started


@contextmanager
def _progress_bar(*, quiet: bool) -> Iterator[ProgressCallback | None]:
    """A tqdm bar on stderr that appears only after 1 s, only on a terminal."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(desc="synthesizing", unit="chunk", delay=1.0, leave=False, file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(json.dumps(data, indent=2) if getattr(args, "json", False) else text)


# ---------------------------------------------------------------- commands
def _synthesis_report(
    args: argparse.Namespace,
    topology: Topology,
    collectives: Sequence[Collective],
    transfers: int,
    elapsed: float,
    seconds: float,
) -> tuple[dict[str, Any], str]:
    """What ``tacos synthesize`` reports of any result, as JSON fields and a first line."""
    bounds = [lower_bounds(topology, collective) for collective in collectives]
    bound = max(b.best_us for b in bounds)
    first = collectives[0]
    data: dict[str, Any] = {
        "topology": topology.name,
        "collective": first.kind.value,
        "npus": topology.num_npus,
        "switches": topology.num_switches,
        "links": len(topology.links),
        "chunks": sum(collective.num_chunks for collective in collectives),
        "chunk_bytes": first.chunk_bytes,
        "transfers": transfers,
        "seed": args.seed,
        "collective_time_us": elapsed,
        "lower_bound_us": bound,
        "ratio_to_bound": elapsed / bound if bound else None,
        "synthesis_seconds": round(seconds, 6),
    }
    if len(bounds) == 1:
        data["bounds"] = bounds[0].as_dict()
    text = (
        f"{first.kind} on {topology.describe()}: "
        f"{elapsed:.6g} us ({data['ratio_to_bound']:.3f}x lower bound {bound:.6g} us), "
        f"{transfers} transfers, synthesized in {seconds:.3f} s"
    )
    return data, text


def _stream_synthesis(args: argparse.Namespace) -> int:
    """``tacos synthesize --stream FILE``: an All-Gather written to disk as it is made."""
    if args.output or args.tries != 1 or args.one_port or args.engine == "reference":
        raise TacosError(
            "--stream writes the fast engine's All-Gather as it is made; drop -o/--output, "
            "--tries, --one-port and --engine reference"
        )
    if args.algorithm not in ("tacos", "best"):
        raise TacosError(
            f"--stream writes TACOS's All-Gather as it is made; drop --algorithm {args.algorithm}"
        )
    topology, collectives = _problem(args)
    if len(collectives) != 1:
        raise TacosError("--stream takes one collective over every NPU; drop --groups")
    started = time.perf_counter()
    with _progress_bar(quiet=args.quiet) as progress:
        summary = stream_all_gather(
            topology,
            collectives[0],
            args.stream,
            seed=args.seed,
            policy=args.policy,
            progress=progress,
        )
    seconds = time.perf_counter() - started
    data, text = _synthesis_report(
        args, topology, collectives, summary.transfers, summary.collective_time_us, seconds
    )
    data["stream"] = str(summary.path)
    data["stream_bytes"] = summary.bytes_written
    _emit(args, data, f"{text}; streamed {summary.bytes_written} bytes to {summary.path}")
    return 0


def _cmd_synthesize(args: argparse.Namespace) -> int:
    for target in (args.output, args.stream):
        if target is not None:
            check_file_target(target)
    if args.stream:
        return _stream_synthesis(args)
    schedules, seconds = _synthesize_from_args(args)
    if args.output:
        save_schedules(args.output, schedules)
    data, text = _synthesis_report(
        args,
        schedules[0].topology,
        [s.collective for s in schedules],
        sum(len(s.transfers) for s in schedules),
        max(s.collective_time_us for s in schedules),
        seconds,
    )
    meta = schedules[0].meta
    data["algorithm"] = meta.get("algorithm", "tacos")
    if "variant" in meta:
        data["variant"] = meta["variant"]
    if "candidates_us" in meta:
        data["candidates_us"] = meta["candidates_us"]
    if data["algorithm"] != "tacos" or "candidates_us" in meta:
        text += f"; {_winner(meta)}"
    data["output"] = str(args.output) if args.output else None
    if args.output:
        text += f"; wrote {args.output}"
    if len(schedules) > 1:
        data["tenants"] = _tenant_table(schedules, args)
        data["tenants_synthesized"] = meta["tenants_synthesized"]
        data["tenants_us"] = meta["tenants_us"]
        text += f"; {_tenants_built(meta)}"
    for row in data.get("tenants", []):
        text += (
            f"\n  tenant {row['tenant']} ({len(row['ranks'])} ranks): {row['together_us']:.6g} us "
            f"sharing the network, {row['alone_us']:.6g} us alone"
        )
    _emit(args, data, text)
    return 0


def _winner(meta: dict[str, Any]) -> str:
    """``best of 3 built: ring (bidirectional), TACOS 180.281 us``, ``best of 1 built: tacos
    (trees)`` or ``algorithm ring (...)``."""
    name = meta.get("algorithm", "tacos")
    if meta.get("variant") not in (None, name):
        name += f" ({meta['variant']})"
    if name == "tacos" and meta.get("construction") == "trees":
        name += " (trees)"  # from tacos.synthesizer.trees
    built = meta.get("candidates_us")
    if built is None:
        return f"algorithm {name}"
    tacos_us = built.get("tacos")
    lost = tacos_us is not None and not name.startswith("tacos")
    versus = f", TACOS {tacos_us:.6g} us" if lost else ""
    return f"best of {len(built)} built: {name}{versus}"


def _tenants_built(meta: dict[str, Any]) -> str:
    """``tenants built apart, replayed together (on one timeline: 269.35 us)`` or the reverse."""
    other = "together" if meta["tenants_synthesized"] == "apart" else "apart"
    how = {"apart": "built apart, replayed together", "together": "built on one timeline"}
    if other not in meta["tenants_us"]:
        return f"tenants {how['together']} (too large to build apart as well)"
    other_us = meta["tenants_us"][other]
    versus = "did not verify together" if other_us is None else f"{other_us:.6g} us"
    return f"tenants {how[meta['tenants_synthesized']]} ({how[other]}: {versus})"


def _tenant_table(schedules: list[Schedule], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each tenant's time in the joint schedule and when synthesized alone."""
    rows = []
    for index, schedule in enumerate(schedules):
        alone = synthesize(
            schedule.topology, schedule.collective, seed=args.seed, policy=args.policy
        )
        rows.append(
            {
                "tenant": index,
                "ranks": [schedule.topology.label(r) for r in schedule.collective.ranks],
                "together_us": schedule.collective_time_us,
                "alone_us": alone.collective_time_us,
                "verified": verify(schedule).ok,
            }
        )
    return rows


def _cmd_verify(args: argparse.Namespace) -> int:
    checker = checkers().get(args.format)
    if checker is not None:
        _refuse_import_arguments(args, f"to --format {args.format}, which checks the file itself")
        result = checker.check(args.file, checker.options_from_args(args))
        _emit(args, result.data, result.text)
        return 0 if result.ok else 1
    if args.format == "json":
        _refuse_import_arguments(args, "with --format json")
        schedules = _schedules_in(args.file)
    else:
        schedules = [_import_schedule(args.format, args.file, args)]
    reports = [verify(schedule) for schedule in schedules]
    verdicts = [_verdict(s, r) for s, r in zip(schedules, reports, strict=True)]
    ok = all(report.ok for report in reports)
    undecided = not ok and all(
        r.ok or v[0] == "cannot tell" for r, v in zip(reports, verdicts, strict=True)
    )
    data = {
        "file": str(args.file),
        "verified": ok,
        "verdict": "ok" if ok else "cannot tell" if undecided else "failed",
        "collective": schedules[0].collective.kind.value,
        "collective_time_us": max(report.collective_time_us for report in reports),
        "error_count": sum(report.error_count for report in reports),
        "errors": [e for report in reports for e in report.errors],
    }
    lines = [
        f"{args.file}{f' tenant {i}' if len(reports) > 1 else ''}: {text}"
        for i, (_, text) in enumerate(verdicts)
    ]
    _emit(args, data, "\n".join(lines))
    return 0 if ok else EXIT_CANNOT_TELL if undecided else 1


def _verdict(schedule: Schedule, report: VerificationReport) -> tuple[str, str]:
    """("ok" | "failed" | "cannot tell", text): a failure that rests on guesses about what
    messages carry (``meta["lineage_guesses"]`` of an import) decides nothing."""
    guesses = schedule.meta.get("lineage_guesses") or []
    if report.ok or not guesses:
        return ("ok" if report.ok else "failed"), report.summary()
    return "cannot tell", (
        "CANNOT TELL: the traces do not say what every message carries ("
        + "; ".join(guesses)
        + f"); read that way it fails with {report.error_count} problems, the first: "
        + report.errors[0]
    )


def _cmd_simulate(args: argparse.Namespace) -> int:
    schedule = merge_tenants(_schedules_in(args.file))
    if args.sends_in_flight is not None and args.sends_in_flight < 1:
        raise TacosError("--sends-in-flight must be at least 1")
    cost = _cost_choice(args).apply(schedule.topology.cost)
    result = simulate(schedule, sends_in_flight=args.sends_in_flight, cost=cost)
    recorded = schedule.collective_time_us
    busy = result.link_utilisation()
    data = {
        "file": str(args.file),
        "collective_time_us": result.collective_time_us,
        "recorded_time_us": recorded,
        "matches_recorded": result.collective_time_us == recorded,
        "transfers": len(schedule.transfers),
        "mean_link_utilisation": sum(busy.values()) / len(schedule.topology.links) if busy else 0.0,
    }
    text = (
        f"{args.file}: simulated collective time {result.collective_time_us:.6g} us "
        f"(schedule records {recorded:.6g} us)"
    )
    if not cost.is_default:
        data["cost"] = cost.to_dict()
        text += f" with {cost.describe()}"
    _emit(args, data, text)
    return 0


def _cmd_bounds(args: argparse.Namespace) -> int:
    topology, collectives = _problem(args)
    bounds = lower_bounds(topology, collectives[0])
    kind = collectives[0].kind
    data = {"topology": topology.name, "collective": kind.value, **bounds.as_dict()}
    text = ", ".join(f"{k} {v:.6g}" for k, v in bounds.as_dict().items())
    _emit(args, data, f"{kind} on {topology.describe()}: {text}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    _refuse_other_formats_options(args)
    if args.workload:
        return _export_workload(args)
    writer = writers()[args.format]
    options = writer.options_from_args(args)
    writer.check_target(args.output, options)
    if args.schedule:
        if args.topology or args.collective or args.import_from:
            raise TacosError("give either --schedule or --from or --topology/--collective")
        if _cost_choice(args).given or args.chunk_size:
            raise TacosError(
                "--schedule is exported as it was timed; --link-model, --reduce-bandwidth and "
                "--chunk-size apply to schedules synthesized or imported here (or see "
                "tacos simulate --link-model)"
            )
        _refuse_synthesis_options(args, "--schedule, which is exported as it is")
        _refuse_link_speeds(args, "--schedule, whose topology is in the file")
        schedules, seconds = _schedules_in(args.schedule), 0.0
        require_verified(schedules, args.schedule)
    elif args.import_from:
        import_format, source = args.import_from
        _refuse_synthesis_options(args, f"--from {import_format}, which reads the schedule")
        if not args.topology:
            _refuse_link_speeds(args, f"--from {import_format} without --topology")
        schedules, seconds = [_import_schedule(import_format, Path(source), args)], 0.0
    else:
        schedules, seconds = _synthesize_from_args(args)
    schedule = merge_tenants(schedules)
    result = writer.export(schedules, args.output, options)
    nodes = f", {result.nodes} nodes" if result.nodes else ""
    print(
        f"wrote {len(result.files)} file(s) to {args.output} ({args.format}): "
        f"{result.ranks} ranks{nodes}, {len(schedule.transfers)} transfers, "
        f"predicted collective time {schedule.collective_time_us:.6g} us"
        + (f", synthesized in {seconds:.3f} s" if seconds else "")
    )
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def _refuse_other_formats_options(args: argparse.Namespace) -> None:
    """An option of another format (``--nchannels`` with ``--format json``), or of workload
    bundles without ``--workload``, is refused rather than ignored."""
    mine = [writers()[args.format].add_arguments]
    if args.workload and args.format in workload_writers():
        mine.append(workload_writers()[args.format].add_arguments)
    allowed = {dest for adder in mine for dest in _option_defaults(adder)}
    others = [(name, w.add_arguments, "format") for name, w in writers().items()] + [
        (name, w.add_arguments, "workload bundle") for name, w in workload_writers().items()
    ]
    for name, adder, what in others:
        for dest, default in _option_defaults(adder).items():
            if dest not in allowed and getattr(args, dest, default) != default:
                option = "--" + dest.replace("_", "-")
                where = f"--format {args.format}" + (" --workload" if args.workload else "")
                raise TacosError(f"{option} is an option of the {name} {what}, not of {where}")


def _option_defaults(add_arguments: Callable[[Any], None]) -> dict[str, Any]:
    """The options a format adds, each with its default (read off a parser of its own)."""
    probe = argparse.ArgumentParser(add_help=False)
    add_arguments(probe)
    return vars(probe.parse_args([]))


WORKLOAD_CONFLICTS = ("schedule", "import_from", "collective", "groups", "fail_npus",
                      "fail_links", "root")  # fmt: skip
"""Options that say which collective to export, which a workload says itself."""


def _export_workload(args: argparse.Namespace) -> int:
    """``tacos-export --workload PREFIX --topology NET``: a whole workload as a bundle."""
    writer = workload_writers().get(args.format)
    if writer is None:
        known = ", ".join(sorted(workload_writers()))
        raise TacosError(
            f"--workload writes a bundle of format {known}; drop --format {args.format}"
        )
    given = [f"--{name.replace('_', '-')}" for name in WORKLOAD_CONFLICTS if getattr(args, name)]
    if given:
        raise TacosError(f"--workload exports the workload's own collectives; drop {given[0]}")
    if not args.topology:
        raise TacosError("--workload needs --topology NET: the network the workload runs on")
    options = writer.options_from_args(args)
    writer.check_target(args.output, options)
    topology = _topology_of(args, args.topology)
    network = analytical_network_file(args.topology)
    workload = read_workload(args.workload, topology.num_npus, options.comm_groups)
    started = time.perf_counter()
    result, plan = writer.export(workload, topology, args.output, options, network)
    print(
        f"wrote {len(result.files)} file(s) to {args.output} (ASTRA-sim workload bundle): "
        f"{plan.summary()}, synthesized in {time.perf_counter() - started:.3f} s"
    )
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def _add_import_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of imported schedules: traces carry no timing and may not name their collective."""
    parser.add_argument(
        "--collective",
        default=None,
        help="the collective the traces implement (default: their GlobalMetadata says)",
    )
    parser.add_argument(
        "--topology",
        default=None,
        help="spec or topology file that times the messages (default: the ranks fully "
        f"connected at {DEFAULT_BANDWIDTH_GBPS:g} GB/s, {DEFAULT_LATENCY_US:g} us)",
    )
    parser.add_argument(
        "--chunk-size",
        default=None,
        help=f"bytes per chunk of MSCCL XML read as a schedule (import, tacos-export --from; "
        f"default {DEFAULT_CHUNK_SIZE}); Chakra messages carry their own sizes",
    )
    _add_cost_arguments(parser)


SYNTHESIS_DEFAULTS = {"root": None, "fail_npus": None, "fail_links": None, "groups": None,
                      "chunks_per_npu": None, "seed": 0, "policy": "rarest", "one_port": False,
                      "engine": "auto", "tries": 1, "algorithm": DEFAULT_ALGORITHM}  # fmt: skip
"""Options that shape a synthesis, at their defaults (a file read in takes none of them)."""


def _refuse_synthesis_options(args: argparse.Namespace, where: str) -> None:
    for name, default in SYNTHESIS_DEFAULTS.items():
        if getattr(args, name, default) != default:
            option = "--" + name.replace("_", "-")
            raise TacosError(f"{option} applies to schedules synthesized here, not to {where}")


def _refuse_link_speeds(args: argparse.Namespace, where: str) -> None:
    for option in ("bandwidth", "latency"):
        if getattr(args, option, None) is not None:
            raise TacosError(f"--{option} sets the links of a generated --topology, not {where}")


def _refuse_import_arguments(args: argparse.Namespace, where: str) -> None:
    if args.topology or args.collective or args.chunk_size or _cost_choice(args).given:
        raise TacosError(
            "--topology and --collective apply to imported schedules (as do --chunk-size, "
            f"--link-model and --reduce-bandwidth), not {where}"
        )


def _topology_of(args: argparse.Namespace, spec_or_path: str) -> Topology:
    """``--topology``, its links at ``--bandwidth`` and ``--latency`` where it is generated
    from a spec that takes them; anywhere else, giving either is refused, not ignored."""
    bandwidth, latency = getattr(args, "bandwidth", None), getattr(args, "latency", None)
    kind = spec_or_path.split(":")[0].strip().lower() if is_spec(spec_or_path) else None
    if (bandwidth is not None or latency is not None) and kind in (None, *SPEEDS_IN_OPTIONS):
        example = f", e.g. {kind}:2x8,nic=25" if kind else ""
        raise TacosError(
            f"{spec_or_path}: --bandwidth and --latency set the links of generated topologies "
            f"(ring:8, mesh2d:4x4, fat-tree:4, ...); this one sets its own{example}"
        )
    return load_topology(
        spec_or_path,
        bandwidth_GBps=DEFAULT_BANDWIDTH_GBPS if bandwidth is None else bandwidth,
        latency_us=DEFAULT_LATENCY_US if latency is None else latency,
    )


def _import_schedule(import_format: str, source: Path, args: argparse.Namespace) -> Schedule:
    """Read a schedule with an importer; --topology/--collective as the command line gives them."""
    topology = _topology_of(args, args.topology) if args.topology else None
    kind = CollectiveKind.parse(args.collective) if args.collective else None
    chunk_bytes = parse_size(args.chunk_size) if args.chunk_size else None
    return import_schedule(
        import_format,
        source,
        collective=kind,
        topology=topology,
        chunk_bytes=chunk_bytes,
        cost=_cost_choice(args),
    )


def _cmd_import(args: argparse.Namespace) -> int:
    generated = not args.file.exists() and is_spec(str(args.file))
    if reads_topology(args.file) or generated:
        _refuse_import_arguments(args, "to topology files")
        if generated:
            imported = TopologyImport(from_spec(str(args.file)), "generated from its spec")
        else:
            imported = import_topology(args.file)
        _emit(args, {"file": str(args.file), **imported.summary()}, imported.describe())
        return 0
    import_format = schedule_format_of(args.file)
    schedule = _import_schedule(import_format, args.file, args)
    report = verify(schedule)
    spec = schedule.collective
    reductions = sum(t.op is Op.REDUCE for t in schedule.transfers)
    data = {
        "file": str(args.file),
        "kind": "schedule",
        "format": import_format,
        "collective": spec.kind.value,
        "ranks": spec.num_ranks,
        "root": spec.root,
        "chunks": spec.num_chunks,
        "chunk_bytes": spec.chunk_bytes,
        "transfers": len(schedule.transfers),
        "reductions": reductions,
        "topology": schedule.topology.name,
        "collective_time_us": schedule.collective_time_us,
        "verified": report.ok,
        "errors": report.errors,
        "meta": schedule.meta,
    }
    text = (
        f"{args.file}: {import_format} schedule, {spec.kind} over {spec.num_ranks} ranks: "
        f"{spec.num_chunks} chunks of {spec.chunk_bytes} bytes, {len(schedule.transfers)} "
        f"transfers ({reductions} reductions) on {schedule.topology.describe()}\n"
        f"  verify: {_verdict(schedule, report)[1]}"
    )
    _emit(args, data, text)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    plan = plan_sweep(load_spec(args.spec), args.output)
    total, done = len(plan.spec.points), len(plan.spec.points) - len(plan.pending)
    quiet = args.quiet or not sys.stderr.isatty()
    with tqdm(total=total, initial=done, desc="sweeping", unit="point", disable=quiet) as bar:
        outcome = run_sweep(
            plan,
            scheduler=args.scheduler,
            jobs=args.jobs,
            address=args.address,
            on_row=lambda _row: bar.update(),
        )
    skipped = plan.spec.skipped
    note = f"; {skipped} combinations skipped (per-dimension values that do not fit)"
    print(
        f"{total} points: {len(outcome.computed)} computed ({outcome.errors} with errors), "
        f"{done} already in {outcome.table}" + (note if skipped else "")
    )
    return 0


def _schedules_in(path: Path) -> list[Schedule]:
    """The schedules of a schedule JSON or schedule-set file; a transfer stream (``--stream``)
    is named as what it is (it is read in Python: :func:`tacos.stream.to_table`)."""
    require_file(path, "schedule")
    try:
        with open(path, "rb") as handle:
            streamed = handle.read(len(STREAM_MAGIC)) == STREAM_MAGIC.encode("ascii")
    except OSError:
        streamed = False  # load_schedules says why it cannot read the file
    if streamed:
        raise TacosError(
            f"{path}: is a transfer stream (tacos synthesize --stream), not a schedule JSON; "
            "load it in Python with tacos.stream.to_table"
        )
    return load_schedules(path)


def _cmd_plot(args: argparse.Namespace) -> int:
    check_file_target(args.output)
    plot_file(args.file, args.output, kind=args.kind, color_by=args.color_by)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
