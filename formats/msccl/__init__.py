"""MSCCL algorithm XML: the program model, its XML codec, checker and interpreter.

Everything the MSCCL reader (:mod:`tacos.importers.msccl`), the writer
(:mod:`tacos.exporters.msccl`) and ``tacos verify --format msccl`` share, one
module per concept, with the public names re-exported here:

* :mod:`~tacos.formats.msccl.runtime` -- the runtimes' facts: limits, collective
  names, step semantics, connection buffers, the buffer table;
* :mod:`~tacos.formats.msccl.model` -- the program model (:class:`Algorithm`
  down to :class:`Step`);
* :mod:`~tacos.formats.msccl.codec` -- reading XML into the model without
  trusting it (:func:`load`) and writing the model as the runtimes read it;
* :mod:`~tacos.formats.msccl.execute` -- buffer layout (in-place aliasing),
  symbolic values, the interpreter and the collectives' postconditions;
* :mod:`~tacos.formats.msccl.check` -- the checker and its report.
"""

from tacos.formats.msccl.check import MAX_REPORTED, CheckReport, call_modes, check, detect_runtime
from tacos.formats.msccl.codec import load, to_xml
from tacos.formats.msccl.execute import (
    Delivery,
    Execution,
    Value,
    describe_value,
    execute,
    in_place_slot,
)
from tacos.formats.msccl.model import Algorithm, Gpu, Step, StepRef, ThreadBlock
from tacos.formats.msccl.runtime import (
    BUFFERS,
    CHUNK_EFFECTIVE_BYTES,
    FIFO_CALLS,
    LEGACY_DEFAULT_MAX_BYTES,
    MAX_ATTRIBUTES,
    MAX_COUNT,
    MAX_DEPID,
    MAX_NODES_PER_RANK,
    MAX_TBS_PER_CHANNEL,
    MAX_VALUE_CHARS,
    PROTOCOLS,
    RUNTIMES,
    STEP_TYPES,
    Runtime,
    StepType,
    user_buffer_chunks,
)

__all__ = [
    "BUFFERS",
    "CHUNK_EFFECTIVE_BYTES",
    "FIFO_CALLS",
    "LEGACY_DEFAULT_MAX_BYTES",
    "MAX_ATTRIBUTES",
    "MAX_COUNT",
    "MAX_DEPID",
    "MAX_NODES_PER_RANK",
    "MAX_REPORTED",
    "MAX_TBS_PER_CHANNEL",
    "MAX_VALUE_CHARS",
    "PROTOCOLS",
    "RUNTIMES",
    "STEP_TYPES",
    "Algorithm",
    "CheckReport",
    "Delivery",
    "Execution",
    "Gpu",
    "Runtime",
    "Step",
    "StepRef",
    "StepType",
    "ThreadBlock",
    "Value",
    "call_modes",
    "check",
    "describe_value",
    "detect_runtime",
    "execute",
    "in_place_slot",
    "load",
    "to_xml",
    "user_buffer_chunks",
]
