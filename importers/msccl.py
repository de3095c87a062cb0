"""MSCCL algorithm XML: read it safely, run it symbolically, check it, import it.

The GPU runtimes that execute these files (the legacy NCCL-MSCCL interpreter,
the MSCCL executor and RCCL) parse them by hand and run them without checking
that they are right: a wrong file hangs the job or returns wrong sums. This
module checks a file the way those runtimes would run it, from the XML alone
(``tacos verify --format msccl FILE.xml``). It does not use our exporter, so
it can judge the exporter's output; the exporter takes the runtime facts
(limits, step semantics, in-place aliasing) from here:

* **format** -- what the hand-written tokenizers reject although a standard
  XML parser accepts it (an ``<?xml?>`` declaration, tabs, attributes over
  several lines, single quotes, entities, non-decimal integers);
* **structure** -- the loaders' rules and limits (``RUNTIMES``): required
  attributes, collective names, threadblock ids, one threadblock per
  connection, steps per threadblock, threadblocks per GPU, channels,
  dependency encoding (``depid``/``deps``/``hasdep``, ``nop`` chains), buffer
  bounds;
* **matching** -- per connection (sender, receiver, channel) the k-th send
  step pairs with the k-th receive step and both move ``cnt`` chunks;
* **execution** -- every threadblock runs its steps in order, waits for the
  steps it depends on, receives from and sends to connections that buffer
  only a few calls (``FIFO_CALLS``). A step whose messages are large is split
  into several calls; the check runs once with one call per step and once with
  the calls of the largest message the file accepts (``maxBytes``). Both must
  finish; otherwise the report shows the cycle of waiting threadblocks;
* **semantics** -- buffer slots hold symbolic values (which ranks' input
  chunks were summed into them, or uninitialised data). Accesses to one slot
  by two threadblocks must be ordered by dependencies, messages or program
  order (vector clocks); otherwise the result depends on timing and is
  reported as a race. At the end the collective's postcondition must hold in
  every mode the file serves (in-place, where input and output alias as the
  runtimes lay them out, and out-of-place).

Because a step that can run stays runnable until its own threadblock runs it
(a connection has one sender and one receiver threadblock, flags only grow),
the steps that complete do not depend on the order in which threadblocks
run: executing one order decides deadlock for all (a Kahn process network).
The interpreters replay the whole program once per slice of the buffer, but
a later replay's messages queue behind the earlier one's and its waits are
for steps of the same replay, so one replay decides it too.

:func:`execute` also yields an event trace: every chunk each receive step
took, with the earlier receives whose data it carried. :func:`to_schedule`
turns that trace into a :class:`~tacos.schedule.Schedule` on a fully
connected topology, which :func:`tacos.verify` can check.

Example:
    >>> report = check(load(Path("ag_ring_8ch2_Simple.xml")))  # doctest: +SKIP
    >>> print(report.summary())  # doctest: +SKIP
    OK: allgather on 8 GPUs for the legacy runtime; in-place: race-free, postcondition holds; ...
    >>> schedule = to_schedule(load(Path("ag_ring_8ch2_Simple.xml")))  # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from lxml import etree

from tacos.collective import Collective, CollectiveKind
from tacos.errors import TacosError
from tacos.schedule import Op, Schedule, Transfer
from tacos.topology import Topology

K = CollectiveKind


# ================================================================ runtime facts
@dataclass(frozen=True)
class Runtime:
    """What one runtime's loader accepts (read from its source, see SPEC.md).

    ``max_steps`` is ``MSCCL_MAX_NUM_STEPS`` (steps per threadblock, ``nop``
    included), ``max_threadblocks`` is ``MSCCL_MAX_NUM_THREAD_BLOCKS`` (per GPU)
    and ``max_channels`` is ``MAXCHANNELS``. ``colls`` maps the ``coll`` names
    the loader knows to our collectives (None: no postcondition to check).
    The executor format ignores ``name`` but needs ``outofplace``,
    ``minBytes`` and ``maxBytes``.
    """

    name: str
    max_steps: int
    max_threadblocks: int
    max_channels: int
    colls: Mapping[str, CollectiveKind | None]
    executor_format: bool

    def coll_name(self, kind: CollectiveKind) -> str:
        """How this runtime spells a collective in ``coll``."""
        return next(name for name, known in self.colls.items() if known is kind)


_COMMON_COLLS: dict[str, CollectiveKind | None] = {
    "allreduce": K.ALL_REDUCE,
    "allgather": K.ALL_GATHER,
    "reduce": K.REDUCE,
    "broadcast": K.BROADCAST,
    "alltoall": K.ALL_TO_ALL,
}
_LEGACY_COLLS = {**_COMMON_COLLS, "reduce_scatter": K.REDUCE_SCATTER, "custom": None}
_EXECUTOR_COLLS = {
    **_COMMON_COLLS,
    "reducescatter": K.REDUCE_SCATTER,
    "gather": K.GATHER,
    "scatter": K.SCATTER,
    "send": None,
    "recv": None,
    "alltoallv": None,
}
_KNOWN_COLLS = {**_LEGACY_COLLS, **_EXECUTOR_COLLS}
RUNTIMES: dict[str, Runtime] = {
    # microsoft/msccl src/include/msccl.h, devcomm.h
    "legacy": Runtime("legacy", 256, 216, 32, _LEGACY_COLLS, executor_format=False),
    # Azure/msccl-executor-nccl makefiles/common.mk (default build), msccl_struct.h, device.h
    "executor": Runtime("executor", 64, 1024, 32, _EXECUTOR_COLLS, executor_format=True),
    # ROCm/rccl src/include/msccl/msccl_struct.h, device.h
    "rccl": Runtime("rccl", 64, 64, 128, _EXECUTOR_COLLS, executor_format=True),
}
MAX_COUNT = 71
"""Largest ``cnt`` of a step (``MSCCL_MAX_COUNT`` 72 is exclusive)."""
MAX_TBS_PER_CHANNEL = 32
"""Threadblocks with a send peer (and, separately, with a receive peer) per channel."""
MAX_DEPID = 127
"""``depid`` is stored in an ``int8_t``: larger threadblock ids wrap around."""
MAX_NODES_PER_RANK = 4096
"""The tokenizer records ``algo`` + every ``gpu`` + the rank's own ``tb`` and ``step`` elements."""
MAX_ATTRIBUTES = 16
MAX_VALUE_CHARS = 255
PROTOCOLS = ("Simple", "LL", "LL128")
FIFO_CALLS = {"Simple": 2, "LL": 8, "LL128": 8}
"""Calls a connection buffers ahead of its receiver: NCCL_STEPS = 8 slots, a Simple
call takes MSCCL_CHUNKSTEPS = 4 of them, an LL or LL128 call one."""
CHUNK_EFFECTIVE_BYTES = {"Simple": 2 * 2**20, "LL": 32 * 2**10, "LL128": 576_000}
"""Bytes one call moves with NCCL's default buffers; a step of ``cnt`` chunks of
``nBytes / nchunksperloop`` bytes is split into calls of at most this much."""
LEGACY_DEFAULT_MAX_BYTES = 2**27
"""The legacy runtime's ``maxBytes`` when the attribute is absent."""
BUFFERS = ("i", "o", "s")
MAX_REPORTED = 20


@dataclass(frozen=True)
class StepType:
    """What a step type does, as the interpreters run it.

    ``reads_src``/``writes_dst``: the buffer slots it touches; ``reduces``: the
    received data is added to ``src``; ``checked``: which of src/dst the loader
    bounds-checks (the others are used unchecked).
    """

    recv: bool = False
    send: bool = False
    reads_src: bool = False
    writes_dst: bool = False
    reduces: bool = False
    checked: tuple[str, ...] = ()


STEP_TYPES: dict[str, StepType] = {
    "s": StepType(send=True, reads_src=True, checked=("src",)),
    "r": StepType(recv=True, writes_dst=True, checked=("dst",)),
    "rcs": StepType(recv=True, send=True, writes_dst=True, checked=("dst",)),
    "rrs": StepType(recv=True, send=True, reads_src=True, reduces=True, checked=("src",)),
    "rrc": StepType(recv=True, reads_src=True, writes_dst=True, reduces=True),
    "rrcs": StepType(
        recv=True, send=True, reads_src=True, writes_dst=True, reduces=True, checked=("src", "dst")
    ),
    "cpy": StepType(reads_src=True, writes_dst=True, checked=("src", "dst")),
    "re": StepType(reads_src=True, writes_dst=True, reduces=True, checked=("src", "dst")),
    "nop": StepType(),
}


# ================================================================ the model
@dataclass(frozen=True)
class Step:
    """One ``<step>``; ``index`` is its position in the threadblock (what ``deps`` names)."""

    index: int
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    line: int

    @property
    def kind(self) -> StepType:
        return STEP_TYPES[self.type]


@dataclass(frozen=True)
class ThreadBlock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    line: int


@dataclass(frozen=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[ThreadBlock, ...]
    line: int


@dataclass(frozen=True)
class Algorithm:
    """An MSCCL ``<algo>`` as written; ``format_errors``/``format_warnings`` are what the
    runtimes' tokenizers would make of its text (with line numbers)."""

    source: str
    name: str | None
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int | None
    min_bytes: int | None
    max_bytes: int | None
    gpus: tuple[Gpu, ...]
    format_errors: tuple[str, ...] = ()
    format_warnings: tuple[str, ...] = ()

    def gpu(self, gpu_id: int) -> Gpu:
        return next(g for g in self.gpus if g.id == gpu_id)


@dataclass(frozen=True)
class StepRef:
    """A step by position, as messages name it: ``gpu 2 tb 1 step 4 (rcs)``."""

    gpu: int
    tb: int
    step: int
    type: str

    def __str__(self) -> str:
        return f"gpu {self.gpu} tb {self.tb} step {self.step} ({self.type})"


def _ref(gpu: Gpu | int, tb: ThreadBlock, step: Step) -> StepRef:
    return StepRef(gpu if isinstance(gpu, int) else gpu.id, tb.id, step.index, step.type)


# ================================================================ reading
def load(source: str | Path | bytes, name: str | None = None) -> Algorithm:
    """Read an MSCCL XML file (a path) or document (bytes) without trusting it.

    A DOCTYPE (the only place entities can be declared) is refused before
    parsing, and the parser would neither resolve entities nor use the network.
    Raises :class:`TacosError` (naming the file and line) when the text is not
    XML or lacks what every runtime needs to read it; what only some runtimes
    reject is left to :func:`check`.
    """
    if isinstance(source, bytes):
        data, where = source, name or "<xml>"
    else:
        where = name or str(source)
        try:
            data = Path(source).read_bytes()
        except OSError as err:
            raise TacosError(f"{where}: cannot read MSCCL XML: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TacosError(
            f"{where}: not UTF-8 text (byte {err.start}); MSCCL XML is ASCII"
        ) from None
    errors, warnings = _lint(text, where)
    parser = etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:
        raise TacosError(f"{where}:{err.lineno}: not well-formed XML: {err.msg}") from None
    return _Reader(where, errors, warnings).algorithm(root)


_MARKUP = re.compile(r"<!--.*?-->|<[^>]*>", re.S)
_OPEN_TAG = re.compile(r'<[A-Za-z_][\w.-]*((?: [A-Za-z_][\w.-]*="[^"]*")*)/?>\Z')
_CLOSE_TAG = re.compile(r"</[A-Za-z_][\w.-]*>\Z")
_ATTRIBUTE = re.compile(r' ([A-Za-z_][\w.-]*)="([^"]*)"')


def _lint(text: str, where: str) -> tuple[list[str], list[str]]:
    """What the runtimes' hand-written tokenizer would reject (errors) or misread (warnings).

    Raises for a DOCTYPE (refused whatever the runtime would do with it).
    """
    errors: list[str] = []
    warnings: list[str] = []
    if text.startswith("\ufeff"):
        errors.append(f"{where}:1: byte-order mark: the runtimes expect '<' first")
        text = text[1:]
    line, last = 1, 0
    for match in _MARKUP.finditer(text):
        gap = text[last : match.start()]
        line_at_gap = line
        line += text.count("\n", last, match.start())
        if gap.strip(" \n\r"):
            bad = next(c for c in gap if c not in " \n\r")
            errors.append(
                f"{where}:{line_at_gap + gap[: gap.index(bad)].count(chr(10))}: "
                f"{bad!r} between elements: the runtimes skip only spaces and newlines there"
            )
        tag, last = match.group(), match.end()
        here = f"{where}:{line}"
        line += tag.count("\n")
        if tag.startswith("<!--"):
            continue
        if tag.startswith("<?"):
            errors.append(
                f"{here}: {tag.split()[0]}...?> declaration: the runtimes read it as an element "
                "and reject the file; drop it"
            )
        elif tag.startswith("<!"):
            raise TacosError(
                f"{here}: {tag[:9]} declarations are refused (entities could expand or reach "
                "the network); MSCCL XML needs none"
            )
        elif not (_CLOSE_TAG.match(tag) or _lint_open_tag(tag, here, errors, warnings)):
            errors.append(f"{here}: {tag[:40]!r} is not a tag the runtimes' tokenizer reads")
    if text[last:].strip(" \n\r"):
        errors.append(f"{where}:{line}: text after the last element")
    return errors, warnings


def _lint_open_tag(tag: str, here: str, errors: list[str], warnings: list[str]) -> bool:
    """Check one start tag; False when it is not a start tag at all."""
    if not tag[1:2].isalpha() and tag[1:2] != "_":
        return False
    problems = []
    if "\n" in tag or "\r" in tag:
        problems.append("attributes must all be on the tag's first line")
    if "\t" in tag:
        problems.append("tabs are not separators")
    if "'" in tag:
        problems.append("values must be in double quotes")
    if "&" in tag:
        problems.append("entities are not decoded")
    if problems:
        errors.append(f"{here}: {'; '.join(problems)}")
        return True
    normalized = re.sub(r" {2,}", " ", tag).replace(" />", "/>").replace(" >", ">")
    if normalized != tag:
        warnings.append(
            f"{here}: extra spaces between attributes are stored as empty-named attributes"
        )
    matched = _OPEN_TAG.match(normalized)
    if not matched:
        errors.append(f'{here}: attributes must be name="value" pairs separated by one space')
        return True
    attributes = _ATTRIBUTE.findall(matched.group(1))
    if len(attributes) > MAX_ATTRIBUTES:
        errors.append(f"{here}: {len(attributes)} attributes; the runtimes keep only 16")
    for name, value in attributes:
        if len(value) > MAX_VALUE_CHARS:
            errors.append(f"{here}: value of {name} is longer than {MAX_VALUE_CHARS} characters")
    return True


_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)\Z")


class _Reader:
    """Builds the model from a parsed tree; missing attributes are fatal, odd integers not."""

    def __init__(self, where: str, errors: list[str], warnings: list[str]) -> None:
        self.where, self.errors, self.warnings = where, errors, warnings

    def algorithm(self, root: Any) -> Algorithm:
        if root.tag != "algo":
            raise TacosError(
                f"{self.where}:{root.sourceline}: the document element is <{root.tag}>, "
                "not <algo>: not an MSCCL algorithm"
            )
        gpus = tuple(self.gpu(node) for node in self.children(root, "gpu"))
        return Algorithm(
            source=self.where,
            name=root.get("name"),
            proto=self.text(root, "proto"),
            nchannels=self.integer(root, "nchannels"),
            nchunksperloop=self.integer(root, "nchunksperloop"),
            ngpus=self.integer(root, "ngpus"),
            coll=self.text(root, "coll"),
            inplace=self.integer(root, "inplace"),
            outofplace=self.optional_integer(root, "outofplace"),
            min_bytes=self.optional_integer(root, "minBytes"),
            max_bytes=self.optional_integer(root, "maxBytes"),
            gpus=gpus,
            format_errors=tuple(self.errors),
            format_warnings=tuple(self.warnings),
        )

    def gpu(self, node: Any) -> Gpu:
        return Gpu(
            self.integer(node, "id"),
            self.integer(node, "i_chunks"),
            self.integer(node, "o_chunks"),
            self.integer(node, "s_chunks"),
            tuple(self.threadblock(tb) for tb in self.children(node, "tb")),
            node.sourceline,
        )

    def threadblock(self, node: Any) -> ThreadBlock:
        steps = tuple(self.step(i, s) for i, s in enumerate(self.children(node, "step")))
        return ThreadBlock(
            self.integer(node, "id"),
            self.integer(node, "send"),
            self.integer(node, "recv"),
            self.integer(node, "chan"),
            steps,
            node.sourceline,
        )

    def step(self, index: int, node: Any) -> Step:
        if len(node):
            raise TacosError(
                f"{self.where}:{node.sourceline}: <step> has child elements; the runtimes crash"
            )
        return Step(
            index,
            self.integer(node, "s"),
            self.text(node, "type"),
            self.text(node, "srcbuf"),
            self.integer(node, "srcoff"),
            self.text(node, "dstbuf"),
            self.integer(node, "dstoff"),
            self.integer(node, "cnt"),
            self.integer(node, "depid"),
            self.integer(node, "deps"),
            self.integer(node, "hasdep"),
            node.sourceline,
        )

    def children(self, node: Any, tag: str) -> Iterator[Any]:
        for child in node:
            if child.tag == tag:
                yield child
            else:
                self.warnings.append(
                    f"{self.where}:{child.sourceline}: <{child.tag}> inside <{node.tag}> "
                    "is ignored by the runtimes"
                )

    def text(self, node: Any, name: str) -> str:
        value = node.get(name)
        if value is None:
            raise TacosError(
                f"{self.where}:{node.sourceline}: <{node.tag}> lacks the attribute {name!r}, "
                "which the runtimes require"
            )
        return str(value)

    def optional_integer(self, node: Any, name: str) -> int | None:
        return None if node.get(name) is None else self.integer(node, name)

    def integer(self, node: Any, name: str) -> int:
        text = self.text(node, name)
        try:
            value = int(text, 10)
        except ValueError:
            raise TacosError(
                f"{self.where}:{node.sourceline}: {name}={text!r} on <{node.tag}> is not an integer"
            ) from None
        if not _DECIMAL.match(text):
            self.errors.append(
                f"{self.where}:{node.sourceline}: {name}={text!r}: the runtimes read integers "
                "with strtol(s, 0, 0) (leading 0 = octal); write plain decimal"
            )
        return value


# ================================================================ checking
@dataclass
class CheckReport:
    """Outcome of :func:`check`: ``ok`` and, when not, what is wrong (first few)."""

    source: str
    runtime: str
    coll: str
    ngpus: int
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    warnings: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    root: int | None = None
    """The root a broadcast or reduce was found correct for."""

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def fail(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(message)

    def summary(self) -> str:
        head = f"{self.coll} on {self.ngpus} GPUs for the {self.runtime} runtime"
        if self.ok:
            return f"OK: {head}; " + "; ".join(self.checked)
        more = self.error_count - len(self.errors)
        tail = f"\n  ... and {more} more" if more else ""
        return (
            f"FAILED ({self.error_count} problems, {head}):\n  " + "\n  ".join(self.errors) + tail
        )


def detect_runtime(algorithm: Algorithm) -> str:
    """``executor`` when the file has the executor's ``outofplace`` attribute or spells
    ``coll`` the executor's way, else ``legacy`` (what msccl-tools writes)."""
    if algorithm.outofplace is not None or algorithm.coll not in _LEGACY_COLLS:
        return "executor"
    return "legacy"


def check(
    algorithm: Algorithm, *, runtime: str | None = None, root: int | None = None
) -> CheckReport:
    """Check an algorithm for one runtime (default: :func:`detect_runtime`); never raises
    on a wrong algorithm. ``root`` pins the root of a broadcast or reduce, which the
    XML does not record (by default any root that makes the result right is accepted).
    """
    runtime_name = runtime or detect_runtime(algorithm)
    if runtime_name not in RUNTIMES:
        raise TacosError(
            f"unknown MSCCL runtime {runtime_name!r}: use one of {', '.join(RUNTIMES)}"
        )
    report = CheckReport(algorithm.source, runtime_name, algorithm.coll, algorithm.ngpus)
    for message in algorithm.format_errors:
        report.fail(message)
    report.warnings.extend(algorithm.format_warnings)
    if not _Structure(algorithm, RUNTIMES[runtime_name], report).check():
        report.checked.append("not executed: fix the structure first")
        return report
    if not _check_matching(algorithm, report):
        return report
    kind = RUNTIMES[runtime_name].colls[algorithm.coll]
    for inplace in _modes(algorithm, RUNTIMES[runtime_name]):
        if not _check_mode(algorithm, kind, inplace, root, report):
            break  # a deadlock does not depend on the mode
    if report.ok:
        _check_large_messages(algorithm, report)
    return report


def _check_mode(
    algorithm: Algorithm,
    kind: CollectiveKind | None,
    inplace: bool,
    root: int | None,
    report: CheckReport,
) -> bool:
    """Run one call kind with one call per step: races, then the result. False on deadlock."""
    mode = "in-place" if inplace else "out-of-place"
    run = execute(algorithm, inplace=inplace, track_data=True)
    if run.deadlock:
        report.fail(f"deadlock with {run.buffering}: {run.deadlock}")
        return False
    for race in run.races:
        report.fail(f"{mode}: {race}")
    for writer in run.input_writers:
        report.warnings.append(
            f"{mode}: {writer} writes the input buffer, which is the user's const "
            "send buffer in an out-of-place call"
        )
    if run.races:
        return True
    if kind is None:
        report.checked.append(
            f"{mode}: race-free, runs to completion (coll={algorithm.coll} has no postcondition)"
        )
    else:
        _check_postcondition(algorithm, kind, inplace, run, root, mode, report)
    return True


def _check_large_messages(algorithm: Algorithm, report: CheckReport) -> None:
    """Run again with the calls of the largest message the file accepts, if that differs."""
    largest = _smallest_max_allowed_count(algorithm)
    split = any(
        math.ceil(step.cnt / largest) > 1
        for gpu in algorithm.gpus
        for tb in gpu.threadblocks
        for step in tb.steps
        if step.kind.send or step.kind.recv
    )
    limit = _max_bytes(algorithm)
    sizes = "any message size" if limit is None else f"messages up to {limit} bytes"
    if split:
        run = execute(algorithm, inplace=True, max_allowed_count=largest)
        if run.deadlock:
            report.fail(
                f"deadlock for large messages ({sizes}), with {run.buffering}: {run.deadlock}; "
                "lower maxBytes or split the steps with cnt > 1"
            )
            return
    buffering = f"{FIFO_CALLS[algorithm.proto]}-call connection buffers"
    report.checked.append(f"no deadlock with {buffering} for {sizes}")


def _modes(algorithm: Algorithm, runtime: Runtime) -> list[bool]:
    """The call kinds (in-place True, out-of-place False) the runtime uses this file for."""
    if not runtime.executor_format:
        return [bool(algorithm.inplace)]
    return [flag for flag, on in ((True, algorithm.inplace), (False, algorithm.outofplace)) if on]


def _max_bytes(algorithm: Algorithm) -> int | None:
    """The largest message the runtime may run the file for (None: no limit).

    The legacy runtime defaults to 128 MiB; the executor reads ``maxBytes=0`` as unlimited.
    """
    if algorithm.max_bytes is None:
        return LEGACY_DEFAULT_MAX_BYTES
    return algorithm.max_bytes or None


def _smallest_max_allowed_count(algorithm: Algorithm) -> int:
    """The chunks one call moves for the largest message the file accepts (at least 1).

    The runtimes compute ``chunkEffectiveSize / ceil(nBytes / nchunksperloop)``,
    clamped to 1..71.
    """
    limit = _max_bytes(algorithm)
    if limit is None:
        return 1
    per_chunk = math.ceil(limit / algorithm.nchunksperloop)
    return max(1, min(MAX_COUNT, CHUNK_EFFECTIVE_BYTES[algorithm.proto] // per_chunk))


class _Structure:
    """The loaders' rules and limits (``RUNTIMES``), reported against the offending element."""

    def __init__(self, algorithm: Algorithm, runtime: Runtime, report: CheckReport) -> None:
        self.a, self.rt, self.report = algorithm, runtime, report
        self.errors_before = report.error_count

    def fail(self, message: str) -> None:
        self.report.fail(message)

    def check(self) -> bool:
        self.algo()
        if self.report.error_count == self.errors_before:
            self.gpus()
        return self.report.error_count == self.errors_before

    def algo(self) -> None:
        a, rt = self.a, self.rt
        where = f"{a.source}: <algo>"
        if a.proto not in PROTOCOLS:
            self.fail(f"{where} proto={a.proto!r}: use one of {', '.join(PROTOCOLS)}")
        if a.coll not in rt.colls:
            other = next((n for n, r in RUNTIMES.items() if a.coll in r.colls), None)
            hint = f" (that is the {other} runtime's spelling)" if other else ""
            self.fail(
                f"{where} coll={a.coll!r} is unknown to the {rt.name} runtime{hint}; "
                f"it reads {', '.join(rt.colls)}"
            )
        if not 1 <= a.nchannels <= rt.max_channels:
            self.fail(
                f"{where} nchannels={a.nchannels}: the {rt.name} runtime allows "
                f"1..{rt.max_channels}"
            )
        if a.ngpus < 1 or a.nchunksperloop < 1:
            self.fail(f"{where} ngpus and nchunksperloop must be positive")
        elif rt.colls.get(a.coll) in _PER_RANK_COLLS and a.nchunksperloop % a.ngpus:
            self.fail(
                f"{where} nchunksperloop={a.nchunksperloop} is not a multiple of ngpus={a.ngpus}"
            )
        if rt.executor_format:
            for attribute, value in (
                ("outofplace", a.outofplace),
                ("minBytes", a.min_bytes),
                ("maxBytes", a.max_bytes),
            ):
                if value is None:
                    self.fail(f"{where} lacks {attribute}, which the {rt.name} runtime requires")
            if not a.inplace and not a.outofplace and a.outofplace is not None:
                self.report.warnings.append(f"{where}: inplace=0 and outofplace=0 serve no call")
        elif a.name is None:
            self.fail(f"{where} lacks name, which the legacy runtime requires")
        low, high = a.min_bytes or 0, a.max_bytes
        if low < 0 or (high is not None and (high < 0 or (high and low > high))):
            self.fail(f"{where} minBytes/maxBytes must be >= 0 with minBytes <= maxBytes")
        if not rt.executor_format and high == 0:
            self.fail(f"{where} maxBytes=0: the legacy runtime selects sizes below maxBytes: none")
        if len(a.gpus) != a.ngpus or sorted(g.id for g in a.gpus) != list(range(a.ngpus)):
            ids = sorted(g.id for g in a.gpus)
            self.fail(
                f"{where} ngpus={a.ngpus} but the <gpu> ids are {ids[:8]}{'...' * (len(ids) > 8)}"
            )

    def gpus(self) -> None:
        for gpu in self.a.gpus:
            self.gpu(gpu)

    def gpu(self, gpu: Gpu) -> None:
        a, rt = self.a, self.rt
        where = f"{a.source}:{gpu.line}: gpu {gpu.id}"
        sizes = _buffer_sizes(a, rt.colls[a.coll], gpu)
        declared = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
        if min(declared.values()) < 0:
            self.fail(f"{where}: i_chunks, o_chunks and s_chunks must be >= 0")
        kind = rt.colls[a.coll]
        if not rt.executor_format:
            multiplier = {
                "i": a.ngpus if kind is K.ALL_GATHER else 1,
                "o": a.ngpus if kind is K.REDUCE_SCATTER else 1,
            }
            for buf, mult in multiplier.items():
                if declared[buf] > 0 and declared[buf] * mult != a.nchunksperloop:
                    self.fail(
                        f"{where}: {buf}_chunks={declared[buf]} disagrees with nchunksperloop="
                        f"{a.nchunksperloop} (the legacy loader wants {buf}_chunks x {mult} == it)"
                    )
        for buf in ("i", "o"):
            if declared[buf] > sizes[buf]:
                self.report.warnings.append(
                    f"{where}: {buf}_chunks={declared[buf]} is larger than the {sizes[buf]} "
                    f"chunks the user's buffer has"
                )
        tbs = gpu.threadblocks
        if len(tbs) > rt.max_threadblocks:
            self.fail(
                f"{where}: {len(tbs)} threadblocks; the {rt.name} runtime allows "
                f"{rt.max_threadblocks}"
            )
        ids = [tb.id for tb in tbs]
        if sorted(ids) != list(range(len(tbs))):
            self.fail(
                f"{where}: threadblock ids must be 0..{len(tbs) - 1} without gaps or repeats, "
                f"got {sorted(ids)[:10]}"
            )
            return
        nodes = 1 + a.ngpus + len(tbs) + sum(len(tb.steps) for tb in tbs)
        if nodes > MAX_NODES_PER_RANK:
            self.fail(
                f"{where}: {nodes} XML elements for this rank (algo, every gpu, its tbs and "
                f"steps); the runtimes' tokenizer stops at {MAX_NODES_PER_RANK}"
            )
        connections: dict[tuple[str, int, int], int] = {}
        per_channel: dict[tuple[str, int], int] = defaultdict(int)
        by_id = {tb.id: tb for tb in tbs}
        for tb in tbs:
            self.threadblock(gpu, tb, by_id, declared, sizes)
            for direction, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer < 0:
                    continue
                key = (direction, peer, tb.chan)
                if key in connections:
                    self.fail(
                        f"{where}: tb {connections[key]} and tb {tb.id} both {direction} "
                        f"{'to' if direction == 'send' else 'from'} gpu {peer} on channel "
                        f"{tb.chan}; a connection serves one threadblock"
                    )
                connections[key] = tb.id
                per_channel[(direction, tb.chan)] += 1
        for (direction, chan), count in per_channel.items():
            if count > MAX_TBS_PER_CHANNEL:
                self.fail(
                    f"{where}: {count} threadblocks {direction} on channel {chan}; the runtimes "
                    f"allow {MAX_TBS_PER_CHANNEL} per channel: use more channels"
                )

    def threadblock(
        self,
        gpu: Gpu,
        tb: ThreadBlock,
        by_id: Mapping[int, ThreadBlock],
        declared: Mapping[str, int],
        sizes: Mapping[str, int],
    ) -> None:
        a, rt = self.a, self.rt
        where = f"{a.source}:{tb.line}: gpu {gpu.id} tb {tb.id}"
        for direction, peer in (("send", tb.send), ("recv", tb.recv)):
            if not -1 <= peer < a.ngpus or peer == gpu.id:
                self.fail(
                    f"{where}: {direction}={peer} must be -1 or another gpu in 0..{a.ngpus - 1}"
                )
        if not 0 <= tb.chan < a.nchannels:
            self.fail(f"{where}: chan={tb.chan} must be in 0..{a.nchannels - 1} (nchannels)")
        if len(tb.steps) > rt.max_steps:
            self.fail(
                f"{where}: {len(tb.steps)} steps; the {rt.name} runtime allows {rt.max_steps} "
                "per threadblock"
            )
        pending_nops: list[Step] = []
        for step in tb.steps:
            self.step(gpu, tb, step, by_id, declared, sizes)
            if step.type == "nop":
                pending_nops.append(step)
            elif step.type in STEP_TYPES:
                if pending_nops and step.depid < 0:
                    self.fail(
                        f"{a.source}:{step.line}: {_ref(gpu, tb, step)}: follows nop dependencies "
                        "but has none itself; the loaders reject such a chain"
                    )
                pending_nops = []
        if pending_nops:
            self.report.warnings.append(f"{where}: trailing nops are dropped by the loaders")
        self.reduction_fusion(gpu, tb)

    def step(
        self,
        gpu: Gpu,
        tb: ThreadBlock,
        step: Step,
        by_id: Mapping[int, ThreadBlock],
        declared: Mapping[str, int],
        sizes: Mapping[str, int],
    ) -> None:
        where = f"{self.a.source}:{step.line}: {_ref(gpu, tb, step)}"
        if step.type not in STEP_TYPES:
            self.fail(f"{where}: unknown type; the runtimes run {', '.join(STEP_TYPES)}")
            return
        if step.s != step.index:
            self.fail(
                f"{where}: s={step.s}, but the runtimes number steps by position ({step.index})"
            )
        if step.srcbuf not in BUFFERS or step.dstbuf not in BUFFERS:
            self.fail(f"{where}: srcbuf and dstbuf must be i, o or s (even for nop)")
            return
        if step.hasdep not in (0, 1):
            self.fail(f"{where}: hasdep={step.hasdep} must be 0 or 1")
        self.dependency(gpu, tb, step, by_id, where)
        kind = step.kind
        if step.type == "nop":
            return
        if not 1 <= step.cnt <= MAX_COUNT:
            self.fail(f"{where}: cnt={step.cnt} must be in 1..{MAX_COUNT}")
        if kind.send and tb.send < 0:
            self.fail(f"{where}: sends, but the threadblock has no send peer")
        if kind.recv and tb.recv < 0:
            self.fail(f"{where}: receives, but the threadblock has no receive peer")
        uses = (
            ("src", step.srcbuf, step.srcoff, kind.reads_src),
            ("dst", step.dstbuf, step.dstoff, kind.writes_dst),
        )
        for field_name, buf, offset, used in uses:
            if field_name in kind.checked and not -1 <= offset < declared[buf]:
                self.fail(
                    f"{where}: {field_name}off={offset} is outside the declared {buf}_chunks="
                    f"{declared[buf]}; the loader rejects it"
                )
            elif used and not (offset >= 0 and offset + step.cnt <= sizes[buf]):
                self.fail(
                    f"{where}: {buf}[{offset}..{offset + step.cnt - 1}] is outside the "
                    f"{sizes[buf]}-chunk {_BUFFER_NAMES[buf]} buffer"
                )

    def dependency(
        self, gpu: Gpu, tb: ThreadBlock, step: Step, by_id: Mapping[int, ThreadBlock], where: str
    ) -> None:
        if step.depid < 0:
            if step.deps != -1 or step.depid != -1:
                self.fail(f"{where}: without a dependency write depid=-1 deps=-1")
            if step.type == "nop":
                self.fail(
                    f"{where}: a nop without a dependency shifts the runtime's step counter, "
                    "so later deps point at the wrong step"
                )
            return
        if step.depid > MAX_DEPID:
            self.fail(
                f"{where}: depid={step.depid} does not fit the runtimes' int8 (max {MAX_DEPID})"
            )
            return
        target = by_id.get(step.depid)
        if target is None:
            self.fail(
                f"{where}: depid={step.depid} names no threadblock of gpu {gpu.id} (waits forever)"
            )
            return
        if target.id == tb.id:
            if step.deps >= step.index:
                self.fail(
                    f"{where}: depends on a later step of its own threadblock (waits forever)"
                )
            else:
                self.report.warnings.append(f"{where}: depends on its own threadblock (redundant)")
            return
        if not 0 <= step.deps < len(target.steps):
            self.fail(f"{where}: deps={step.deps} is not a step of gpu {gpu.id} tb {target.id}")
            return
        awaited = target.steps[step.deps]
        if awaited.type == "nop" or not awaited.hasdep:
            self.fail(
                f"{where}: waits for {_ref(gpu, target, awaited)}, which never signals "
                "(needs hasdep=1 and not a nop)"
            )

    def reduction_fusion(self, gpu: Gpu, tb: ThreadBlock) -> None:
        """Consecutive ``re`` into one slot run as one fused reduction (legacy loader rule)."""
        group: list[Step] = []
        reductions = 0
        for step in tb.steps:
            continues = (
                step.type == "re"
                and group
                and step.depid < 0
                and (group[-1].dstbuf, group[-1].dstoff, group[-1].srcbuf)
                == (step.dstbuf, step.dstoff, step.srcbuf)
                and not group[-1].hasdep
                and reductions != 16
            )
            if continues:
                group.append(step)
            else:
                self.fused_group(gpu, tb, group)
                group = [step] if step.type == "re" else []
            reductions += step.type == "re"
            if step.type not in ("re", "nop"):
                self.fused_group(gpu, tb, group)
                group = []
        self.fused_group(gpu, tb, group)

    def fused_group(self, gpu: Gpu, tb: ThreadBlock, group: Sequence[Step]) -> None:
        if len(group) < 2:
            return
        first = _ref(gpu, tb, group[0])
        if len({s.cnt for s in group}) > 1:
            self.fail(
                f"{first}: the runtimes fuse {len(group)} consecutive re steps into one with "
                "the last one's cnt, but their cnts differ"
            )
        if len(group) > 16:
            self.fail(f"{first}: {len(group)} fused re steps; the runtimes hold at most 16 sources")


_BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}
_PER_RANK_COLLS = (K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_TO_ALL, K.GATHER, K.SCATTER)


def _buffer_sizes(algorithm: Algorithm, kind: CollectiveKind | None, gpu: Gpu) -> dict[str, int]:
    """Chunks the user's buffers really have (input, output) and the declared scratch."""
    n, per_rank = algorithm.nchunksperloop, algorithm.nchunksperloop // max(1, algorithm.ngpus)
    small_input = kind in (K.ALL_GATHER, K.GATHER)
    small_output = kind in (K.REDUCE_SCATTER, K.SCATTER)
    return {
        "i": per_rank if small_input else n,
        "o": per_rank if small_output else n,
        "s": gpu.s_chunks,
    }


def _check_matching(algorithm: Algorithm, report: CheckReport) -> bool:
    """Per connection the k-th send pairs with the k-th receive; their cnt must agree."""
    ends: dict[tuple[int, int, int], dict[str, list[StepRef | int]]] = defaultdict(
        lambda: {"send": [], "recv": []}
    )
    counts: dict[StepRef, int] = {}
    for gpu in algorithm.gpus:
        for tb in gpu.threadblocks:
            for step in tb.steps:
                ref = _ref(gpu, tb, step)
                counts[ref] = step.cnt
                if step.kind.send:
                    ends[(gpu.id, tb.send, tb.chan)]["send"].append(ref)
                if step.kind.recv:
                    ends[(tb.recv, gpu.id, tb.chan)]["recv"].append(ref)
    before = report.error_count
    for (src, dst, chan), sides in sorted(ends.items()):
        sends, recvs = sides["send"], sides["recv"]
        for send, recv in zip(sends, recvs, strict=False):
            assert isinstance(send, StepRef) and isinstance(recv, StepRef)
            if counts[send] != counts[recv]:
                report.fail(
                    f"{send} sends cnt={counts[send]} but the matching {recv} receives "
                    f"cnt={counts[recv]}"
                )
        for extra in sends[len(recvs) :]:
            report.fail(f"{extra} sends to gpu {dst} on channel {chan}, but no receive matches it")
        for extra in recvs[len(sends) :]:
            report.fail(f"{extra} receives from gpu {src} on channel {chan}, but nothing is sent")
    return report.error_count == before


def in_place_slot(
    kind: CollectiveKind | None, nchunks: int, ngpus: int, gpu: int, buf: str, offset: int
) -> tuple[str, int]:
    """The memory a buffer slot is in an in-place call, as the runtimes select them.

    All-Gather and Gather: ``i[c]`` is ``o[gpu*N/R + c]``; Reduce-Scatter and
    Scatter: ``o[c]`` is ``i[gpu*N/R + c]``; the others: ``o[c]`` is ``i[c]``.
    Scratch and unknown collectives alias nothing.
    """
    if buf == "s" or kind is None:
        return buf, offset
    per_rank = nchunks // ngpus
    if kind in (K.ALL_GATHER, K.GATHER):
        return ("o", gpu * per_rank + offset) if buf == "i" else (buf, offset)
    if kind in (K.REDUCE_SCATTER, K.SCATTER):
        return ("i", gpu * per_rank + offset) if buf == "o" else (buf, offset)
    return ("i", offset) if buf == "o" else (buf, offset)


def _alias(
    algorithm: Algorithm,
    kind: CollectiveKind | None,
    inplace: bool,
    gpu: int,
    buf: str,
    offset: int,
) -> tuple[str, int]:
    if not inplace:
        return buf, offset
    return in_place_slot(kind, algorithm.nchunksperloop, algorithm.ngpus, gpu, buf, offset)


# ================================================================ execution
Value = tuple[int, bool] | None
"""A slot's content: (bit set over rank*nchunksperloop + input chunk, some bit counted
twice), or None for uninitialised data."""


def _combine(a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    return a[0] | b[0], a[1] or b[1] or bool(a[0] & b[0])


def _merge(
    a: tuple[Value, frozenset[int]], b: tuple[Value, frozenset[int]]
) -> tuple[Value, frozenset[int]]:
    """Reduce two slot contents: values add up, their provenances join."""
    return _combine(a[0], b[0]), a[1] | b[1]


@dataclass(frozen=True)
class Delivery:
    """One chunk of one message as the receiving step took it (the event trace).

    ``sources`` are the earlier deliveries to ``src`` whose data the chunk carries
    (through local copies and reductions), i.e. what the transfer depends on.
    """

    index: int
    src: int
    dst: int
    channel: int
    sender: StepRef
    receiver: StepRef
    value: Value
    reduces: bool
    sources: frozenset[int]


@dataclass
class Execution:
    """What running an algorithm produced (see :func:`execute`)."""

    buffering: str
    deadlock: str | None = None
    races: list[str] = field(default_factory=list)
    input_writers: list[StepRef] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    final: dict[int, dict[tuple[str, int], tuple[Value, StepRef | None]]] = field(
        default_factory=dict
    )

    def slot(self, gpu: int, key: tuple[str, int]) -> tuple[Value, StepRef | None]:
        return self.final.get(gpu, {}).get(key, (None, None))


@dataclass
class _Action:
    """A step the interpreter executes (nops fold their dependency into the next one)."""

    step: Step
    ref: StepRef
    deps: tuple[tuple[int, int], ...]  # (global threadblock, position that must have signalled)
    recv_from: tuple[int, int, int] | None
    send_to: tuple[int, int, int] | None
    calls: int


@dataclass
class _Access:
    clock: int
    thread: int
    ref: StepRef


def execute(
    algorithm: Algorithm,
    *,
    inplace: bool,
    max_allowed_count: int | None = None,
    track_data: bool = False,
) -> Execution:
    """Run a structurally valid algorithm with finite connection buffers.

    With ``max_allowed_count`` None every step is one call; otherwise a step of
    ``cnt`` chunks is ``ceil(cnt / max_allowed_count)`` calls (large messages).
    ``track_data`` adds the symbolic buffer contents, the event trace and the race
    check (which uses only the orderings every buffering guarantees).
    """
    return _Machine(algorithm, inplace, max_allowed_count, track_data).run()


class _Machine:
    """All threadblocks of all GPUs, run until every one finishes or none can move."""

    def __init__(
        self, algorithm: Algorithm, inplace: bool, max_allowed_count: int | None, track: bool
    ) -> None:
        self.a, self.inplace, self.track = algorithm, inplace, track
        self.kind = _KNOWN_COLLS.get(algorithm.coll)
        self.capacity = FIFO_CALLS[algorithm.proto]
        calls = (
            "one call per step"
            if max_allowed_count is None
            else (f"steps split into calls of {max_allowed_count} chunk(s)")
        )
        self.result = Execution(f"{self.capacity}-call connection buffers and {calls}")
        threads = [
            (gpu, tb)
            for gpu in sorted(algorithm.gpus, key=lambda g: g.id)
            for tb in gpu.threadblocks
        ]
        self.threads = threads
        index = {(gpu.id, tb.id): g for g, (gpu, tb) in enumerate(threads)}
        self.programs = [self._program(gpu, tb, index, max_allowed_count) for gpu, tb in threads]
        count = len(threads)
        self.sender: dict[tuple[int, int, int], int] = {}
        self.receiver: dict[tuple[int, int, int], int] = {}
        for g, (gpu, tb) in enumerate(threads):
            if tb.send >= 0:
                self.sender[(gpu.id, tb.send, tb.chan)] = g
            if tb.recv >= 0:
                self.receiver[(tb.recv, gpu.id, tb.chan)] = g
        self.fifo: dict[tuple[int, int, int], deque[Any]] = defaultdict(deque)
        self.pc = [0] * count
        self.calls_done = [0] * count
        self.deps_met = [False] * count
        self.signalled = [-1] * count
        self.flag_waiters: dict[int, set[int]] = defaultdict(set)
        self.blocked: dict[int, tuple[str, Any]] = {}
        if track:
            self.clock = np.zeros((count, count), dtype=np.int64)
            self.signal_clock: dict[tuple[int, int], np.ndarray] = {}
            self.slots: dict[
                int, dict[tuple[str, int], tuple[Value, frozenset[int], StepRef | None]]
            ] = {gpu.id: self._initial_slots(gpu.id) for gpu in algorithm.gpus}
            self.writes: dict[tuple[int, tuple[str, int]], _Access] = {}
            self.reads: dict[tuple[int, tuple[str, int]], dict[int, _Access]] = defaultdict(dict)
            self.reported: set[tuple[StepRef, StepRef]] = set()

    # ------------------------------------------------------------ set-up
    def _program(
        self,
        gpu: Gpu,
        tb: ThreadBlock,
        index: Mapping[tuple[int, int], int],
        max_allowed_count: int | None,
    ) -> list[_Action]:
        actions, pending = [], []
        for step in tb.steps:
            if step.depid >= 0 and step.depid != tb.id:
                pending.append((index[(gpu.id, step.depid)], step.deps))
            if step.type == "nop":
                continue
            kind = step.kind
            split = 1 if max_allowed_count is None else math.ceil(step.cnt / max_allowed_count)
            actions.append(
                _Action(
                    step,
                    _ref(gpu, tb, step),
                    tuple(pending),
                    (tb.recv, gpu.id, tb.chan) if kind.recv else None,
                    (gpu.id, tb.send, tb.chan) if kind.send else None,
                    split if kind.send or kind.recv else 1,
                )
            )
            pending = []
        return actions

    def _slot(self, gpu: int, buf: str, offset: int) -> tuple[str, int]:
        return _alias(self.a, self.kind, self.inplace, gpu, buf, offset)

    def _initial_slots(
        self, gpu: int
    ) -> dict[tuple[str, int], tuple[Value, frozenset[int], StepRef | None]]:
        n = self.a.nchunksperloop
        size = _buffer_sizes(self.a, self.kind, self.a.gpu(gpu))["i"]
        return {
            self._slot(gpu, "i", k): ((1 << (gpu * n + k), False), frozenset(), None)
            for k in range(size)
        }

    # ------------------------------------------------------------ running
    def run(self) -> Execution:
        ready = deque(range(len(self.threads)))
        queued = [True] * len(self.threads)
        while ready:
            g = ready.popleft()
            queued[g] = False
            for woken in self._advance(g):
                if not queued[woken]:
                    queued[woken] = True
                    ready.append(woken)
        if self.blocked:
            self.result.deadlock = self._cycle()
        elif self.track:
            self.result.final = {
                gpu: {key: (value, writer) for key, (value, _, writer) in slots.items()}
                for gpu, slots in self.slots.items()
            }
        return self.result

    def _advance(self, g: int) -> list[int]:
        """Run threadblock ``g`` until it finishes or blocks; return whom it may have unblocked."""
        woken: list[int] = []
        program = self.programs[g]
        while self.pc[g] < len(program):
            action = program[self.pc[g]]
            if not self.deps_met[g]:
                for target, position in action.deps:
                    if self.signalled[target] < position:
                        self.blocked[g] = ("dep", (target, position))
                        self.flag_waiters[target].add(g)
                        return woken
                if self.track:
                    for target, position in action.deps:
                        np.maximum(
                            self.clock[g], self.signal_clock[(target, position)], out=self.clock[g]
                        )
                    self.clock[g, g] += 1
                self.deps_met[g] = True
            while self.calls_done[g] < action.calls:
                if action.recv_from is not None and not self.fifo[action.recv_from]:
                    self.blocked[g] = ("message", action.recv_from)
                    return woken
                if action.send_to is not None and len(self.fifo[action.send_to]) >= self.capacity:
                    self.blocked[g] = ("room", action.send_to)
                    return woken
                self._call(g, action)
                self.calls_done[g] += 1
                if action.recv_from is not None:
                    woken.append(self.sender[action.recv_from])
                if action.send_to is not None:
                    woken.append(self.receiver[action.send_to])
            if action.step.hasdep:
                self.signalled[g] = action.step.index
                if self.track:
                    self.signal_clock[(g, action.step.index)] = self.clock[g].copy()
                woken.extend(self.flag_waiters.pop(g, ()))
            self.pc[g] += 1
            self.calls_done[g] = 0
            self.deps_met[g] = False
        self.blocked.pop(g, None)
        return woken

    def _call(self, g: int, action: _Action) -> None:
        """One primitive call: take a message, compute, pass one on."""
        incoming = self.fifo[action.recv_from].popleft() if action.recv_from is not None else None
        payload = self._compute(g, action, incoming) if self.track else None
        if action.send_to is not None:
            self.fifo[action.send_to].append(
                (payload, self.clock[g].copy() if self.track else None, action.ref)
            )

    def _compute(
        self, g: int, action: _Action, incoming: Any
    ) -> list[tuple[Value, frozenset[int]]]:
        """The step's effect on the symbolic buffers; returns what it forwards."""
        step, kind, gpu = action.step, action.step.kind, action.ref.gpu
        received: list[tuple[Value, frozenset[int]]] = []
        if incoming is not None:
            data, clock, sender = incoming
            np.maximum(self.clock[g], clock, out=self.clock[g])
            for value, sources in data:
                index = len(self.result.deliveries)
                self.result.deliveries.append(
                    Delivery(
                        index,
                        sender.gpu,
                        gpu,
                        action.recv_from[2] if action.recv_from else 0,
                        sender,
                        action.ref,
                        value,
                        kind.reduces,
                        sources,
                    )
                )
                received.append((value, frozenset((index,))))
        out: list[tuple[Value, frozenset[int]]] = []
        for k in range(step.cnt):
            src = self._slot(gpu, step.srcbuf, step.srcoff + k)
            dst = self._slot(gpu, step.dstbuf, step.dstoff + k)
            local = self._read(g, action.ref, src) if kind.reads_src else (None, frozenset())
            if step.type == "re":
                result = _merge(self._read(g, action.ref, dst), local)
            elif kind.reduces:
                result = _merge(received[k], local)
            else:
                result = received[k] if kind.recv else local
            if kind.writes_dst:
                self._write(g, action.ref, dst, result)
            out.append(result)
        return out

    def _read(self, g: int, ref: StepRef, key: tuple[str, int]) -> tuple[Value, frozenset[int]]:
        slot = (ref.gpu, key)
        last = self.writes.get(slot)
        if last is not None and last.thread != g:
            self._race(g, ref, last, key, "reads", "writes")
        self.reads[slot][g] = _Access(int(self.clock[g, g]), g, ref)
        value, sources, _ = self.slots[ref.gpu].get(key, (None, frozenset(), None))
        return value, sources

    def _write(
        self, g: int, ref: StepRef, key: tuple[str, int], data: tuple[Value, frozenset[int]]
    ) -> None:
        slot = (ref.gpu, key)
        last = self.writes.get(slot)
        if last is not None and last.thread != g:
            self._race(g, ref, last, key, "writes", "writes")
        for reader in self.reads.pop(slot, {}).values():
            if reader.thread != g:
                self._race(g, ref, reader, key, "writes", "reads")
        self.writes[slot] = _Access(int(self.clock[g, g]), g, ref)
        self.slots[ref.gpu][key] = (data[0], data[1], ref)
        if key[0] == "i" and not self.inplace and ref not in self.result.input_writers:
            self.result.input_writers.append(ref)

    def _race(
        self, g: int, ref: StepRef, other: _Access, key: tuple[str, int], did: str, they: str
    ) -> None:
        if self.clock[g, other.thread] >= other.clock or (other.ref, ref) in self.reported:
            return
        self.reported.add((other.ref, ref))
        self.result.races.append(
            f"race on gpu {ref.gpu} {key[0]}[{key[1]}]: {ref} {did} it while {other.ref} "
            f"{they} it, and no dependency, message or program order puts one first"
        )

    # ------------------------------------------------------------ deadlock
    def _cycle(self) -> str:
        """The cycle of waits that keeps the blocked threadblocks from moving."""

        def waits_for(g: int) -> tuple[int, str]:
            reason, detail = self.blocked[g]
            if reason == "dep":
                target, position = detail
                gpu, tb = self.threads[target]
                return target, f"waits for gpu {gpu.id} tb {tb.id} to finish step {position}"
            src, dst, chan = detail
            if reason == "message":
                return self.sender[detail], f"waits for a message from gpu {src} on channel {chan}"
            return self.receiver[detail], (
                f"waits for room to send to gpu {dst} on channel {chan} "
                f"({self.capacity} calls not yet received)"
            )

        g = min(self.blocked)
        seen: list[int] = []
        while g in self.blocked and g not in seen:
            seen.append(g)
            g = waits_for(g)[0]
        cycle = seen[seen.index(g) :] if g in seen else seen
        parts = []
        for member in cycle:
            action = self.programs[member][self.pc[member]]
            parts.append(f"{action.ref} {waits_for(member)[1]}")
        return " -> ".join(parts)


# ================================================================ postconditions
def _expected(
    kind: CollectiveKind, gpu: int, root: int, n: int, ngpus: int
) -> Iterator[tuple[int, set[tuple[int, int]]]]:
    """(output chunk, the (rank, input chunk) pairs it must sum) on ``gpu``."""
    per_rank = n // ngpus
    if kind is K.ALL_REDUCE or (kind is K.REDUCE and gpu == root):
        for c in range(n):
            yield c, {(j, c) for j in range(ngpus)}
    elif kind is K.ALL_GATHER:
        for j in range(ngpus):
            for k in range(per_rank):
                yield j * per_rank + k, {(j, k)}
    elif kind is K.REDUCE_SCATTER:
        for k in range(per_rank):
            yield k, {(j, gpu * per_rank + k) for j in range(ngpus)}
    elif kind is K.ALL_TO_ALL:
        for j in range(ngpus):
            for k in range(per_rank):
                yield j * per_rank + k, {(j, gpu * per_rank + k)}
    elif kind is K.BROADCAST:
        for c in range(n):
            yield c, {(root, c)}
    elif kind is K.GATHER and gpu == root:
        for j in range(ngpus):
            for k in range(per_rank):
                yield j * per_rank + k, {(j, k)}
    elif kind is K.SCATTER:
        for k in range(per_rank):
            yield k, {(root, gpu * per_rank + k)}


def _check_postcondition(
    algorithm: Algorithm,
    kind: CollectiveKind,
    inplace: bool,
    execution: Execution,
    root: int | None,
    mode: str,
    report: CheckReport,
) -> None:
    """Compare every output slot with the collective's postcondition (SPEC.md section 6).

    A broadcast or reduce file does not say its root: any root that makes the
    result right is accepted (and recorded in ``report.root``) unless ``root`` is given.
    """
    roots = [root] if root is not None else list(range(algorithm.ngpus)) if kind.rooted else [0]
    fewest: list[str] | None = None
    for candidate in roots:
        problems = list(_wrong_outputs(algorithm, kind, inplace, execution, candidate, mode))
        if not problems:
            report.root = candidate if kind.rooted else None
            suffix = f" with root {candidate}" if kind.rooted else ""
            report.checked.append(f"{mode}: race-free, postcondition holds{suffix}")
            return
        if fewest is None or len(problems) < len(fewest):
            fewest = problems
    for problem in fewest or []:
        report.fail(problem)


def _wrong_outputs(
    algorithm: Algorithm,
    kind: CollectiveKind,
    inplace: bool,
    execution: Execution,
    root: int,
    mode: str,
) -> Iterator[str]:
    n, ngpus = algorithm.nchunksperloop, algorithm.ngpus
    for gpu in range(ngpus):
        for chunk, wanted in _expected(kind, gpu, root, n, ngpus):
            value, writer = execution.slot(gpu, _alias(algorithm, kind, inplace, gpu, "o", chunk))
            bits = sum(1 << (j * n + c) for j, c in wanted)
            if value != (bits, False):
                by = f"last written by {writer}" if writer else "never written"
                yield (
                    f"{mode}: gpu {gpu} o[{chunk}] should hold {_describe((bits, False), n)} "
                    f"but holds {_describe(value, n, bits)} ({by})"
                )


def _describe(value: Value, n: int, wanted: int = 0) -> str:
    if value is None:
        return "uninitialised data"
    bits, twice = value
    terms = [f"in_{b // n}[{b % n}]" for b in range(bits.bit_length()) if bits >> b & 1]
    text = " + ".join(terms) if len(terms) <= 4 else f"a sum of {len(terms)} inputs"
    missing = wanted & ~bits
    if wanted and missing and len(terms) > 4:
        gone = [f"in_{b // n}[{b % n}]" for b in range(missing.bit_length()) if missing >> b & 1]
        text += f" (missing {', '.join(gone[:4])}{'...' if len(gone) > 4 else ''})"
    return text + (" with a contribution counted twice" if twice else "")


# ================================================================ import
def to_schedule(
    algorithm: Algorithm,
    *,
    topology: Topology | None = None,
    chunk_bytes: int = 2**20,
    root: int | None = None,
) -> Schedule:
    """The algorithm as a Schedule, by default on a fully connected topology of its GPUs.

    Every chunk a receive step takes becomes one transfer over the direct link
    between the two GPUs; it depends on the transfers whose data the sender's
    step read. A transfer is a reduction when it adds contributions the
    receiver's copy of that chunk lacks, and a copy when it replaces them.
    Times come from our link model: each transfer starts as soon as its link is
    free and its dependencies have arrived, in the order the algorithm runs.
    Raises :class:`TacosError` when the algorithm does not check out, or moves
    data the Schedule IR cannot name (it keeps one copy of each chunk per NPU).
    """
    report = check(algorithm, root=root)
    if not report.ok:
        raise TacosError(f"{algorithm.source}: cannot import: {report.errors[0]}")
    runtime = RUNTIMES[detect_runtime(algorithm)]
    kind = runtime.colls[algorithm.coll]
    if kind is None:
        raise TacosError(f"{algorithm.source}: coll={algorithm.coll!r} names no collective")
    n, ngpus = algorithm.nchunksperloop, algorithm.ngpus
    whole_buffer = kind in (K.BROADCAST, K.REDUCE)
    spec = Collective(
        kind, tuple(range(ngpus)), n if whole_buffer else n // ngpus, chunk_bytes, report.root
    )
    if topology is None:
        topology = Topology.fully_connected(ngpus)
    elif topology.num_npus < ngpus:
        raise TacosError(f"{algorithm.source}: {ngpus} GPUs do not fit {topology.describe()}")
    execution = execute(algorithm, inplace=_modes(algorithm, runtime)[0], track_data=True)
    return _ScheduleBuilder(spec, topology, n).build(execution.deliveries, algorithm.source)


def import_schedule(
    source: str | Path,
    *,
    collective: CollectiveKind | None = None,
    topology: Topology | None = None,
) -> Schedule:
    """Read an MSCCL XML file as a Schedule (the schedule importers' interface).

    ``collective``, when given, must be what the file's ``coll`` says.
    """
    algorithm = load(source)
    schedule = to_schedule(algorithm, topology=topology)
    if collective is not None and collective is not schedule.collective.kind:
        raise TacosError(
            f"{algorithm.source}: coll={algorithm.coll!r} means {schedule.collective.kind}, "
            f"not {collective}"
        )
    return schedule


class _ScheduleBuilder:
    """Deliveries -> transfers with IR ops, dependencies and link-model times."""

    def __init__(self, spec: Collective, topology: Topology, n: int) -> None:
        self.spec, self.topology, self.n = spec, topology, n
        self.links = {(link.src, link.dst): i for i, link in enumerate(topology.links)}

    def chunk(self, value: Value, where: StepRef, source: str) -> int:
        """Which collective chunk a symbolic value is (a piece of)."""
        spec, n = self.spec, self.n
        bits = 0 if value is None or value[1] else value[0]
        pairs = [(b // n, b % n) for b in range(bits.bit_length()) if bits >> b & 1]
        if (
            not pairs
            or len({c for _, c in pairs}) != 1
            or (len(pairs) > 1 and not spec.kind.reduces)
        ):
            raise TacosError(
                f"{source}: {where} moves {_describe(value, n)}, which is no chunk of the "
                f"{spec.kind}"
            )
        rank, c = pairs[0]
        if spec.kind in (K.ALL_GATHER, K.GATHER):
            return rank * spec.chunks_per_rank + c
        if spec.kind is K.ALL_TO_ALL:
            return rank * n + c
        return c

    def build(self, deliveries: Sequence[Delivery], source: str) -> Schedule:
        spec = self.spec
        held = {(node, c): bits for node, c, bits in spec.initial_data()}
        link_free: dict[int, float] = defaultdict(float)
        transfers: list[Transfer] = []
        for d in deliveries:
            chunk = self.chunk(d.value, d.receiver, source)
            bits = self._contributions(d.value[0] if d.value else 0)
            here = held.get((d.dst, chunk), 0)
            if spec.kind.reduces and not bits & here:
                op, held[(d.dst, chunk)] = Op.REDUCE, here | bits
            elif bits & here == here:
                op, held[(d.dst, chunk)] = Op.COPY, bits
            else:
                raise TacosError(
                    f"{source}: {d.receiver} overwrites part of what gpu {d.dst} holds of chunk "
                    f"{chunk}; the Schedule IR keeps one copy per chunk and cannot express it"
                )
            link = self.links.get((d.src, d.dst))
            if link is None:
                raise TacosError(
                    f"{source}: {d.sender} sends to gpu {d.dst}, but {self.topology.describe()} "
                    f"has no link {d.src}->{d.dst}"
                )
            start = max([link_free[link], *(transfers[s].end for s in d.sources)])
            end = start + self.topology.links[link].transfer_time_us(spec.chunk_bytes)
            link_free[link] = end
            transfers.append(Transfer(chunk, d.src, d.dst, link, start, end, op, tuple(d.sources)))
        order = sorted(range(len(transfers)), key=lambda i: (transfers[i].start, i))
        position = {old: new for new, old in enumerate(order)}
        ordered = [
            replace(transfers[i], deps=tuple(sorted(position[d] for d in transfers[i].deps)))
            for i in order
        ]
        return Schedule(self.topology, spec, ordered, {"imported_from": source, "format": "msccl"})

    def _contributions(self, bits: int) -> int:
        """The value as a bit set over rank positions, as the IR counts contributions."""
        return sum(1 << (b // self.n) for b in range(bits.bit_length()) if bits >> b & 1)
