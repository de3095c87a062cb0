"""A topology and Python's random generator as the arrays the compiled kernels read.

Both compiled engines (:mod:`.fast` for NPU-only topologies, :mod:`.fast_fabric`
for switched ones) hand the kernels links as endpoint arrays and lists as CSR
(a pointer array and one flat array), and carry ``random.Random``'s Mersenne
Twister state in and out as int64 words, so the kernels draw exactly what the
reference would (:mod:`tacos.synthesizer._kernels`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from tacos.errors import TacosError
from tacos.synthesizer import _kernels as K
from tacos.synthesizer.routes import faster_rivals, overtakable_in_links
from tacos.topology import Topology


def csr(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` as (pointers, values): row ``i`` is ``values[ptr[i]:ptr[i + 1]]``."""
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    return ptr, np.fromiter((x for r in rows for x in r), np.int64, int(ptr[-1]))


def rival_arrays(
    topology: Topology, durations: Sequence[float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The faster-links state both engines hand their kernels, for links of ``durations``.

    Per link, the faster links it may leave chunks to
    (:func:`~tacos.synthesizer.routes.faster_rivals`, CSR ``rivals_ptr``/``rivals``);
    per node, the in-links whose transfers faster ones may overtake
    (:func:`~tacos.synthesizer.routes.overtakable_in_links`, CSR
    ``slow_in_ptr``/``slow_in``); per link, its row in the overtaking table kept
    only for links with rivals, -1 for the others (``rival_slot``; see
    ``_kernels.find_overtakes``).
    """
    rivals_of = faster_rivals(topology, list(durations))
    rivals_ptr, rivals = csr(rivals_of)
    slow_in_ptr, slow_in = csr(overtakable_in_links(topology, rivals_of))
    has_rivals = np.diff(rivals_ptr) > 0
    rival_slot = np.where(has_rivals, np.cumsum(has_rivals) - 1, -1).astype(np.int64)
    return rivals_ptr, rivals, slow_in_ptr, slow_in, rival_slot


def link_endpoints(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Every link's source and destination node, by link id."""
    count = len(topology.links)
    return (
        np.fromiter((lk.src for lk in topology.links), np.int64, count),
        np.fromiter((lk.dst for lk in topology.links), np.int64, count),
    )


class RandomState:
    """``rng``'s generator state as the kernels' ``mt`` words and ``counters``, and back."""

    def __init__(self, rng: random.Random) -> None:
        version, internal, self._gauss_next = rng.getstate()
        if version != 3 or len(internal) != K.MT_WORDS + 1:
            raise TacosError(f"unexpected random.Random state version {version}")
        self._rng = rng
        self.mt = np.asarray(internal[: K.MT_WORDS], np.int64)
        self.counters = np.zeros(K.NUM_COUNTERS, np.int64)
        self.counters[K.C_MT_POS] = internal[K.MT_WORDS]

    def save(self) -> None:
        """Leave the ``random.Random`` where the reference would have left it."""
        internal = (*self.mt.tolist(), int(self.counters[K.C_MT_POS]))
        self._rng.setstate((3, internal, self._gauss_next))
