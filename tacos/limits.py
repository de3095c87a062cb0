"""How big an input may be before anything is allocated for it.

Sizes come from specs, options and files a user (or an attacker) wrote; a typo
such as ``ring:10000000000`` must be a one-line error at once, not minutes of
swapping followed by a MemoryError. The limits are what one machine of tens of
GB can hold while synthesizing (the TACOS paper's largest run has 40,000 NPUs).
"""

from __future__ import annotations

from tacos.errors import TacosError

MAX_NODES = 2_000_000
"""NPUs plus switches: 50 times the TACOS paper's largest network."""
MAX_LINKS = 5_000_000
"""Directed links: a Link object and its indices take about 200 bytes, and bounding a
collective on xgmi:1x2000 (4 million links) took 31 s and 1.7 GB; at 20 million it ran past
two minutes and 6 GB. The largest networks tacos is for (a 40,000-NPU mesh, a 64-ary fat tree)
have under 400,000."""

MAX_CHUNK_DELIVERIES = 4_000_000_000
"""Ranks times chunks: the synthesizer's holdings are a bit per (node, chunk), so this is
0.5 GB of state (a 40,000-NPU All-Gather needs 1.6e9)."""

MAX_BUFFER_BYTES = 1 << 62
"""A collective's buffer: Chakra stores sizes as signed 64-bit integers (4 EiB here)."""
MAX_BUFFER_CHUNKS = 1 << 24
"""Chunks of one buffer of an imported program (MSCCL XML): its checker keeps a slot each."""
MAX_LINK_TIME_US = 1e12
"""One message on one link (11.6 days): sums of billions of them stay far from overflow."""
MAX_SWEEP_POINTS = 100_000
"""Grid points one sweep may plan: each is at least one synthesis."""
MAX_TRIES = 1_000
"""Seeds one run may try: each is a whole synthesis."""


def check_count(value: int, limit: int, what: str, where: str) -> None:
    """Refuse ``value`` above ``limit`` with a message naming ``where`` it came from."""
    if value > limit:
        raise TacosError(
            f"{where}: {value} {what} is more than one machine can synthesize for "
            f"(at most {limit}); use a smaller network"
        )
