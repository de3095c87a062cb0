"""Command line: ``tacos`` (synthesize, verify, simulate, bounds) and ``tacos-export``.

A thin shell over the library: parse arguments, call the library, report.
Errors caused by input print one line ``tacos: error: ...`` and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tacos.bounds import lower_bounds
from tacos.collective import Collective, CollectiveKind, parse_size
from tacos.errors import TacosError
from tacos.exporters import EXPORTERS, ExportOptions, get_exporter
from tacos.schedule import Schedule
from tacos.simulate import simulate
from tacos.synthesizer import CHUNK_POLICIES, ProgressCallback, synthesize
from tacos.topology import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US, load_topology
from tacos.verify import verify

DEFAULT_TOPOLOGY = "ring:8"
DEFAULT_COLLECTIVE = "all-reduce"
EXIT_INPUT_ERROR = 2


# ------------------------------------------------------------------ entry points
def main(argv: Sequence[str] | None = None) -> int:
    """``tacos``: synthesize, verify, simulate, bounds."""
    parser = argparse.ArgumentParser(
        prog="tacos", description="Topology-aware collective algorithm synthesis (TACOS)."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("synthesize", help="synthesize a collective for a topology")
    _add_problem_arguments(p)
    p.add_argument("-o", "--output", type=Path, help="write the schedule JSON here")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.set_defaults(handler=_cmd_synthesize)

    p = commands.add_parser("verify", help="check a schedule's correctness")
    p.add_argument("file", type=Path, help="schedule JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_verify)

    p = commands.add_parser("simulate", help="replay a schedule and report its time")
    p.add_argument("file", type=Path, help="schedule JSON")
    p.add_argument(
        "--sends-in-flight",
        type=int,
        default=None,
        help="at most this many outstanding sends per NPU (1 = ASTRA-sim's standalone workload)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_simulate)

    p = commands.add_parser("bounds", help="lower bounds for a collective on a topology")
    _add_problem_arguments(p, with_seed=False)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_cmd_bounds)

    return _run(parser, argv)


def export_main(argv: Sequence[str] | None = None) -> int:
    """``tacos-export``: write a schedule (given, or synthesized on the spot) in a format."""
    parser = argparse.ArgumentParser(
        prog="tacos-export",
        description="Export a collective schedule. Without --schedule, one is synthesized "
        f"(default: {DEFAULT_COLLECTIVE} on {DEFAULT_TOPOLOGY}).",
    )
    parser.add_argument("--format", required=True, choices=sorted(EXPORTERS), help="output format")
    parser.add_argument("--schedule", type=Path, help="export this schedule JSON instead")
    _add_problem_arguments(parser)
    parser.add_argument("-o", "--output", type=Path, required=True, help="output file or directory")
    parser.set_defaults(handler=_cmd_export)
    return _run(parser, argv)


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except TacosError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------- arguments
def _add_problem_arguments(parser: argparse.ArgumentParser, *, with_seed: bool = True) -> None:
    parser.add_argument(
        "--topology",
        default=None,
        help=f"spec (ring:8, mesh2d:4x4, torus3d:4x4x4, hypercube:3, ...) or a .csv/.json file "
        f"(default {DEFAULT_TOPOLOGY})",
    )
    parser.add_argument(
        "--collective",
        default=None,
        help=f"{', '.join(k.value for k in CollectiveKind)} (default {DEFAULT_COLLECTIVE})",
    )
    parser.add_argument("--chunk-size", default="1MiB", help="bytes per chunk: 4096, 512KiB, 1MiB")
    parser.add_argument(
        "--chunks-per-npu", type=int, default=1, help="chunks each NPU's data splits into"
    )
    parser.add_argument(
        "--bandwidth",
        type=float,
        default=DEFAULT_BANDWIDTH_GBPS,
        help="GB/s (2^30) of generated links",
    )
    parser.add_argument(
        "--latency", type=float, default=DEFAULT_LATENCY_US, help="microseconds of generated links"
    )
    if with_seed:
        parser.add_argument("--seed", type=int, default=0, help="tie-breaking seed (default 0)")
        parser.add_argument(
            "--policy",
            choices=CHUNK_POLICIES,
            default="rarest",
            help="which eligible chunk a link sends: rarest (default) or random (plain TACOS)",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _problem(args: argparse.Namespace) -> tuple[Any, Collective]:
    topology = load_topology(
        args.topology or DEFAULT_TOPOLOGY, bandwidth_GBps=args.bandwidth, latency_us=args.latency
    )
    collective = Collective(
        CollectiveKind.parse(args.collective or DEFAULT_COLLECTIVE),
        tuple(topology.npus),
        args.chunks_per_npu,
        parse_size(args.chunk_size),
    )
    return topology, collective


def _synthesize_from_args(args: argparse.Namespace) -> tuple[Schedule, float]:
    topology, collective = _problem(args)
    started = time.perf_counter()
    with _progress_bar(quiet=args.quiet) as progress:
        schedule = synthesize(
            topology, collective, seed=args.seed, policy=args.policy, progress=progress
        )
    return schedule, time.perf_counter() - started


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
def _cmd_synthesize(args: argparse.Namespace) -> int:
    schedule, seconds = _synthesize_from_args(args)
    if args.output:
        schedule.save(args.output)
    bounds = lower_bounds(schedule.topology, schedule.collective)
    elapsed = schedule.collective_time_us
    data = {
        "topology": schedule.topology.name,
        "collective": schedule.collective.kind.value,
        "npus": schedule.topology.num_npus,
        "switches": schedule.topology.num_switches,
        "links": len(schedule.topology.links),
        "chunks": schedule.collective.num_chunks,
        "chunk_bytes": schedule.collective.chunk_bytes,
        "transfers": len(schedule.transfers),
        "seed": args.seed,
        "collective_time_us": elapsed,
        "lower_bound_us": bounds.best_us,
        "ratio_to_bound": elapsed / bounds.best_us if bounds.best_us else None,
        "bounds": bounds.as_dict(),
        "synthesis_seconds": round(seconds, 6),
        "output": str(args.output) if args.output else None,
    }
    text = (
        f"{schedule.collective.kind} on {schedule.topology.describe()}: "
        f"{elapsed:.6g} us ({data['ratio_to_bound']:.3f}x lower bound {bounds.best_us:.6g} us), "
        f"{len(schedule.transfers)} transfers, synthesized in {seconds:.3f} s"
        + (f"; wrote {args.output}" if args.output else "")
    )
    _emit(args, data, text)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    schedule = Schedule.load(args.file)
    report = verify(schedule)
    data = {
        "file": str(args.file),
        "verified": report.ok,
        "collective": schedule.collective.kind.value,
        "collective_time_us": report.collective_time_us,
        "error_count": report.error_count,
        "errors": report.errors,
    }
    _emit(args, data, f"{args.file}: {report.summary()}")
    return 0 if report.ok else 1


def _cmd_simulate(args: argparse.Namespace) -> int:
    schedule = Schedule.load(args.file)
    if args.sends_in_flight is not None and args.sends_in_flight < 1:
        raise TacosError("--sends-in-flight must be at least 1")
    result = simulate(schedule, sends_in_flight=args.sends_in_flight)
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
    _emit(args, data, text)
    return 0


def _cmd_bounds(args: argparse.Namespace) -> int:
    topology, collective = _problem(args)
    bounds = lower_bounds(topology, collective)
    data = {"topology": topology.name, "collective": collective.kind.value, **bounds.as_dict()}
    text = ", ".join(f"{k} {v:.6g}" for k, v in bounds.as_dict().items())
    _emit(args, data, f"{collective.kind} on {topology.describe()}: {text}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    exporter = get_exporter(args.format)
    if args.schedule:
        if args.topology or args.collective:
            raise TacosError("give either --schedule or --topology/--collective, not both")
        schedule, seconds = Schedule.load(args.schedule), 0.0
    else:
        schedule, seconds = _synthesize_from_args(args)
    result = exporter(schedule, args.output, ExportOptions(_format_settings(args)))
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


def _format_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Format-specific options are whatever the parser has beyond the common ones."""
    return {k: v for k, v in vars(args).items() if k != "handler"}


if __name__ == "__main__":
    sys.exit(main())
