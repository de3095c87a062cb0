"""The cost model: how long a message holds its link, when it arrives, what a reduction costs.

Every time in tacos (synthesis, ``tacos simulate``, the verifier, bundle
predictions, imports) comes from one :class:`CostModel`, carried by the
:class:`~tacos.topology.Topology` it times, so the tools can never disagree.

Two link models:

* ``paper`` (default, the TACOS paper's): a message holds its link for
  ``latency + bytes / bandwidth`` and arrives when the link frees.
* ``pipelined`` (ASTRA-sim's analytical backends, measured): a link is busy only
  while it serializes the message (``bytes / bandwidth``) and the message
  arrives ``latency`` later, so the next message may start while the previous
  one is still in flight. Switch networks replay within 2% only with this model.

A reduction (an ``Op.REDUCE`` transfer) adds ``bytes / reduce_bandwidth`` at the
receiver after the message arrives, before anything may use its result; the
default bandwidth 0 means reductions are free (as the paper assumes).

Example:
    >>> from tacos.topology import Link
    >>> link = Link(0, 1, 50.0, 0.5)
    >>> model = CostModel("pipelined", reduce_bandwidth_GBps=100.0)
    >>> model.busy_us(link, 2**20), model.arrival_us(link, 2**20), model.reduce_us(2**20)
    (19.53125, 20.03125, 9.765625)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tacos.errors import TacosError, describe

if TYPE_CHECKING:
    from tacos.topology import Link

LinkModel = Literal["paper", "pipelined"]
LINK_MODELS: tuple[LinkModel, ...] = ("paper", "pipelined")
GIB = 2**30


@dataclass(frozen=True)
class CostModel:
    """The link model and the reduction bandwidth (GB/s of 2**30 bytes; 0 = free)."""

    link_model: LinkModel = "paper"
    reduce_bandwidth_GBps: float = 0.0

    def __post_init__(self) -> None:
        if self.link_model not in LINK_MODELS:
            raise TacosError(
                f"unknown link model {describe(self.link_model)}: use {' or '.join(LINK_MODELS)}"
            )
        bandwidth = self.reduce_bandwidth_GBps
        if isinstance(bandwidth, bool) or not (math.isfinite(bandwidth) and bandwidth >= 0):
            raise TacosError(
                f"reduce bandwidth {describe(bandwidth)} GB/s: give a number >= 0 "
                "(0 = reductions are free)"
            )

    @property
    def is_default(self) -> bool:
        return self == CostModel()

    def arrival_us(self, link: Link, nbytes: int) -> float:
        """From the start of a message to its arrival: latency + bytes / bandwidth."""
        return link.transfer_time_us(nbytes)

    def busy_us(self, link: Link, nbytes: int) -> float:
        """How long a message keeps its link from taking the next one."""
        if self.link_model == "pipelined":
            return nbytes / (link.bandwidth_GBps * GIB) * 1e6
        return link.transfer_time_us(nbytes)

    def reduce_us(self, nbytes: float) -> float:
        """Time to add ``nbytes`` into the receiver's copy (0 when reductions are free)."""
        if self.reduce_bandwidth_GBps == 0:
            return 0.0
        return nbytes / (self.reduce_bandwidth_GBps * GIB) * 1e6

    def to_dict(self) -> dict[str, Any]:
        return {"link_model": self.link_model, "reduce_bandwidth_GBps": self.reduce_bandwidth_GBps}

    @classmethod
    def from_dict(cls, data: Any, source: str) -> CostModel:
        """Inverse of :meth:`to_dict`; missing keys take their defaults."""
        if not isinstance(data, dict) or set(data) - {"link_model", "reduce_bandwidth_GBps"}:
            raise TacosError(
                f"{source}: cost must be an object with link_model and reduce_bandwidth_GBps"
            )
        bandwidth = data.get("reduce_bandwidth_GBps", 0.0)
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | float):
            raise TacosError(f"{source}: reduce_bandwidth_GBps {describe(bandwidth)} is no number")
        try:
            return cls(data.get("link_model", "paper"), float(bandwidth))
        except TacosError as err:
            raise TacosError(f"{source}: {err}") from None

    def describe(self) -> str:
        reductions = (
            f"reductions at {self.reduce_bandwidth_GBps:g} GB/s"
            if self.reduce_bandwidth_GBps
            else "free reductions"
        )
        return f"{self.link_model} links, {reductions}"


@dataclass(frozen=True)
class CostChoice:
    """What a user asked of the cost model; None keeps what the input says."""

    link_model: LinkModel | None = None
    reduce_bandwidth_GBps: float | None = None

    def apply(self, cost: CostModel) -> CostModel:
        return CostModel(
            cost.link_model if self.link_model is None else self.link_model,
            cost.reduce_bandwidth_GBps
            if self.reduce_bandwidth_GBps is None
            else self.reduce_bandwidth_GBps,
        )

    @property
    def given(self) -> bool:
        return self != CostChoice()


KEEP_COST = CostChoice()
"""Nothing asked: every input keeps its own cost model."""
