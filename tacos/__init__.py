"""TACOS: topology-aware collective algorithm synthesis.

The public API in one import::

    import tacos
    topo = tacos.from_spec("torus2d:4x4")
    spec = tacos.Collective(tacos.CollectiveKind.ALL_REDUCE, tuple(topo.npus))
    schedule = tacos.synthesize(topo, spec, seed=0)
    assert tacos.verify(schedule).ok
    assert tacos.simulate(schedule).collective_time_us == schedule.collective_time_us
"""

from tacos.bounds import LowerBounds, lower_bounds
from tacos.collective import Collective, CollectiveKind, parse_size
from tacos.errors import TacosError
from tacos.registry import load_topology
from tacos.schedule import Op, RankProgram, RankStep, Schedule, StepKind, Transfer
from tacos.simulate import SimulationResult, simulate
from tacos.synthesizer import synthesize
from tacos.topology import Link, Topology, from_spec
from tacos.verify import VerificationReport, verify

__version__ = "0.1.0"

__all__ = [
    "Collective",
    "CollectiveKind",
    "Link",
    "LowerBounds",
    "Op",
    "RankProgram",
    "RankStep",
    "Schedule",
    "SimulationResult",
    "StepKind",
    "TacosError",
    "Topology",
    "Transfer",
    "VerificationReport",
    "from_spec",
    "load_topology",
    "lower_bounds",
    "parse_size",
    "simulate",
    "synthesize",
    "verify",
]
