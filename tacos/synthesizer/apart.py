"""Tenants synthesized one at a time, then replayed together on the links they share.

Why: the greedy builds every tenant on one shared timeline, which only the greedy
can do, so tenants got neither trees (:mod:`.trees`) nor, with ``best``, the
classic algorithms. Where tenants barely share links (two halves of a
DGX-like cluster meet only at the spine), each built alone by the whole
synthesizer and then replayed together is faster: two 64-GPU halves of dgx:16x8
All-Reduce at one chunk per GPU in 424.1 us each, against 446.1 us from the
shared timeline. Where they do share links (interleaved ranks on a mesh), the
joint greedy sees the other tenant's traffic and usually wins; the caller keeps
whichever finishes first.

The joint replay keeps each NPU's links in the order each tenant's own schedule
has them and lets switches serve in arrival order, as :mod:`tacos.simulate`
does. A plan may rely on an order its dependencies do not state (the trees'
exchange of sums, a reordered classic algorithm), which a shared timeline can
change, so every tenant's replayed schedule is verified before it is offered.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tacos.schedule import Schedule
from tacos.synthesizer.list_scheduling import replayed, with_times
from tacos.topology import Topology
from tacos.transfers import TransferTable
from tacos.verify import verify


def replayed_together(
    topology: Topology, alone: Sequence[Schedule], sends_in_flight: int | None
) -> list[Schedule] | None:
    """Each tenant's schedule ``alone`` re-timed as all of them run at once; None if one of
    them no longer verifies. Tenant ``i``'s chunks keep their own ids."""
    tables = [TransferTable.from_transfers(schedule.transfers) for schedule in alone]
    chunk_offsets = np.cumsum([0] + [s.collective.num_chunks for s in alone[:-1]])
    joined = TransferTable.joined(tables, chunk_offsets.tolist())
    chunk_bytes = alone[0].collective.chunk_bytes
    start, end = replayed(joined, topology, chunk_bytes, sends_in_flight)
    together, first = [], 0
    for schedule, table in zip(alone, tables, strict=True):
        rows = slice(first, first + len(table))
        first += len(table)
        retimed = with_times(table, start[rows], end[rows])
        together.append(Schedule(topology, schedule.collective, retimed, dict(schedule.meta)))
    if not all(verify(schedule).ok for schedule in together):
        return None
    return together
