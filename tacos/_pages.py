"""Large kernel tables on 2 MiB pages: fewer TLB misses for tables read at random.

The fabric engine's tables grow with the square of the cluster (per node and
chunk, per switch and destination, per transfer: gigabytes at 4096 GPUs) and
are read at random, so on 4 KiB pages most reads also miss the TLB. NumPy asks
Linux for transparent huge pages on its own large arrays, but arrays made
inside compiled code come from ``malloc`` without that advice. The 4096-GPU
DGX-like All-Gather measured 255 s on 4 KiB pages and 220 s with every
allocation advised (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``).

:func:`huge` gives that advice (``madvise(MADV_HUGEPAGE)``) for one array;
it must come before the array is first written, as the kernel backs pages
when they are first touched (:func:`huge_filled` advises, then fills). It is
advice only: where the system keeps transparent huge pages off, or off Linux,
nothing changes.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

MADV_HUGEPAGE = 14
"""Linux's advice number (``<asm-generic/mman-common.h>``)."""
PAGE_BYTES = 4096
"""The base page: ``madvise`` takes whole pages."""
ADVISED_FROM_BYTES = 4 << 20
"""Smaller arrays are left alone (NumPy's own threshold)."""


def _madvise_call(typingctx: Any, address: Any, length: Any, advice: Any) -> Any:
    """``madvise(address, length, advice)`` from libc, resolved by name (so the calling
    kernels stay cacheable); off Linux it does nothing and returns 0."""
    sig = types.int32(types.intp, types.intp, types.int32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, word = ir.IntType(32), ir.IntType(64)
        if not sys.platform.startswith("linux"):
            return ir.Constant(i32, 0)
        fnty = ir.FunctionType(i32, [word, word, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "madvise")
        return builder.call(fn, args)

    return sig, codegen


_madvise: Any = intrinsic(_madvise_call)


@njit(cache=True)
def huge(array: np.ndarray) -> np.ndarray:
    """``array`` itself, its whole pages advised to be huge ones (when it is large)."""
    if array.nbytes >= ADVISED_FROM_BYTES:
        first = (array.ctypes.data + PAGE_BYTES - 1) // PAGE_BYTES * PAGE_BYTES
        end = (array.ctypes.data + array.nbytes) // PAGE_BYTES * PAGE_BYTES
        _madvise(first, end - first, np.int32(MADV_HUGEPAGE))
    return array


@njit(cache=True)
def huge_filled(array: np.ndarray, value: Any) -> np.ndarray:
    """``array`` advised as by :func:`huge`, then every element set to ``value``."""
    huge(array)[...] = value
    return array
