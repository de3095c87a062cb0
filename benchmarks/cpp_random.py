"""Random asymmetric graphs: our All-Gather time against the upstream C++ TACOS, run here.

Run: ``python benchmarks/cpp_random.py --tacos-src DIR [--cases 10] [--seeds 5]``

``DIR`` is a checkout of the C++ TACOS at v1.3.0::

    git clone --branch v1.3.0 https://github.com/astra-sim/tacos DIR

The script compiles ``benchmarks/tacos_cpp_harness.cpp`` together with every
``DIR/src/*/*.cpp`` (``g++ -O2 -std=c++17 -I DIR/include``; not ``src/main.cpp``)
into ``--build-dir`` (a temporary directory unless given; an existing binary
newer than its sources is reused). The harness builds upstream's
``Topology`` from a link list, ``AllGather(npus, C)`` and one ``Synthesizer``,
and prints ``Synthesizer::solve``'s time for each run (see its header).

The inputs, drawn from ``--graph-seed`` and the case's name (the same cases
every run; a larger ``--cases`` adds cases and keeps the others):

* NPU counts 8, 12, 16, 24 and 32, ``--cases`` graphs each: a directed cycle
  through a random permutation of the NPUs (so the graph is strongly
  connected) plus between ``n / 2`` and ``2 n`` random extra directed links. A
  link ``u -> v`` says nothing about ``v -> u``.
* Each link's bandwidth drawn from 25, 50, 100 and 200 GiB/s, latency 0.5 us,
  link time ``latency + size / bandwidth`` in both tools.
* ``C`` chunks per NPU from 1, 2 and 4, and 1 to 64 MiB per NPU (a power of
  two), so a chunk is ``MiB * 2**20 // C`` bytes.

Upstream's synthesizer seeds its ``std::mt19937`` from ``std::random_device``
with no way to set it; the harness reseeds it with run numbers 0, 1, ... so
that this report is reproducible (``--cpp-random-device`` leaves upstream's
own unrepeatable seeding, as its tests use it). Per case it prints, measured
in this run, over the C++ best of ``--cpp-runs`` runs: our time with seed 0,
our best over ``--seeds`` seeds (at most 1.000: we are not slower), and our
best lower bound. Every one of our schedules is checked with ``tacos.verify``
and ``tacos.simulate``; the C++ times are taken as upstream reports them.
Upstream's ``findReplacementChunk_`` may deliver, when a link finishes a chunk
its destination already has, another chunk that reached the link's source only
after the transfer began, so its time can be lower than any causal schedule's.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import tacos
from tacos.collective import Collective, CollectiveKind
from tacos.topology import Link, Topology

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import checked  # noqa: E402

HARNESS = Path(__file__).resolve().parent / "tacos_cpp_harness.cpp"
NPU_COUNTS = (8, 12, 16, 24, 32)
BANDWIDTHS = (25.0, 50.0, 100.0, 200.0)  # GiB/s
LATENCY_US = 0.5
CHUNKS_PER_NPU = (1, 2, 4)
MIB_PER_NPU = (1, 2, 4, 8, 16, 32, 64)


def build_harness(tacos_src: Path, build_dir: Path) -> Path:
    """Compile the harness with upstream's sources; reuse a binary newer than all of them."""
    sources = sorted((tacos_src / "src").glob("*/*.cpp"))
    if not sources or not (tacos_src / "include" / "tacos").is_dir():
        raise SystemExit(f"{tacos_src} is not a checkout of astra-sim/tacos (no src/, include/)")
    binary = build_dir / "tacos_cpp_harness"
    inputs = [HARNESS, *sources, *(tacos_src / "include").rglob("*.h")]
    if binary.exists() and binary.stat().st_mtime > max(p.stat().st_mtime for p in inputs):
        return binary
    build_dir.mkdir(parents=True, exist_ok=True)
    command = ["g++", "-O2", "-std=c++17", "-I", str(tacos_src / "include"), "-o", str(binary)]
    print(f"compiling the C++ TACOS harness into {binary} ...", file=sys.stderr)
    subprocess.run([*command, str(HARNESS), *map(str, sources)], check=True)
    return binary


def random_graph(rng: random.Random, n: int, name: str) -> Topology:
    """A random directed cycle through all ``n`` NPUs plus random extra directed links."""
    order = rng.sample(range(n), n)
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    target = len(pairs) + rng.randint(n // 2, 2 * n)
    while len(pairs) < target:
        u, v = rng.sample(range(n), 2)
        pairs.add((u, v))
    links = tuple(Link(u, v, rng.choice(BANDWIDTHS), LATENCY_US) for u, v in sorted(pairs))
    return Topology(n, links, name=name)


def cpp_times(
    binary: Path, topo: Topology, spec: Collective, runs: int, seeded: bool
) -> list[float]:
    """The C++ TACOS's collective time of each of ``runs`` runs, in microseconds."""
    header = f"{topo.num_npus} {spec.chunks_per_rank} {spec.chunk_bytes} {runs}"
    lines = [f"{header} 0" if seeded else header]
    lines += [f"{lk.src} {lk.dst} {lk.bandwidth_GBps!r} {lk.latency_us!r}" for lk in topo.links]
    result = subprocess.run(
        [str(binary)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    )
    times = [float(word) for word in result.stdout.split()]
    if len(times) != runs:
        raise SystemExit(f"{topo.name}: the harness printed {len(times)} times, not {runs}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tacos-src", type=Path, required=True, help="astra-sim/tacos checkout")
    parser.add_argument("--build-dir", type=Path, help="where to compile (default: a temp dir)")
    parser.add_argument("--cases", type=int, default=10, help="graphs per NPU count")
    parser.add_argument("--seeds", type=int, default=5, help="our seeds per case")
    parser.add_argument("--cpp-runs", type=int, default=5, help="C++ runs per case")
    parser.add_argument(
        "--cpp-random-device",
        action="store_true",
        help="let the C++ TACOS seed itself from std::random_device (not reproducible)",
    )
    parser.add_argument("--graph-seed", type=int, default=2024, help="seed of the random cases")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tacos_cpp_") as scratch:
        binary = build_harness(args.tacos_src.resolve(), args.build_dir or Path(scratch))
        header = (f"{'case':12} {'NPUs':>4} {'links':>5} {'C':>2} {'MiB':>3} {'cpp_best_us':>11}"
                  f" {'seed0/cpp':>9} {'best/cpp':>8} {'bound/cpp':>9}")  # fmt: skip
        print(header)
        print("-" * len(header))
        met = total = 0
        slower: list[tuple[str, float]] = []
        for n in NPU_COUNTS:
            for k in range(args.cases):
                name = f"random{n}-{k}"
                rng = random.Random(f"{args.graph_seed}/{name}")  # more --cases keep these
                topo = random_graph(rng, n, name)
                chunks, mib = rng.choice(CHUNKS_PER_NPU), rng.choice(MIB_PER_NPU)
                spec = Collective(
                    CollectiveKind.ALL_GATHER, tuple(range(n)), chunks, (mib << 20) // chunks
                )
                ours = [
                    checked(tacos.synthesize(topo, spec, seed=seed), f"{name} seed {seed}")
                    for seed in range(args.seeds)
                ]
                cpp = min(cpp_times(binary, topo, spec, args.cpp_runs, not args.cpp_random_device))
                bound = tacos.lower_bounds(topo, spec).best_us
                total += 1
                if min(ours) <= cpp * (1 + 1e-6):
                    met += 1
                else:
                    slower.append((name, min(ours) / cpp))
                print(
                    f"{name:12} {n:>4} {len(topo.links):>5} {chunks:>2} {mib:>3} {cpp:>11.2f}"
                    f" {ours[0] / cpp:>9.4f} {min(ours) / cpp:>8.4f} {bound / cpp:>9.4f}"
                )
    print("-" * len(header))
    if slower:
        print("slower: " + ", ".join(f"{name} {ratio:.4f}" for name, ratio in slower))
    print(
        f"ours (best of {args.seeds}) never slower than C++ best of {args.cpp_runs}: "
        f"{met} of {total}"
    )


if __name__ == "__main__":
    main()
