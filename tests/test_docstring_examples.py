"""The examples in docstrings run, and say what they print (they are documentation that is
checked, not comments that drift)."""

from __future__ import annotations

import doctest
import importlib

import pytest
from source_modules import modules


@pytest.mark.parametrize("name", sorted(modules()))
def test_docstring_examples_run_as_written(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} fail"


def test_the_examples_are_found():
    attempted = sum(
        doctest.testmod(importlib.import_module(name), report=False).attempted
        for name in ("tacos", "tacos.topology", "tacos.formats.chakra")
    )
    assert attempted > 5
