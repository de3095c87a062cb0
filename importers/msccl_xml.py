"""MSCCL algorithm XML as the GPU runtimes read it: their facts, the model, the reader.

Owns what the runtimes that execute these files (the legacy NCCL-MSCCL
interpreter, the MSCCL executor and RCCL) accept and mean: their limits and
step semantics (``RUNTIMES``, ``STEP_TYPES``, ...), the model of an
``<algo>`` (:class:`Algorithm` down to :class:`Step`) and :func:`load`, which
reads a file without trusting it. It is the base the checker, the symbolic
execution and the exporter all build on, so it depends on none of them.

:func:`load` also lints the text the way the runtimes' hand-written tokenizers
read it: what they reject although a standard XML parser accepts it (an
``<?xml?>`` declaration, tabs, attributes over several lines, single quotes,
entities, non-decimal integers) is recorded on the algorithm for the checker
to report.

Buffers and postconditions (what every runtime assumes; the exporter lays chunks
out this way and the checker tests results against it). With ``N`` =
``nchunksperloop`` and ``R`` = ``ngpus``, chunk ``c`` of a buffer is its ``c``-th
of ``N`` equal parts; ``in_j`` is rank ``j``'s input, ``o`` the output of rank ``r``::

    coll             input  output  in place                  every rank r ends with
    allreduce        N      N       o is i                    o[c] = sum_j in_j[c]
    allgather        N/R    N       i[c] is o[r*N/R + c]      o[j*N/R + c] = in_j[c]
    reduce_scatter   N      N/R     o[c] is i[r*N/R + c]      o[c] = sum_j in_j[r*N/R + c]
    alltoall         N      N       o is i                    o[j*N/R + c] = in_j[r*N/R + c]
    broadcast        N      N       o is i                    o[c] = in_root[c]
    reduce           N      N       o is i                    (root only) o[c] = sum_j in_j[c]

Every contribution is summed exactly once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lxml import etree

from tacos.collective import CollectiveKind
from tacos.errors import TacosError
from tacos.limits import MAX_BUFFER_CHUNKS, MAX_NODES

K = CollectiveKind


# ================================================================ runtime facts
@dataclass(frozen=True)
class Runtime:
    """What one runtime's loader accepts (as read from that runtime's loader source).

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
    reject is left to :func:`~tacos.importers.msccl_check.check`.
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
            nchunksperloop=self.count(root, "nchunksperloop", MAX_BUFFER_CHUNKS),
            ngpus=self.count(root, "ngpus", MAX_NODES),
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
            self.count(node, "i_chunks", MAX_BUFFER_CHUNKS),
            self.count(node, "o_chunks", MAX_BUFFER_CHUNKS),
            self.count(node, "s_chunks", MAX_BUFFER_CHUNKS),
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

    def count(self, node: Any, name: str, limit: int) -> int:
        """An integer that sizes something the checker allocates: refused above ``limit``."""
        value = self.integer(node, name)
        if value > limit:
            raise TacosError(
                f"{self.where}:{node.sourceline}: {name}={value} on <{node.tag}> is more than "
                f"tacos can check ({limit}); the runtimes run far smaller programs"
            )
        return value

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
