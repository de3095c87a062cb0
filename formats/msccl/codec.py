"""MSCCL algorithm XML on the wire: the writer (:func:`to_xml`) and the safe reader (:func:`load`).

:func:`to_xml` writes a program the way the runtimes' hand-written parsers
read it: no ``<?xml?>`` declaration, one element per line, attributes in
double quotes separated by single spaces.

:func:`load` reads a file without trusting it and lints the text the way the
runtimes' hand-written tokenizers read it: what they reject although a
standard XML parser accepts it (an ``<?xml?>`` declaration, tabs, attributes
over several lines, single quotes, entities, non-decimal integers) is recorded
on the algorithm for the checker to report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lxml import etree

from tacos.errors import TacosError
from tacos.formats.msccl.model import Algorithm, Gpu, Step, ThreadBlock
from tacos.formats.msccl.runtime import MAX_ATTRIBUTES, MAX_VALUE_CHARS
from tacos.inputfile import require_file
from tacos.limits import MAX_BUFFER_CHUNKS, MAX_NODES


def load(source: str | Path | bytes, name: str | None = None) -> Algorithm:
    """Read an MSCCL XML file (a path) or document (bytes) without trusting it.

    A DOCTYPE (the only place entities can be declared) is refused before
    parsing, and the parser would neither resolve entities nor use the network.
    Raises :class:`TacosError` (naming the file and line) when the text is not
    XML or lacks what every runtime needs to read it; what only some runtimes
    reject is left to :func:`~tacos.formats.msccl.check.check`.
    """
    if isinstance(source, bytes):
        data, where = source, name or "<xml>"
    else:
        where = name or str(source)
        require_file(source, "MSCCL XML")
        try:
            data = Path(source).read_bytes()
        except OSError as err:
            raise TacosError(f"{where}: cannot read MSCCL XML: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte order mark first is read past
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


def to_xml(algorithm: Algorithm) -> bytes:
    """The program as the runtimes read it (lxml's output: one line per element).

    Optional attributes (``name``, and the executor format's ``outofplace``,
    ``minBytes``, ``maxBytes``) are written when the program has them.
    """
    algo = etree.Element("algo")
    attributes: dict[str, object] = {} if algorithm.name is None else {"name": algorithm.name}
    attributes |= {
        "proto": algorithm.proto,
        "nchannels": algorithm.nchannels,
        "nchunksperloop": algorithm.nchunksperloop,
        "ngpus": algorithm.ngpus,
        "coll": algorithm.coll,
        "inplace": algorithm.inplace,
    }
    optional = {
        "outofplace": algorithm.outofplace,
        "minBytes": algorithm.min_bytes,
        "maxBytes": algorithm.max_bytes,
    }
    _set(algo, attributes | {name: value for name, value in optional.items() if value is not None})
    for gpu in algorithm.gpus:
        gpu_element = etree.SubElement(algo, "gpu")
        _set(
            gpu_element,
            {
                "id": gpu.id,
                "i_chunks": gpu.i_chunks,
                "o_chunks": gpu.o_chunks,
                "s_chunks": gpu.s_chunks,
            },
        )
        for tb in gpu.threadblocks:
            tb_element = etree.SubElement(gpu_element, "tb")
            _set(tb_element, {"id": tb.id, "send": tb.send, "recv": tb.recv, "chan": tb.chan})
            for step in tb.steps:
                _set(etree.SubElement(tb_element, "step"), _step_attributes(step))
    return bytes(etree.tostring(algo, pretty_print=True))


def _step_attributes(step: Step) -> dict[str, object]:
    return {
        "s": step.s,
        "type": step.type,
        "srcbuf": step.srcbuf,
        "srcoff": step.srcoff,
        "dstbuf": step.dstbuf,
        "dstoff": step.dstoff,
        "cnt": step.cnt,
        "depid": step.depid,
        "deps": step.deps,
        "hasdep": step.hasdep,
    }


def _set(element: etree._Element, attributes: dict[str, object]) -> None:
    for name, value in attributes.items():
        element.set(name, str(value))


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
