"""One collective of a workload, alone on ASTRA-sim: each native algorithm against its custom ET.

Synthesis does not always win: ASTRA-sim's ``direct`` algorithm sends every message
at once and lets the network route them, which on a switch, and on networks the
congestion-unaware backend simulates without contention, can beat the greedy
All-to-All. ``--measure-with BINARY`` makes the workload bundle honest about that: each
distinct collective on every NPU runs once per native algorithm and once with its ET
(a one-node workload, in a scratch directory), and the faster is what the bundle uses.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tacos.errors import TacosError
from tacos.exporters.astra_config import REMOTE_MEMORY
from tacos.exporters.chakra import rank_traces
from tacos.exporters.workload_config import (
    NATIVE_ALGORITHMS,
    PER_NODE_FILE,
    PER_NODE_KEY,
    per_node_yaml,
    workload_system,
)
from tacos.formats.astrasim import AnalyticalNetwork, network_yaml
from tacos.formats.chakra import CHAKRA_VERSION, GlobalMetadata, Node, NodeType, attr, write_et
from tacos.formats.workload import CUSTOM_KINDS, INVOLVED_DIM_ATTRIBUTE, CollectiveCall, CommGroup
from tacos.schedule import Schedule

FINISHED: Final = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
TIMEOUT_SECONDS: Final = 600
CUSTOM: Final = "custom"
"""The key of the custom ET's time in :func:`measure`'s result."""


def write_custom_et(directory: Path, prefix: str, schedule: Schedule, group: CommGroup) -> int:
    """Write a schedule as the custom ET ``directory/prefix.<position>.et``; its node count."""
    nodes = 0
    positions = group.file_positions
    for npu, (meta, et_nodes) in rank_traces(schedule).items():
        write_et(directory / f"{prefix}.{positions[npu]}.et", meta, et_nodes)
        nodes += len(et_nodes)
    return nodes


def measure(
    binary: Path, call: CollectiveCall, schedule: Schedule, network: list[AnalyticalNetwork]
) -> dict[str, int | None]:
    """ASTRA-sim's time (ns, slowest rank) for ``call`` alone: with each native algorithm,
    and with ``schedule`` as its custom ET (key :data:`CUSTOM`); None where a rank hangs."""
    with tempfile.TemporaryDirectory(prefix="tacos-measure-") as scratch:
        work = Path(scratch)
        write_custom_et(work, "et/measured", schedule, call.group)
        (work / PER_NODE_FILE).write_text(per_node_yaml({0: "et/measured"}))
        (work / "network.yml").write_text(network_yaml(network))
        (work / "memory.json").write_text(json.dumps(REMOTE_MEMORY))
        _one_node_workload(work / "workload", call, len(call.group.members))
        systems: Mapping[str, dict[str, object]] = {
            **{n: workload_system(n, len(network), {}) for n in NATIVE_ALGORITHMS},
            CUSTOM: workload_system("ring", len(network), {PER_NODE_KEY: PER_NODE_FILE}),
        }
        return {name: _run(binary, work, name, system) for name, system in systems.items()}


def _one_node_workload(prefix: Path, call: CollectiveCall, ranks: int) -> None:
    comm_type = next(t for t, kind in CUSTOM_KINDS.items() if kind is call.kind)
    node = Node(id=0, name=call.name, type=NodeType.COMM_COLL_NODE)
    node.attr.extend([attr("comm_type", int(comm_type)), attr("comm_size", call.comm_bytes)])
    if call.involved_dims is not None:
        node.attr.append(attr(INVOLVED_DIM_ATTRIBUTE, list(call.involved_dims)))
    for rank in range(ranks):
        write_et(f"{prefix}.{rank}.et", GlobalMetadata(version=CHAKRA_VERSION), [node])


def _run(binary: Path, work: Path, name: str, system: dict[str, object]) -> int | None:
    config = work / f"system_{name}.json"
    config.write_text(json.dumps(system))
    try:
        result = subprocess.run(
            [
                str(binary),
                f"--workload-configuration={work}/workload",
                f"--system-configuration={config}",
                f"--network-configuration={work}/network.yml",
                f"--remote-memory-configuration={work}/memory.json",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except OSError as err:
        raise TacosError(f"--measure-with {binary}: cannot run it: {err.strerror}") from None
    except subprocess.TimeoutExpired:
        return None
    times = [int(t) for _, t in FINISHED.findall(result.stdout)]
    ranks = len(list(work.glob("workload.*.et")))
    return max(times) if result.returncode == 0 and len(times) == ranks else None
