"""Reading JSON that users wrote or edited, with errors that point at the line.

Example:
    >>> parse_json('{"a": 1}', "x.json")
    {'a': 1}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tacos.errors import TacosError
from tacos.inputfile import require_file


def parse_json(text: str, source: str) -> Any:
    """Parse ``text``; a syntax error names ``source``, the line and the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise TacosError(f"{source}: line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise TacosError(
            f"{source}: nested too deeply to read (thousands of [ or {{); this is no tacos file"
        ) from None


def load_json(path: str | Path, what: str) -> Any:
    """Read and parse a JSON file; ``what`` says what it should hold, for the error."""
    path = Path(path)
    require_file(path, what)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark, as Windows tools write
    except (OSError, UnicodeDecodeError) as err:
        raise TacosError(f"{path}: cannot read {what}: {err}") from None
    return parse_json(text, str(path))
