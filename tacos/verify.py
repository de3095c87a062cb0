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
* the link model: a transfer uses an existing link between its endpoints,
  lasts at least latency + size / bandwidth, and each link carries one
  transfer at a time.

Example:
    >>> import tacos
    >>> topo = tacos.from_spec("ring:4")
    >>> spec = tacos.Collective(tacos.CollectiveKind.ALL_REDUCE, tuple(topo.npus))
    >>> tacos.verify(tacos.synthesize(topo, spec)).ok
    True
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tacos.schedule import Op, Schedule

_REL_TOL = 1e-9
MAX_REPORTED = 20


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


def verify(schedule: Schedule) -> VerificationReport:
    """Check postcondition, causality and link exclusivity; never raises on bad schedules."""
    report = VerificationReport(collective_time_us=schedule.collective_time_us)
    if _check_structure(schedule, report):
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
        needed = link.transfer_time_us(spec.chunk_bytes)
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
            if not _close_enough_before(transfers[before].end, transfers[after].start):
                report.fail(
                    f"link {link}: transfers {before} and {after} overlap "
                    f"({transfers[after].start:.6g} us < {transfers[before].end:.6g} us)"
                )


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
        slack = _REL_TOL * max(1.0, abs(t.end))
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
