"""All-Gathers too big for memory: the schedule streamed to one binary file as it is made.

A 40,000-NPU All-Gather has 1.6 billion transfers, 26 GB even at 16 bytes
each, so :func:`stream_all_gather` writes the fast engine's blocks to disk as
they come and keeps only the engine's state in memory. The file is:

* a first line ``TACOS-TRANSFERS 1 <header bytes> <records offset>\\n``, then
  a JSON header (``collective``, ``topology``, ``meta``, ``count``,
  ``collective_time_us``, the record ``dtype``), padded with spaces up to the
  records offset (a multiple of 16 bytes);
* then ``count`` fixed-size records ``(chunk int32, link int32, start float64)``
  in schedule order (start time, then link), readable with ``numpy.memmap``
  (:func:`open_stream`) without loading the file.

Every other field of a transfer follows from these and the topology: ``src``
and ``dst`` are the link's ends, ``end`` is ``start`` plus the link time, the
op is a copy, and the one dependency is the transfer that brought the chunk to
``src`` (none when ``src`` owns the chunk); :func:`to_table` rebuilds them for
a file small enough to load.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.inputfile import require_file
from tacos.output import atomic_file
from tacos.schedule import Schedule
from tacos.synthesizer import fastest_construction
from tacos.synthesizer.collectives import Tenants
from tacos.synthesizer.fast import Block, Sources, fast_unsupported, spread_blocks, spread_table
from tacos.synthesizer.greedy import ChunkPolicy
from tacos.synthesizer.list_scheduling import MAX_REORDERED_TRANSFERS
from tacos.synthesizer.timing import MAX_TAIL_TRANSFERS
from tacos.topology import Topology
from tacos.transfers import TransferTable

MAGIC = "TACOS-TRANSFERS"
STREAM_VERSION = 1
RECORD = np.dtype([("chunk", "<i4"), ("link", "<i4"), ("start", "<f8")])


@dataclass(frozen=True)
class StreamSummary:
    """What :func:`stream_all_gather` wrote."""

    path: Path
    transfers: int
    collective_time_us: float
    bytes_written: int


def stream_all_gather(
    topology: Topology,
    collective: Collective,
    path: str | Path,
    *,
    seed: int = 0,
    policy: ChunkPolicy = "rarest",
    progress: Callable[[int, int], None] | None = None,
) -> StreamSummary:
    """Synthesize an All-Gather over every NPU with the fast engine, straight to ``path``.

    The transfers are those of ``tacos.synthesize(topology, collective, seed=seed,
    policy=policy)``. One small enough for the tail pass or for reordering its
    links is made whole first (:func:`_blocks`); for a bigger one no post-pass
    changes an All-Gather of the fast engine's
    scope, as every copy is wanted and starts as early as it can, unless a
    link that left chunks to faster links sent one after all, or a faster link
    overtook a transfer that then landed with another chunk (``Block.late``,
    rare; on links of one speed into each NPU, never). Re-timing those needs
    every transfer in memory, so the stream then stops with an error and
    writes nothing. The header is written last, over space reserved for it,
    and the file appears at ``path`` only when complete
    (:func:`tacos.output.atomic_file`).
    """
    if collective.kind is not CollectiveKind.ALL_GATHER:
        raise TacosError(f"only All-Gathers can be streamed, not {collective.kind}")
    reason = fast_unsupported(topology, (collective,))
    if len(collective.ranks) != topology.num_npus:
        reason = "its ranks are a subset of the NPUs (others would relay; synthesize it in memory)"
    if reason is not None:
        raise TacosError(f"cannot stream this All-Gather: {reason}")
    path = Path(path)
    total = (topology.num_npus - 1) * collective.num_chunks
    done = 0

    def on_delivery(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    durations = np.asarray(topology.link_times_us(collective.chunk_bytes))
    # Room for the final header, whose count and time are longer than these.
    offset = _padded(
        len(_encode_header(_header(topology, collective, seed, policy, 0, 0.0), 0)) + 64
    )
    count, late, finish = 0, 0, 0.0
    with atomic_file(path) as out:
        out.write(b" " * offset)
        for block in _blocks(topology, collective, seed, policy, on_delivery):
            records = np.empty(len(block.chunk), RECORD)
            records["chunk"], records["link"], records["start"] = (
                block.chunk,
                block.link,
                block.start,
            )
            out.write(records.tobytes())
            count += len(records)
            late += block.late
            finish = max(finish, float((block.start + durations[block.link]).max()))
        if late:
            raise TacosError(
                f"{path}: not written: {late} transfers of this All-Gather went over links "
                "that had first left their chunks to faster links or were overtaken by "
                "faster ones, and re-timing them needs the whole schedule in memory; "
                "synthesize it without --stream "
                "(fewer chunks if it is too big)"
            )
        final = _encode_header(_header(topology, collective, seed, policy, count, finish), offset)
        if len(final) > offset:
            raise AssertionError("the stream header outgrew its reserved space")
        out.seek(0)
        out.write(final.ljust(offset))
    return StreamSummary(path, count, finish, path.stat().st_size)


def _blocks(
    topology: Topology,
    collective: Collective,
    seed: int,
    policy: ChunkPolicy,
    on_delivery: Callable[[int], None],
) -> Iterator[Block]:
    """The spread's transfers in blocks, as they are decided.

    A spread small enough for the tail pass (:data:`.MAX_TAIL_TRANSFERS`) or for
    reordering (:data:`.MAX_REORDERED_TRANSFERS`, a bound on its transfers as it
    has at least one per delivery), both of which change start times and so the
    order, is made whole by what ``tacos.synthesize`` runs
    (:func:`~tacos.synthesizer.fastest_construction`: every attempt, links
    reordered when that is faster, or trees where they are faster still), and
    given as one block.
    """
    deliveries = (topology.num_npus - 1) * collective.num_chunks
    if deliveries <= max(MAX_TAIL_TRANSFERS, MAX_REORDERED_TRANSFERS):
        whole, _, _ = fastest_construction(
            topology, Tenants((collective,)), seed, policy, None, "fast", on_delivery
        )
        table = TransferTable.from_transfers(whole)  # a table as it is
        yield Block(table.chunk, table.link, table.start)
        return
    yield from spread_blocks(
        topology,
        Sources.at_owners(collective),
        collective.num_chunks,
        collective.chunk_bytes,
        random.Random(seed),
        policy,
        on_delivery=on_delivery,
    )


def open_stream(path: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    """The header and a read-only memory map of the records of a stream file."""
    path = Path(path)
    require_file(path, "transfer stream")
    with open(path, "rb") as handle:
        first = handle.readline()
        parts = first.decode("ascii", "replace").split()
        if len(parts) != 4 or parts[0] != MAGIC:
            raise TacosError(f"{path}: not a TACOS transfer stream (no {MAGIC} line)")
        if parts[1] != str(STREAM_VERSION):
            raise TacosError(
                f"{path}: stream version {parts[1]} is not supported "
                f"(this tacos reads version {STREAM_VERSION}); upgrade tacos"
            )
        header = json.loads(handle.read(int(parts[2])))
    records = np.memmap(path, RECORD, mode="r", offset=int(parts[3]), shape=(header["count"],))
    return header, records


def to_table(path: str | Path) -> Schedule:
    """Load a stream file as a Schedule with a :class:`~tacos.transfers.TransferTable`."""
    header, records = open_stream(path)
    topology = Topology.from_dict(header["topology"], f"{path}: topology")
    collective = Collective.from_dict(header["collective"], f"{path}: collective")
    block = Block(
        records["chunk"].astype(np.int64),
        records["link"].astype(np.int64),
        np.array(records["start"], np.float64),
    )
    table = spread_table(topology, [block], Sources.at_owners(collective), collective.chunk_bytes)
    return Schedule(topology, collective, table, dict(header["meta"]))


def _header(
    topology: Topology,
    collective: Collective,
    seed: int,
    policy: str,
    count: int,
    finish: float,
) -> dict[str, Any]:
    return {
        "collective": collective.to_dict(),
        "collective_time_us": finish,
        "count": count,
        "dtype": [[name, RECORD[name].str] for name in RECORD.names or ()],
        "meta": {"synthesizer": "tacos-greedy", "seed": seed, "policy": policy, "engine": "fast"},
        "topology": topology.to_dict(),
    }


def _encode_header(header: dict[str, Any], offset: int) -> bytes:
    body = json.dumps(header, separators=(",", ":")).encode()
    return f"{MAGIC} {STREAM_VERSION} {len(body)} {offset:>20}\n".encode() + body


def _padded(size: int) -> int:
    """``size`` rounded up to whole records, so the records are aligned."""
    return -(-size // RECORD.itemsize) * RECORD.itemsize
