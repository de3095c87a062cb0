"""Scale report: All-Gather synthesis time, peak memory and quality from 64 to 40,000 NPUs.

Run: ``python benchmarks/scale.py [--big | --clusters] [--policy rarest random] [--chunks 1]
[--sends-in-flight K] [--engine auto|fast|reference] [--timeout SECONDS]``

For every topology (2D meshes and tori, 3D tori; 64..4096 NPUs, and with
``--big`` 16,384- and 40,000-NPU meshes; with ``--clusters`` DGX-like clusters
of 512 to 4096 GPUs instead) and policy it prints, measured in
this run: NPUs, directed links, chunks, transfers, synthesis seconds, peak
resident memory (MiB), the collective time over the best lower bound
(1.000 is provably optimal), and the verification seconds. Each point runs in
a fresh subprocess, so peak memory (``ru_maxrss``) is that point's alone; the
subprocess first loads the compiled kernels on a tiny problem, so the
seconds are synthesis, not start-up.

Up to 4096 NPUs, ``tacos.synthesize`` builds the schedule in memory and
``tacos.verify`` checks it (the array verifier). Larger All-Gathers are
streamed to a file with :func:`tacos.stream.stream_all_gather` (16 bytes per
transfer; 25.6 GB at 40,000 NPUs) in a temporary directory removed
afterwards (``--keep DIR`` keeps them); they are not verified.

``--sends-in-flight 1`` synthesizes for one-port NPUs (``--one-port``, as
ASTRA-sim's standalone route runs them; the bound is still the unlimited one),
built in memory and verified at every size (streaming has no port limit);
``--engine reference`` against the default shows what the compiled engine saves.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SMALL = ["mesh2d:8x8", "mesh2d:16x16", "mesh2d:32x32", "mesh2d:64x64",
         "torus2d:8x8", "torus2d:16x16", "torus2d:32x32", "torus2d:64x64",
         "torus3d:4x4x4", "torus3d:8x8x4", "torus3d:8x8x16", "torus3d:16x16x16"]  # fmt: skip
BIG = ["mesh2d:128x128", "mesh2d:200x200"]
CLUSTERS = ["dgx:64x8", "dgx:128x8", "dgx:256x8", "dgx:512x8"]
STREAM_ABOVE = 4096
"""Larger All-Gathers are streamed to disk instead of kept in memory."""


def measure(
    spec: str, policy: str, chunks: int, engine: str, keep: str | None, ports: int | None
) -> dict[str, Any]:
    """One point, in this process (called in a fresh subprocess by :func:`main`)."""
    import tacos
    from tacos.collective import Collective, CollectiveKind
    from tacos.stream import stream_all_gather

    for warm_spec in ("ring:4", "switch:4"):  # load the compiled kernels before timing
        warm = tacos.from_spec(warm_spec)
        tacos.synthesize(warm, Collective(CollectiveKind.ALL_GATHER, (0, 1, 2, 3)), engine="fast")
    topo = tacos.from_spec(spec)
    collective = Collective(CollectiveKind.ALL_GATHER, tuple(topo.npus), chunks, 2**20)
    started = time.perf_counter()
    bound = tacos.lower_bounds(topo, collective).best_us
    bound_s = time.perf_counter() - started
    streamed = topo.num_npus > STREAM_ABOVE and ports is None  # streams have no ports
    with _progress_bar(spec) as progress:
        started = time.perf_counter()
        if streamed:
            where = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="tacos-scale-"))
            path = where / f"{spec.replace(':', '-')}-{policy}.bin"
            summary = stream_all_gather(topo, collective, path, policy=policy, progress=progress)
            synth_s = time.perf_counter() - started
            count, finish = summary.transfers, summary.collective_time_us
            engine_used, written = "fast (streamed)", summary.bytes_written
            if not keep:
                path.unlink()
                where.rmdir()
        else:
            schedule = tacos.synthesize(
                topo,
                collective,
                policy=policy,
                engine=engine,
                progress=progress,  # type: ignore[arg-type]
                sends_in_flight=ports,
            )
            synth_s = time.perf_counter() - started
            count, finish = len(schedule.transfers), schedule.collective_time_us
            engine_used, written = str(schedule.meta["engine"]), 0
    synth_mib = _peak_mib()
    verify_s, ok = None, None
    if not streamed:
        started = time.perf_counter()
        report = tacos.verify(schedule)
        verify_s, ok = time.perf_counter() - started, report.ok
        if not ok:
            print(report.summary(), file=sys.stderr)
    return {
        "topology": spec,
        "npus": topo.num_npus,
        "links": len(topo.links),
        "chunks": collective.num_chunks,
        "policy": policy,
        "sends_in_flight": ports,
        "engine": engine_used,
        "transfers": count,
        "synth_s": synth_s,
        "synth_peak_mib": synth_mib,
        "peak_mib": _peak_mib(),
        "time_us": finish,
        "bound_us": bound,
        "bound_s": bound_s,
        "verify_s": verify_s,
        "verified": ok,
        "bytes_streamed": written,
    }


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@contextmanager
def _progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A tqdm bar on stderr for runs longer than a second (deliveries done / total)."""
    from tqdm import tqdm

    with tqdm(
        desc=label, unit="chunk", unit_scale=True, delay=1.0, leave=False, disable=None
    ) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="also 16,384 and 40,000 NPUs")
    parser.add_argument("--clusters", action="store_true", help="DGX-like clusters instead")
    parser.add_argument("--topologies", nargs="+", help="topology specs instead of the suite")
    parser.add_argument("--timeout", type=float, help="give up on a point after this many s")
    parser.add_argument("--policy", nargs="+", default=["rarest", "random"])
    parser.add_argument("--chunks", type=int, default=1, help="chunks per NPU")
    parser.add_argument("--engine", default="auto", choices=["auto", "fast", "reference"])
    parser.add_argument(
        "--sends-in-flight", type=int, help="messages per NPU at once (1: one-port)"
    )
    parser.add_argument("--keep", metavar="DIR", help="keep streamed schedules in DIR")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON lines")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # internal: run one point
    args = parser.parse_args()
    if args.point:
        spec, policy = args.point.split(",")
        row = measure(spec, policy, args.chunks, args.engine, args.keep, args.sends_in_flight)
        print(json.dumps(row))
        return

    specs = args.topologies or (CLUSTERS if args.clusters else SMALL + (BIG if args.big else []))
    header = (f"{'topology':18} {'policy':6} {'NPUs':>6} {'links':>7} {'chunks':>6} "
              f"{'transfers':>13} {'synth_s':>9} {'peak_MiB':>9} {'time/bound':>10} "
              f"{'verify_s':>8}  engine")  # fmt: skip
    print(header)
    print("-" * len(header))
    rows = []
    for spec in specs:
        for policy in args.policy:
            command = [sys.executable, __file__, "--point", f"{spec},{policy}",
                       "--chunks", str(args.chunks), "--engine", args.engine]  # fmt: skip
            if args.keep:
                command += ["--keep", args.keep]
            if args.sends_in_flight is not None:
                command += ["--sends-in-flight", str(args.sends_in_flight)]
            # stderr stays the terminal's: the point's progress bar shows there.
            try:
                done = subprocess.run(
                    command, stdout=subprocess.PIPE, text=True, check=False, timeout=args.timeout
                )
            except subprocess.TimeoutExpired:
                print(f"{spec} {policy}: not done in {args.timeout:g} s", flush=True)
                continue
            if done.returncode != 0:
                print(f"{spec} {policy}: failed (exit status {done.returncode})", file=sys.stderr)
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            verify = "-" if row["verify_s"] is None else f"{row['verify_s']:.2f}"
            flag = "" if row["verified"] in (True, None) else "  NOT VERIFIED"
            print(
                f"{spec:18} {policy:6} {row['npus']:>6} {row['links']:>7} {row['chunks']:>6} "
                f"{row['transfers']:>13,} {row['synth_s']:>9.2f} {row['synth_peak_mib']:>9.0f} "
                f"{row['time_us'] / row['bound_us']:>10.4f} {verify:>8}  {row['engine']}{flag}",
                flush=True,
            )
            if args.json:
                with open(args.json, "a", encoding="utf-8") as out:
                    out.write(json.dumps(row) + "\n")
    print("-" * len(header))
    print(
        "synth_s: tacos.synthesize (or tacos.stream.stream_all_gather above "
        f"{STREAM_ABOVE} NPUs); peak_MiB: ru_maxrss after synthesis; time/bound: collective "
        "time over tacos.lower_bounds(...).best_us; verify_s: tacos.verify"
    )


if __name__ == "__main__":
    main()
