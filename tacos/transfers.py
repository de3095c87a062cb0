"""Columnar transfers: a schedule's transfer list as numpy arrays.

A 4096-NPU All-Gather has 16.7 million transfers; as :class:`Transfer`
objects that is gigabytes and minutes of Python. :class:`TransferTable` keeps
one array per field (dependencies in CSR form: the dependencies of transfer
``i`` are ``deps[deps_ptr[i]:deps_ptr[i + 1]]``) and still *is* a
``Sequence[Transfer]``: indexing or iterating builds :class:`Transfer` objects
on the fly, so every consumer of :attr:`Schedule.transfers` keeps working on
small schedules, while vectorised consumers (the verifier's array path, the
JSON writer, the scale benchmark) read the arrays directly.

Example:
    >>> from tacos.schedule import Op, Transfer
    >>> table = TransferTable.from_transfers([Transfer(0, 0, 1, 0, 0.0, 1.5, Op.COPY, ())])
    >>> len(table), table[0].end, table.end.dtype
    (1, 1.5, dtype('float64'))
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from numba import njit

from tacos._pages import huge
from tacos.schedule import Op, Transfer

OP_CODES = (Op.COPY, Op.REDUCE)
"""``op`` column values: 0 is a copy, 1 a reduction."""
PARALLEL_TAKE_ROWS = 1 << 20
"""Larger tables gather their columns in two threads, beside their dependencies: NumPy
lets go of the GIL while it gathers, and a 38M-row take (a 4096-GPU All-Gather) went
from 9.6 to 6.3 s."""


@dataclass(frozen=True, eq=False)
class TransferTable(Sequence[Transfer]):
    """Transfers as parallel arrays, in the order a schedule lists them."""

    chunk: np.ndarray  # int64
    src: np.ndarray  # int64
    dst: np.ndarray  # int64
    link: np.ndarray  # int64
    start: np.ndarray  # float64
    end: np.ndarray  # float64
    op: np.ndarray  # uint8, index into OP_CODES
    deps_ptr: np.ndarray  # int64, len + 1 entries
    deps: np.ndarray  # int64

    def __post_init__(self) -> None:
        count = len(self.chunk)
        for name in ("src", "dst", "link", "start", "end", "op"):
            if len(getattr(self, name)) != count:
                raise ValueError(
                    f"column {name!r} has {len(getattr(self, name))} rows, not {count}"
                )
        if len(self.deps_ptr) != count + 1 or self.deps_ptr[-1] != len(self.deps):
            raise ValueError(
                "deps_ptr must have one entry per transfer plus one, ending at len(deps)"
            )

    # ------------------------------------------------------------ Sequence
    def __len__(self) -> int:
        return len(self.chunk)

    @overload
    def __getitem__(self, index: int) -> Transfer: ...

    @overload
    def __getitem__(self, index: slice) -> list[Transfer]: ...

    def __getitem__(self, index: int | slice) -> Transfer | list[Transfer]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"transfer {index} out of range 0..{len(self) - 1}")
        first, last = self.deps_ptr[index], self.deps_ptr[index + 1]
        return Transfer(
            int(self.chunk[index]),
            int(self.src[index]),
            int(self.dst[index]),
            int(self.link[index]),
            float(self.start[index]),
            float(self.end[index]),
            OP_CODES[self.op[index]],
            tuple(self.deps[first:last].tolist()),
        )

    def __iter__(self) -> Iterator[Transfer]:
        ops = [OP_CODES[o] for o in self.op.tolist()]
        ptr = self.deps_ptr.tolist()
        deps = self.deps.tolist()
        rows = zip(
            self.chunk.tolist(),
            self.src.tolist(),
            self.dst.tolist(),
            self.link.tolist(),
            self.start.tolist(),
            self.end.tolist(),
            ops,
            strict=True,
        )
        for i, (chunk, src, dst, link, start, end, op) in enumerate(rows):
            yield Transfer(chunk, src, dst, link, start, end, op, tuple(deps[ptr[i] : ptr[i + 1]]))

    # ------------------------------------------------------------ building
    @classmethod
    def from_transfers(cls, transfers: Sequence[Transfer]) -> TransferTable:
        """The table holding exactly ``transfers`` (a table is returned as is)."""
        if isinstance(transfers, TransferTable):
            return transfers
        count = len(transfers)
        lengths = np.fromiter((len(t.deps) for t in transfers), np.int64, count)
        ptr = np.zeros(count + 1, np.int64)
        np.cumsum(lengths, out=ptr[1:])
        return cls(
            np.fromiter((t.chunk for t in transfers), np.int64, count),
            np.fromiter((t.src for t in transfers), np.int64, count),
            np.fromiter((t.dst for t in transfers), np.int64, count),
            np.fromiter((t.link for t in transfers), np.int64, count),
            np.fromiter((t.start for t in transfers), np.float64, count),
            np.fromiter((t.end for t in transfers), np.float64, count),
            np.fromiter((t.op is Op.REDUCE for t in transfers), np.uint8, count),
            ptr,
            np.fromiter((d for t in transfers for d in t.deps), np.int64, int(ptr[-1])),
        )

    @classmethod
    def joined(cls, tables: Sequence[TransferTable], chunk_offsets: Sequence[int]) -> TransferTable:
        """``tables`` one after another, table ``i``'s chunk ids shifted by
        ``chunk_offsets[i]`` and its dependencies by the rows before it (as several
        tenants' schedules become one timeline)."""
        rows_before = np.cumsum([0] + [len(table) for table in tables[:-1]])
        deps_before = np.cumsum([0] + [len(table.deps) for table in tables[:-1]])
        return cls(
            np.concatenate([t.chunk + k for t, k in zip(tables, chunk_offsets, strict=True)]),
            np.concatenate([t.src for t in tables]),
            np.concatenate([t.dst for t in tables]),
            np.concatenate([t.link for t in tables]),
            np.concatenate([t.start for t in tables]),
            np.concatenate([t.end for t in tables]),
            np.concatenate([t.op for t in tables]),
            np.concatenate(
                [[0], *(t.deps_ptr[1:] + n for t, n in zip(tables, deps_before, strict=True))]
            ).astype(np.int64),
            np.concatenate([t.deps + n for t, n in zip(tables, rows_before, strict=True)]),
        )

    def take(
        self, order: np.ndarray, *, start: np.ndarray | None = None, end: np.ndarray | None = None
    ) -> TransferTable:
        """Rows ``order[0], order[1], ...`` with dependency indices rewritten to match.

        Every dependency must be among the kept rows (as after sorting); each
        row's dependencies come out ascending, as :func:`renumber` writes them.
        ``start`` and ``end``, already in the new order, replace the rows' times
        (a re-timing that returns the rows in their new order gathers no times).
        """
        order = np.asarray(order, np.int64)
        columns = [self.chunk, self.src, self.dst, self.link, self.op]
        columns += [self.start] if start is None else []
        columns += [self.end] if end is None else []
        if len(order) < PARALLEL_TAKE_ROWS:
            taken = [column[order] for column in columns]
            deps_ptr, deps = _deps_taken(self.deps_ptr, self.deps, order)
        else:
            with ThreadPoolExecutor(2) as pool:
                in_helper = pool.submit(_deps_taken, self.deps_ptr, self.deps, order)
                taken = list(pool.map(lambda column: column[order], columns))
                deps_ptr, deps = in_helper.result()
        chunk, src, dst, link, op = taken[:5]
        start = taken[5] if start is None else start
        end = taken[-1] if end is None else end
        return TransferTable(chunk, src, dst, link, start, end, op, deps_ptr, deps)

    @property
    def dep_rows(self) -> np.ndarray:
        """For each entry of :attr:`deps`, the transfer that has it as a dependency."""
        return np.repeat(np.arange(len(self)), np.diff(self.deps_ptr))

    def dependants(self) -> tuple[np.ndarray, np.ndarray]:
        """The dependency graph turned around, as CSR (pointers, rows): row ``i`` lists
        the transfers that wait for transfer ``i``, in row order (a dependency listed
        twice counts twice)."""
        ptr = np.zeros(len(self) + 1, np.int64)
        np.cumsum(np.bincount(self.deps, minlength=len(self)), out=ptr[1:])
        return ptr, self.dep_rows[np.argsort(self.deps, kind="stable")]

    def columns(self) -> dict[str, list[Any]]:
        """The JSON columns of :meth:`tacos.schedule.Schedule.to_dict`, as plain lists."""
        ptr = self.deps_ptr.tolist()
        deps = self.deps.tolist()
        return {
            "chunk": self.chunk.tolist(),
            "src": self.src.tolist(),
            "dst": self.dst.tolist(),
            "link": self.link.tolist(),
            "start": self.start.tolist(),
            "end": self.end.tolist(),
            "op": [OP_CODES[o].value for o in self.op.tolist()],
            "deps": [deps[ptr[i] : ptr[i + 1]] for i in range(len(self))],
        }


@njit(cache=True, nogil=True)
def _deps_taken(
    deps_ptr: np.ndarray, deps: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``deps_ptr`` and ``deps`` of :meth:`TransferTable.take`: each kept row's
    dependencies by their new index, ascending (compiled: at 38M rows NumPy's
    version made six temporary columns, and each fresh gigabyte costs seconds)."""
    new_index = huge(np.empty(deps_ptr.shape[0] - 1, np.int64))
    for k in range(order.shape[0]):
        new_index[order[k]] = k
    ptr = huge(np.empty(order.shape[0] + 1, np.int64))
    ptr[0] = 0
    for k in range(order.shape[0]):
        ptr[k + 1] = ptr[k] + deps_ptr[order[k] + 1] - deps_ptr[order[k]]
    taken = huge(np.empty(ptr[-1], np.int64))
    for k in range(order.shape[0]):
        row, first = order[k], ptr[k]
        for e in range(deps_ptr[row + 1] - deps_ptr[row]):
            dep = new_index[deps[deps_ptr[row] + e]]
            at = first + e
            while at > first and taken[at - 1] > dep:  # insertion: a row has few
                taken[at] = taken[at - 1]
                at -= 1
            taken[at] = dep
    return ptr, taken
