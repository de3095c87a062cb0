"""Where the tests find the real tools' files (shared beside the checkout).

Looked up in order: ``$TACOS_SHARED_DIR``, ``../shared`` next to the checkout,
then ``/work/shared`` (the team machines' layout, for clones made elsewhere).
``$TACOS_REFERENCE_DIR`` overrides the reference folder alone. Tests that need
these files skip when they are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    candidates = [os.environ.get("TACOS_SHARED_DIR"), REPO_DIR.parent / "shared", "/work/shared"]
    for candidate in candidates:
        if candidate and Path(candidate, "reference").is_dir():
            return Path(candidate)
    return REPO_DIR.parent / "shared"


SHARED_DIR = _shared_dir()
REFERENCE_DIR = Path(os.environ.get("TACOS_REFERENCE_DIR", SHARED_DIR / "reference"))
ASTRA_SIM_TOOL_DIR = SHARED_DIR / "tools" / "astra-sim"
ASTRA_SIM_MASTER_DIR = SHARED_DIR / "tools" / "astra-sim-master"
"""ASTRA-sim master (2026): reduce-scatter-implementation-custom, per-node ETs."""
