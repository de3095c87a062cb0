"""Independent correctness check of any Schedule, whoever produced it.

The verifier shares nothing with the synthesizer but the data model. It
replays the transfers' *data*: every buffer slot holds the set of ranks whose
contribution it contains, a copy overwrites the receiver's slot with the
sender's value at the start of the transfer, and a reduction adds it (a rank
counted twice is an error). From that it checks:

* the postcondition of the collective, as
  :meth:`tacos.collective.Collective.final_data` states it (All-Gather: every
  rank holds every chunk; Reduce-Scatter: each owner holds the full reduction of
  its chunks; All-Reduce: every rank holds every full reduction; and so on);
* causality: nobody sends data it does not have yet, dependencies end before
  their dependants start;
* the cost model of the topology (:mod:`tacos.linkmodel`): a transfer uses an
  existing link between its endpoints, lasts at least latency + size /
  bandwidth (plus the reduction time for a reduction), and each link takes the
  next transfer only once the previous one has released it.

Example:
    >>> import tacos
    >>> topo = tacos.from_spec("ring:4")
    >>> spec = tacos.Collective(tacos.CollectiveKind.ALL_REDUCE, tuple(topo.npus))
    >>> tacos.verify(tacos.synthesize(topo, spec)).ok
    True
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Op, Schedule
from tacos.transfers import TransferTable

_REL_TOL = 1e-9
"""Causality holds up to this fraction of a time: sums of microsecond floats round."""
_ARRIVAL_REL_SLACK = 1e-12
"""The data replay applies an arrival this fraction of its time early, so that it comes
before a departure computed to end at the same time through other sums. Far smaller than
:data:`_REL_TOL`: at 7e9 us (reductions of 1000 s) that one is 7 us, which put an arrival
before departures that really came first."""
MAX_REPORTED = 20
ARRAY_PATH_ABOVE = 20_000
"""``verify`` checks schedules the array path takes with this many transfers on arrays."""
VALUE_BYTES_AT_ONCE = 1 << 28
"""The compiled replay of reducing schedules holds the slots of this many bytes of chunks
at a time (at least one chunk's)."""


@dataclass
class VerificationReport:
    """Outcome of :func:`verify`: ``ok`` and, when not, what is wrong (first few)."""

    ok: bool = True
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    collective_time_us: float = 0.0

    def fail(self, message: str) -> None:
        self.ok = False
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(message)

    def summary(self) -> str:
        if self.ok:
            return f"OK: collective completes at {self.collective_time_us:.6g} us"
        more = self.error_count - len(self.errors)
        tail = f"\n  ... and {more} more" if more else ""
        return f"FAILED ({self.error_count} problems):\n  " + "\n  ".join(self.errors) + tail


def require_verified(schedules: Sequence[Schedule], source: object) -> None:
    """Refuse schedules read from ``source`` unless each verifies: writers and plots take
    only correct schedules (a bad chunk id or time would otherwise fail deep inside them)."""
    for schedule in schedules:
        report = verify(schedule)
        if not report.ok:
            raise TacosError(
                f"{source}: the schedule does not verify ({report.errors[0]}); "
                f"tacos verify {source} lists the problems"
            )


def verify(schedule: Schedule, *, vectorised: bool | None = None) -> VerificationReport:
    """Check postcondition, causality and link exclusivity; never raises on bad schedules.

    Copy-only schedules of spreading collectives and schedules of reducing ones
    (switches or not, on the paper's link model) have an array path
    (:func:`_verify_arrays`) that reports the same problems as the replay and
    takes seconds for millions of transfers. ``vectorised=None``
    uses it for such schedules from :data:`ARRAY_PATH_ABOVE` transfers on (or
    given as a :class:`~tacos.transfers.TransferTable`); True insists on it
    (TacosError when it does not apply), False never uses it.
    """
    report = VerificationReport(collective_time_us=schedule.collective_time_us)
    reason = _arrays_unsupported(schedule)
    if vectorised is None:
        large = len(schedule.transfers) >= ARRAY_PATH_ABOVE
        vectorised = reason is None and (large or isinstance(schedule.transfers, TransferTable))
    if vectorised:
        if reason is not None:
            raise TacosError(f"the array verifier does not apply: {reason}")
        _verify_arrays(schedule, report)
    elif _check_structure(schedule, report):
        _check_links(schedule, report)
        _check_dependencies(schedule, report)
        _check_data(schedule, report)
    return report


def _close_enough_before(a: float, b: float) -> bool:
    """``a <= b`` up to rounding of sums of microsecond floats."""
    return a <= b + _REL_TOL * max(1.0, abs(a), abs(b))


def _check_structure(schedule: Schedule, report: VerificationReport) -> bool:
    topo, spec = schedule.topology, schedule.collective
    for rank in spec.ranks:
        if not 0 <= rank < topo.num_npus:
            report.fail(f"rank {rank} is not an NPU of the topology")
    for i, t in enumerate(schedule.transfers):
        where = f"transfer {i} (chunk {t.chunk} {t.src}->{t.dst})"
        if not 0 <= t.chunk < spec.num_chunks:
            report.fail(f"{where}: chunk id outside 0..{spec.num_chunks - 1}")
        if not 0 <= t.link < len(topo.links):
            report.fail(f"{where}: link {t.link} does not exist")
            continue
        link = topo.links[t.link]
        if (link.src, link.dst) != (t.src, t.dst):
            report.fail(
                f"{where}: link {t.link} joins {link.src}->{link.dst}, not {t.src}->{t.dst}"
            )
        needed = topo.cost.arrival_us(link, spec.chunk_bytes)
        if t.op is Op.REDUCE:
            needed += topo.cost.reduce_us(spec.chunk_bytes)
        if not _close_enough_before(needed, t.end - t.start):
            report.fail(
                f"{where}: lasts {t.end - t.start:.6g} us, shorter than the link allows "
                f"({needed:.6g} us for {spec.chunk_bytes} bytes)"
            )
        if any(not 0 <= d < len(schedule.transfers) for d in t.deps):
            report.fail(f"{where}: depends on a transfer that does not exist")
    return report.ok


def _check_links(schedule: Schedule, report: VerificationReport) -> None:
    by_link: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(schedule.transfers):
        by_link[t.link].append(i)
    transfers = schedule.transfers
    for link, indices in by_link.items():
        indices.sort(key=lambda i: (transfers[i].start, transfers[i].end))
        for before, after in zip(indices, indices[1:], strict=False):
            released = _link_released(schedule, before)
            if not _close_enough_before(released, transfers[after].start):
                report.fail(
                    f"link {link}: transfers {before} and {after} overlap "
                    f"({transfers[after].start:.6g} us < {released:.6g} us)"
                )


def _link_released(schedule: Schedule, index: int) -> float:
    """When transfer ``index`` lets its link take the next one (:mod:`tacos.linkmodel`).

    The paper's link is held until the message arrives (a reduction after that
    keeps the receiver busy, not the link); a pipelined link only serializes it.
    """
    t = schedule.transfers[index]
    cost, nbytes = schedule.topology.cost, schedule.collective.chunk_bytes
    if cost.link_model == "pipelined":
        return t.start + cost.busy_us(schedule.topology.links[t.link], nbytes)
    return t.end - (cost.reduce_us(nbytes) if t.op is Op.REDUCE else 0.0)


def _check_dependencies(schedule: Schedule, report: VerificationReport) -> None:
    transfers = schedule.transfers
    for i, t in enumerate(transfers):
        for d in t.deps:
            dep = transfers[d]
            if not _close_enough_before(dep.end, t.start):
                report.fail(
                    f"transfer {i} starts at {t.start:.6g} us before its dependency {d} "
                    f"ends at {dep.end:.6g} us"
                )
            if dep.dst != t.src or dep.chunk != t.chunk:
                report.fail(
                    f"transfer {i} (chunk {t.chunk} from {t.src}) depends on transfer {d}, "
                    f"which delivers chunk {dep.chunk} to {dep.dst}"
                )


def _check_data(schedule: Schedule, report: VerificationReport) -> None:
    """Replay buffer contents as contribution sets (bit sets over rank positions).

    NPUs keep one slot per chunk. Switches keep nothing: what a switch sends is
    exactly what the one transfer it depends on brought in, and each arrival is
    forwarded at most once (switches forward, they neither reduce nor replicate).
    """
    spec, topo = schedule.collective, schedule.topology
    transfers = schedule.transfers
    value: dict[tuple[int, int], int] = {
        (node, chunk): contributions for node, chunk, contributions in spec.initial_data()
    }
    # Arrivals at a time are applied before departures at that time.
    events = []
    for i, t in enumerate(transfers):
        slack = _ARRIVAL_REL_SLACK * max(1.0, abs(t.end))
        events.append((t.end - slack, 0, i))
        events.append((t.start, 1, i))
    events.sort()
    carried: dict[int, int] = {}
    forwarded: set[int] = set()
    for _, is_departure, i in events:
        t = transfers[i]
        if is_departure:
            carried[i] = _departing_value(i, schedule, value, carried, forwarded, report)
            continue
        sent = carried.get(i, 0)
        if topo.is_switch(t.dst):
            if t.op is Op.REDUCE:
                report.fail(f"transfer {i}: switch {t.dst} cannot reduce chunk {t.chunk}")
            continue
        here = value.get((t.dst, t.chunk), 0)
        if t.op is Op.REDUCE:
            if here & sent:
                ranks = [spec.ranks[p] for p in range(spec.num_ranks) if (here & sent) >> p & 1]
                report.fail(
                    f"transfer {i}: chunk {t.chunk} at node {t.dst} would count the "
                    f"contribution of rank(s) {ranks[:5]} twice"
                )
            value[(t.dst, t.chunk)] = here | sent
        else:
            value[(t.dst, t.chunk)] = sent

    for node, chunk, expected in spec.final_data():
        got = value.get((node, chunk), 0)
        if got != expected:
            missing = [spec.ranks[p] for p in range(spec.num_ranks) if (expected & ~got) >> p & 1]
            extra = [spec.ranks[p] for p in range(spec.num_ranks) if (got & ~expected) >> p & 1]
            problems = []
            if missing:
                problems.append(f"missing contributions of rank(s) {missing[:5]}")
            if extra:
                problems.append(f"extra contributions of rank(s) {extra[:5]}")
            what = "; ".join(problems)
            report.fail(f"postcondition: rank {node} ends without the right chunk {chunk} ({what})")


def _departing_value(
    index: int,
    schedule: Schedule,
    value: dict[tuple[int, int], int],
    carried: dict[int, int],
    forwarded: set[int],
    report: VerificationReport,
) -> int:
    """What transfer ``index`` carries when it leaves its source."""
    t = schedule.transfers[index]
    if not schedule.topology.is_switch(t.src):
        sent = value.get((t.src, t.chunk), 0)
        if not sent:
            report.fail(
                f"transfer {index}: node {t.src} sends chunk {t.chunk} at {t.start:.6g} us "
                "before it holds any of it"
            )
        return sent
    if len(t.deps) != 1:
        report.fail(
            f"transfer {index}: switch {t.src} must forward exactly one incoming transfer, "
            f"but it depends on {len(t.deps)}"
        )
        return 0
    (source,) = t.deps
    if source in forwarded:
        report.fail(
            f"transfer {index}: switch {t.src} forwards transfer {source} a second time; "
            "switches do not replicate data"
        )
    forwarded.add(source)
    return carried.get(source, 0)


# ---------------------------------------------------------------- the array path
def _arrays_unsupported(schedule: Schedule) -> str | None:
    """Why :func:`_verify_arrays` cannot check ``schedule`` (None when it can)."""
    if not schedule.topology.cost.is_default:
        return f"it checks the paper's link model, not {schedule.topology.cost.describe()}"
    if schedule.collective.kind.reduces:
        return None  # replayed compiled, reductions and all (:func:`_data_compiled`)
    transfers = schedule.transfers
    if isinstance(transfers, TransferTable):
        copies_only = not transfers.op.any()
    else:
        copies_only = all(t.op is Op.COPY for t in transfers)
    return None if copies_only else "some transfers reduce"


def _verify_arrays(schedule: Schedule, report: VerificationReport) -> None:
    """The checks of :func:`verify`, as array operations, with the same messages.

    Every placement of a spreading collective carries one rank's data, so a
    copy either carries the chunk's only value or nothing: a slot's content
    is "held since the first arrival". If every transfer carries its chunk
    (:func:`_every_transfer_carries`), that is exact; otherwise the replay of
    :func:`_check_data` reports what follows. Reductions combine contributions,
    so reducing collectives replay their data compiled (:func:`_data_compiled`).
    """
    t = TransferTable.from_transfers(schedule.transfers)
    # Infinite times make NaNs (inf - inf), silently in the replay's floats; here too.
    with np.errstate(invalid="ignore"):
        if not _structure_arrays(schedule, t, report):
            return
        _links_arrays(t, report)
        _dependencies_arrays(t, report)
        if schedule.collective.kind.reduces:
            _data_compiled(schedule, t, report)
        else:
            _data_arrays(schedule, t, report)


def _arrival_keys(t: TransferTable) -> np.ndarray:
    """When :func:`_check_data` applies each arrival: a rounding slack before its end,
    so that it comes before departures at that time."""
    return t.end - _ARRIVAL_REL_SLACK * np.maximum(1.0, np.abs(t.end))


def _close_enough_before_arrays(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`_close_enough_before`, elementwise."""
    return a <= b + _REL_TOL * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))


Failures = list[tuple[np.ndarray, int, Callable[[int], str]]]
"""Per check: sorted positions that fail, the check's rank among checks of one position,
and how to word a failure at a position."""


def _report_failures(report: VerificationReport, failures: Failures) -> None:
    """Count every failure; word the first few, in position order (as the replay does)."""
    first: list[tuple[int, int, Callable[[int], str]]] = []
    for positions, rank, word in failures:
        report.error_count += len(positions)
        first.extend((int(p), rank, word) for p in positions[:MAX_REPORTED])
    if report.error_count:
        report.ok = False
    for position, _, word in sorted(first, key=lambda f: (f[0], f[1])):
        if len(report.errors) >= MAX_REPORTED:
            break
        report.errors.append(word(position))


def _structure_arrays(schedule: Schedule, t: TransferTable, report: VerificationReport) -> bool:
    topo, spec = schedule.topology, schedule.collective
    for rank in spec.ranks:
        if not 0 <= rank < topo.num_npus:
            report.fail(f"rank {rank} is not an NPU of the topology")
    num_links = len(topo.links)
    link_src = np.fromiter((lk.src for lk in topo.links), np.int64, num_links)
    link_dst = np.fromiter((lk.dst for lk in topo.links), np.int64, num_links)
    needed = np.fromiter(
        (lk.transfer_time_us(spec.chunk_bytes) for lk in topo.links), np.float64, num_links
    )
    exists = (t.link >= 0) & (t.link < num_links)
    link = np.where(exists, t.link, 0)
    bad_dep = (t.deps < 0) | (t.deps >= len(t))
    dep_row_bad = np.zeros(len(t), bool)
    dep_row_bad[t.dep_rows[bad_dep]] = True

    def where(i: int) -> str:
        return f"transfer {i} (chunk {t.chunk[i]} {t.src[i]}->{t.dst[i]})"

    def wrong_ends(i: int) -> str:
        lk = t.link[i]
        joins = f"{link_src[lk]}->{link_dst[lk]}"
        return f"{where(i)}: link {lk} joins {joins}, not {t.src[i]}->{t.dst[i]}"

    def too_short(i: int) -> str:
        lasts, lk = float(t.end[i] - t.start[i]), t.link[i]
        return (
            f"{where(i)}: lasts {lasts:.6g} us, shorter than the link allows "
            f"({float(needed[lk]):.6g} us for {spec.chunk_bytes} bytes)"
        )

    _report_failures(
        report,
        [
            (
                np.nonzero((t.chunk < 0) | (t.chunk >= spec.num_chunks))[0],
                0,
                lambda i: f"{where(i)}: chunk id outside 0..{spec.num_chunks - 1}",
            ),
            (np.nonzero(~exists)[0], 1, lambda i: f"{where(i)}: link {t.link[i]} does not exist"),
            (
                np.nonzero(exists & ((link_src[link] != t.src) | (link_dst[link] != t.dst)))[0],
                2,
                wrong_ends,
            ),
            (
                np.nonzero(exists & ~_close_enough_before_arrays(needed[link], t.end - t.start))[0],
                3,
                too_short,
            ),
            (
                np.nonzero(exists & dep_row_bad)[0],
                4,
                lambda i: f"{where(i)}: depends on a transfer that does not exist",
            ),
        ],
    )
    return report.ok


def _links_arrays(t: TransferTable, report: VerificationReport) -> None:
    """Consecutive transfers on a link (by start, then end) must not overlap."""
    links, first_use = np.unique(t.link, return_index=True)
    appearance = np.empty(len(links), np.int64)
    appearance[np.argsort(first_use)] = np.arange(len(links))
    order = np.lexsort(
        (np.arange(len(t)), t.end, t.start, appearance[np.searchsorted(links, t.link)])
    )
    same = t.link[order[1:]] == t.link[order[:-1]]
    before, after = order[:-1][same], order[1:][same]
    overlap = np.nonzero(~_close_enough_before_arrays(t.end[before], t.start[after]))[0]

    def word(k: int) -> str:
        b, a = before[k], after[k]
        return (
            f"link {t.link[a]}: transfers {b} and {a} overlap "
            f"({float(t.start[a]):.6g} us < {float(t.end[b]):.6g} us)"
        )

    _report_failures(report, [(overlap, 0, word)])


def _dependencies_arrays(t: TransferTable, report: VerificationReport) -> None:
    """Every dependency ends before its dependant starts and delivers its chunk to its sender."""
    rows, deps = t.dep_rows, t.deps
    late = ~_close_enough_before_arrays(t.end[deps], t.start[rows])
    mismatch = (t.dst[deps] != t.src[rows]) | (t.chunk[deps] != t.chunk[rows])

    def word_late(k: int) -> str:
        i, d = rows[k], deps[k]
        return (
            f"transfer {i} starts at {float(t.start[i]):.6g} us before its dependency {d} "
            f"ends at {float(t.end[d]):.6g} us"
        )

    def word_mismatch(k: int) -> str:
        i, d = rows[k], deps[k]
        return (
            f"transfer {i} (chunk {t.chunk[i]} from {t.src[i]}) depends on transfer {d}, "
            f"which delivers chunk {t.chunk[d]} to {t.dst[d]}"
        )

    _report_failures(
        report, [(np.nonzero(late)[0], 0, word_late), (np.nonzero(mismatch)[0], 1, word_mismatch)]
    )


def _data_arrays(schedule: Schedule, t: TransferTable, report: VerificationReport) -> None:
    """Senders hold what they send; every rank ends with what the postcondition names."""
    spec = schedule.collective
    num_chunks = spec.num_chunks
    # When each slot first holds data: -inf from the start, else its first arrival (with
    # the replay's rounding slack: an arrival counts before a departure at the same time).
    first = np.full(schedule.topology.num_nodes * num_chunks, np.inf)
    node, chunk, _ = spec.spread_arrays(final=False)
    first[node * num_chunks + chunk] = -np.inf
    arrival = _arrival_keys(t)
    np.minimum.at(first, t.dst * num_chunks + t.chunk, arrival)
    if not _every_transfer_carries(schedule, t, first, arrival):
        # A send of nothing empties its receiver's slot: replay that exactly.
        _check_data(schedule, report)
        return
    node, chunk, position = spec.spread_arrays(final=True)
    missing = np.nonzero(first[node * num_chunks + chunk] == np.inf)[0]

    def word(k: int) -> str:
        owner = [spec.ranks[position[k]]]
        return (
            f"postcondition: rank {node[k]} ends without the right chunk {chunk[k]} "
            f"(missing contributions of rank(s) {owner})"
        )

    _report_failures(report, [(missing, 0, word)])


def _every_transfer_carries(
    schedule: Schedule, t: TransferTable, first: np.ndarray, arrival: np.ndarray
) -> bool:
    """Whether the replay of :func:`_check_data` sees every transfer carry its chunk.

    By induction over the replay's events, it does when each transfer leaves
    before it arrives (its arrival event, ``arrival``, may otherwise come first
    and deliver nothing), each NPU sends only from a slot that ``first`` holds by
    then, and switches forward cleanly (:func:`_switches_forward_cleanly`).
    Then no sender lacks data and no slot is ever emptied, so ``first`` is exact.
    """
    num_chunks = schedule.collective.num_chunks
    from_npu = t.src < schedule.topology.num_npus
    held = first[t.src[from_npu] * num_chunks + t.chunk[from_npu]]
    return bool(
        (t.start < arrival).all()
        and (held <= t.start[from_npu]).all()
        and _switches_forward_cleanly(t, np.nonzero(~from_npu)[0])
    )


def _switches_forward_cleanly(t: TransferTable, rows: np.ndarray) -> bool:
    """Whether transfers ``rows``, which leave switches, pass on what their sources carried.

    :func:`_departing_value` hands a switch's departure what its one dependency
    carried when that left, and fails one with another number of dependencies
    or one that forwards a transfer a second time. So the departure needs one
    dependency, of its own chunk, that left before it (and so was replayed
    first), and no two departures may share it. Where the dependency went is
    the dependency check's business (:func:`_dependencies_arrays`).
    """
    if (np.diff(t.deps_ptr)[rows] != 1).any():
        return False
    source = t.deps[t.deps_ptr[rows]]
    return bool(
        (t.start[source] < t.start[rows]).all()
        and (t.chunk[source] == t.chunk[rows]).all()
        and len(np.unique(source)) == len(source)
    )


def _data_compiled(schedule: Schedule, t: TransferTable, report: VerificationReport) -> None:
    """The replay of :func:`_check_data`, compiled, with each bit set as a row of words.

    It only tells whether the replay finds anything wrong, which is rare and
    then worded by :func:`_check_data` itself. Its events are sorted as the
    replay sorts them (by time, arrivals first, then by index) when all times
    are finite; otherwise the replay runs. Chunks never mix, so the slots are
    replayed a group of chunks at a time, each group's slots at most
    :data:`VALUE_BYTES_AT_ONCE` (a 4096-GPU All-Reduce has 8.6 GB of them).
    """
    spec, topo = schedule.collective, schedule.topology
    times = np.concatenate((_arrival_keys(t), t.start))
    if not np.isfinite(times).all():
        _check_data(schedule, report)
        return
    words = (spec.num_ranks + 63) // 64
    per_group = max(1, VALUE_BYTES_AT_ONCE // (topo.num_npus * words * 8))
    events, group_start = _grouped(
        np.argsort(times, kind="stable"), t.chunk, per_group, -(-spec.num_chunks // per_group)
    )
    for group, first_chunk in enumerate(range(0, spec.num_chunks, per_group)):
        chunks = np.arange(first_chunk, min(first_chunk + per_group, spec.num_chunks))
        value = _initial_slots(spec, topo.num_npus, chunks, words)
        clean = _replay_words(
            events[group_start[group] : group_start[group + 1]],
            t.src,
            t.dst,
            t.chunk,
            t.op,
            t.deps_ptr,
            t.deps,
            topo.num_npus,
            first_chunk,
            value,
        )
        if not (clean and (value[_final_rows(spec, chunks)] == _everyone(spec, words)).all()):
            _check_data(schedule, report)
            return


def _initial_slots(spec: Collective, num_npus: int, chunks: np.ndarray, words: int) -> np.ndarray:
    """The NPUs' slots of ``chunks`` (row ``node * len(chunks) + k`` for ``chunks[k]``) as
    :meth:`~tacos.collective.Collective.initial_data` of a reducing collective fills
    them: rank position ``p`` is bit ``p % 64`` of word ``p // 64``."""
    value = np.zeros((num_npus * len(chunks), words), np.uint64)
    position = np.arange(spec.num_ranks)
    bit = np.left_shift(np.uint64(1), (position % 64).astype(np.uint64))
    rows = np.asarray(spec.ranks, np.int64)[:, None] * len(chunks) + np.arange(len(chunks))
    value[rows, (position // 64)[:, None]] = bit[:, None]
    return value


def _final_rows(spec: Collective, chunks: np.ndarray) -> np.ndarray:
    """The rows of :func:`_initial_slots` that must end with every contribution, as
    :meth:`~tacos.collective.Collective.final_data` of a reducing collective says."""
    column = np.arange(len(chunks))
    if spec.kind is CollectiveKind.ALL_REDUCE:
        return (np.asarray(spec.ranks, np.int64)[:, None] * len(chunks) + column).ravel()
    owner = np.fromiter((spec.owner(int(c)) for c in chunks), np.int64, len(chunks))
    return owner * len(chunks) + column  # Reduce-Scatter and Reduce: each chunk's owner


def _everyone(spec: Collective, words: int) -> np.ndarray:
    """Every rank's contribution, as a row of words."""
    row = np.full(words, np.uint64(0xFFFF_FFFF_FFFF_FFFF))
    if spec.num_ranks % 64:
        row[-1] = np.uint64((1 << (spec.num_ranks % 64)) - 1)
    return row


@njit(cache=True)
def _grouped(
    events: np.ndarray, chunk: np.ndarray, per_group: int, num_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """``events`` (``i`` or ``len(chunk) + i`` for transfer ``i``) by group of
    ``per_group`` chunks, in their order within a group, and where each group starts:
    a replay per group then reads only its own events."""
    n = chunk.shape[0]
    start = np.zeros(num_groups + 1, np.int64)
    for event in events:
        start[chunk[event % n] // per_group + 1] += 1
    start = np.cumsum(start)
    if num_groups == 1:
        return events, start
    grouped = np.empty_like(events)
    filled = start[:-1].copy()
    for event in events:
        group = chunk[event % n] // per_group
        grouped[filled[group]] = event
        filled[group] += 1
    return grouped, start


@njit(cache=True)
def _replay_words(
    events: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    chunk: np.ndarray,
    op: np.ndarray,
    deps_ptr: np.ndarray,
    deps: np.ndarray,
    num_npus: int,
    first_chunk: int,
    value: np.ndarray,
) -> bool:
    """Whether :func:`_check_data`'s events (``i`` arrives, ``len(src) + i`` leaves) of
    the chunks ``value`` holds pass.

    ``value`` starts with the NPUs' initial slots of chunks ``first_chunk`` on
    (row ``node * num_chunks + chunk - first_chunk``) and ends with their final ones;
    ``events`` are those of these chunks (:func:`_grouped`). What a message carries (as
    :func:`_departing_value` hands it out) is kept only while it is in flight,
    from leaving its NPU to arriving at one: a row of ``carried`` taken when it
    leaves, passed on by each switch, given back on arrival (tens of millions of
    transfers would otherwise need a row each). A switch forwarding what went
    elsewhere or has not left yet is left to :func:`_check_data` (False).
    """
    n, words = len(src), value.shape[1]
    num_chunks = value.shape[0] // num_npus
    forwarded = np.zeros(n, np.bool_)
    row_of = np.full(n, -1, np.int64)  # the row of carried holding what i carries
    carried = np.empty((1024, words), np.uint64)
    spare = np.arange(carried.shape[0] - 1, -1, -1)  # rows not in use, a stack
    num_spare = spare.shape[0]
    for event in events:
        i = event % n
        if event >= n and src[i] < num_npus:
            if num_spare == 0:  # every row in flight: twice as many, the new ones spare
                grown = np.empty((2 * carried.shape[0], words), np.uint64)
                grown[: carried.shape[0]] = carried
                spare = np.empty(grown.shape[0], np.int64)
                num_spare = grown.shape[0] - carried.shape[0]
                spare[:num_spare] = np.arange(grown.shape[0] - 1, carried.shape[0] - 1, -1)
                carried = grown
            num_spare -= 1
            row_of[i] = spare[num_spare]
            source, held = src[i] * num_chunks + chunk[i] - first_chunk, False
            for w in range(words):
                carried[row_of[i], w] = value[source, w]
                held |= value[source, w] != 0
            if not held:
                return False
        elif event >= n:
            if deps_ptr[i + 1] - deps_ptr[i] != 1:
                return False
            dep = deps[deps_ptr[i]]
            if forwarded[dep] or dst[dep] < num_npus or row_of[dep] < 0:
                return False
            forwarded[dep] = True
            row_of[i], row_of[dep] = row_of[dep], -1
        elif dst[i] >= num_npus:
            if op[i]:
                return False  # a switch cannot reduce
        else:
            if row_of[i] < 0:
                return False
            target, row = dst[i] * num_chunks + chunk[i] - first_chunk, row_of[i]
            for w in range(words):
                if not op[i]:
                    value[target, w] = carried[row, w]
                elif value[target, w] & carried[row, w]:
                    return False  # a contribution counted twice
                else:
                    value[target, w] |= carried[row, w]
            spare[num_spare] = row
            num_spare += 1
            row_of[i] = -1
    return True
