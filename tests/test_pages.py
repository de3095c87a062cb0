"""Large kernel tables are advised onto huge pages; the advice changes no values."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from tacos._pages import ADVISED_FROM_BYTES, huge, huge_filled


@njit(cache=True)
def _made_inside(count: int) -> np.ndarray:
    """An array as the kernels make theirs: allocated in compiled code, advised, then filled."""
    array = huge(np.empty(count, np.int64))
    for i in range(count):
        array[i] = i
    return array


def _vm_flags_of(address: int) -> list[str]:
    """The ``VmFlags`` of the mapping of this process that holds ``address``."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return []


def test_the_array_and_its_values_are_kept() -> None:
    count = 2 * ADVISED_FROM_BYTES // 8
    array = _made_inside(count)
    assert array.shape == (count,)
    assert np.array_equal(array, np.arange(count))
    small = np.arange(10)
    assert huge(small) is small
    assert (huge_filled(np.empty(count, np.int64), -1) == -1).all()
    assert huge_filled(np.empty((3, 4), np.uint64), 0).sum() == 0
    assert huge_filled(np.empty(count, np.bool_), True).all()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise advice is Linux's")
def test_a_large_array_made_in_compiled_code_is_advised() -> None:
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        pytest.skip("this system keeps transparent huge pages off")
    array = _made_inside(4 * ADVISED_FROM_BYTES // 8)
    assert "hg" in _vm_flags_of(array.ctypes.data + array.nbytes // 2)
