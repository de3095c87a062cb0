"""Read and write Chakra execution-trace (ET) files, the per-rank input of ASTRA-sim.

An ET file is a stream of protobuf messages, each preceded by its length as a varint: one
:class:`GlobalMetadata` first, then :class:`Node` messages. ASTRA-sim consumes the first message
as GlobalMetadata without checking, so a file that starts with a Node silently loses that node;
this module refuses such files and never writes them.

Attribute values live in a oneof, and ASTRA-sim reads each attribute it knows from one specific
member (``comm_src`` from ``int32_val``, ``comm_size`` from ``int64_val`` ...); a value stored in
another member reads as 0 there, without a warning. :func:`attr` builds attributes with the member
ASTRA-sim reads, :func:`get_attr` reads any member, and :func:`attr_type_mismatches` finds the
attributes ASTRA-sim would misread.

The schema's message and enum classes are re-exported, so callers need this one import. The
length prefixes are coded here rather than with ``google.protobuf.internal``: that module is
private and changes between protobuf releases, and a varint is a few lines.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Final

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from tacos.errors import TacosError
from tacos.inputfile import require_file
from tacos.linkmodel import GIB, CostModel
from tacos.output import write_bytes_atomic
from tacos.proto.et_def_pb2 import (
    AttributeProto,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
)

__all__ = [
    "ASTRA_SIM_ATTRIBUTE_MEMBERS",
    "CHAKRA_VERSION",
    "CHUNK_ATTRIBUTE",
    "AttrValue",
    "AttributeProto",
    "ChakraFormatError",
    "CollectiveCommType",
    "GlobalMetadata",
    "Node",
    "NodeType",
    "TENANTS_ATTRIBUTE",
    "attr",
    "attr_type_mismatches",
    "decode_et",
    "decode_varint",
    "encode_et",
    "encode_varint",
    "get_attr",
    "read_et",
    "write_et",
]

CHAKRA_VERSION: Final = "0.0.4"
"""GlobalMetadata.version written by Chakra's converters (and found in ASTRA-sim's examples)."""
TENANTS_ATTRIBUTE: Final = "tacos_tenants"
"""How many tenants' collectives the traces hold together (a GlobalMetadata int64, written
only when more than one). ASTRA-sim ignores it; our reader refuses to read them as one."""
CHUNK_ATTRIBUTE: Final = "tacos_chunk"
"""Which collective chunk a send or receive moves (int64). ASTRA-sim ignores it; our writer
sets it so that our reader recovers the data each message carries without guessing."""

ASTRA_SIM_ATTRIBUTE_MEMBERS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Read by Chakra's ETFeederNode (the ASTRA-sim c459ab6 pin), member by member.
        "is_cpu_op": "bool_val",
        "num_ops": "int64_val",
        "tensor_size": "uint64_val",
        "comm_type": "int64_val",
        "comm_priority": "int32_val",
        "comm_size": "int64_val",
        "comm_src": "int32_val",
        "comm_dst": "int32_val",
        "comm_tag": "int32_val",
        "pg_name": "string_val",
        # Read by ASTRA-sim's Workload::issue_comm, which exits if another member is set.
        "involved_dim": "bool_list",
    }
)
"""Attribute name -> the AttributeProto oneof member ASTRA-sim reads it from."""

Scalar = bool | int | float | str | bytes
AttrValue = Scalar | Sequence[Scalar]
"""A Python attribute value: a scalar for ``*_val`` members, a sequence for ``*_list`` ones."""

# Python type each oneof member family holds, keyed by the member's prefix (int32_val -> int32).
_MEMBER_PYTHON_TYPES: Final[Mapping[str, type]] = MappingProxyType(
    {
        "double": float,
        "float": float,
        **dict.fromkeys(
            ["int32", "int64", "uint32", "uint64", "sint32", "sint64"]
            + ["fixed32", "fixed64", "sfixed32", "sfixed64"],
            int,
        ),
        "bool": bool,
        "string": str,
        "bytes": bytes,
    }
)
# The member :func:`attr` picks for a name ASTRA-sim does not read, by the value's Python type.
_INFERRED_PREFIX: Final[Mapping[type, str]] = MappingProxyType(
    {bool: "bool", int: "int64", float: "double", str: "string", bytes: "bytes"}
)
_MAX_PREFIX_BYTES: Final = 5  # a varint32, as ASTRA-sim's CodedInputStream::ReadVarint32 reads


class ChakraFormatError(TacosError, ValueError):
    """A Chakra ET file (or byte string) that is not a valid GlobalMetadata-then-Nodes stream.

    The message names the file, the byte offset and what is wrong, and says what to do.
    """


def reduce_micros(cost: CostModel, nbytes: int) -> int:
    """A reduction of ``nbytes`` as a COMP node's ``duration_micros`` (whole microseconds)."""
    return round(cost.reduce_us(nbytes))


def as_traced(cost: CostModel, nbytes: int) -> CostModel:
    """``cost`` as traces carry it: reductions of ``nbytes`` last whole microseconds.

    ASTRA-sim runs a COMP node for ``duration_micros`` x 1000 ns, so a bundle's
    predictions use this model, whose reductions take exactly what the traces say.
    """
    micros = reduce_micros(cost, nbytes)
    return CostModel(cost.link_model, nbytes / (micros * 1e-6) / GIB if micros else 0.0)


def encode_varint(value: int) -> bytes:
    """Encode a non-negative integer as a protobuf base-128 varint, low 7 bits first."""
    if value < 0:
        raise ValueError(f"varint values are non-negative, got {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes, pos: int, max_bytes: int = 10) -> tuple[int, int] | None:
    """Decode the varint starting at ``data[pos]``; return ``(value, next_pos)``.

    Returns None when ``data`` ends inside the varint. Raises ValueError when the varint runs
    longer than ``max_bytes`` (10 holds any 64-bit value).
    """
    value = 0
    for index in range(max_bytes):
        if pos + index >= len(data):
            return None
        byte = data[pos + index]
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value, pos + index + 1
    raise ValueError(f"varint at byte {pos} is longer than {max_bytes} bytes")


def encode_et(metadata: GlobalMetadata, nodes: Iterable[Node]) -> bytes:
    """Serialise metadata then nodes as one ET stream, deterministically (same input, same bytes).

    Raises TypeError if metadata is not a GlobalMetadata or a node is not a Node (a Node written
    first would be eaten by ASTRA-sim as metadata), and ValueError if a message serialises to zero
    bytes: Chakra's Python tools read a zero length prefix as end of file and drop what follows.
    """
    if not isinstance(metadata, GlobalMetadata):
        raise TypeError(f"metadata must be a GlobalMetadata, got {type(metadata).__name__}")
    chunks: list[bytes] = []
    messages: list[GlobalMetadata | Node] = [metadata, *nodes]
    for index, message in enumerate(messages):
        if index and not isinstance(message, Node):
            raise TypeError(f"nodes[{index - 1}] must be a Node, got {type(message).__name__}")
        payload = message.SerializeToString(deterministic=True)
        if not payload:
            what = "the GlobalMetadata" if index == 0 else f"nodes[{index - 1}]"
            raise ValueError(
                f"{what} is empty and would serialise to zero bytes, which Chakra's Python tools "
                f"read as end of file; set its fields (e.g. version={CHAKRA_VERSION!r}, or a "
                f"node's id and type)"
            )
        chunks += (encode_varint(len(payload)), payload)
    return b"".join(chunks)


def write_et(path: str | os.PathLike[str], metadata: GlobalMetadata, nodes: Iterable[Node]) -> None:
    """Write an ET file atomically (see :func:`tacos.output.write_bytes_atomic`).

    A reader, or a crashed run, never sees half a file, which ASTRA-sim would take for a shorter
    schedule rather than reject.
    """
    write_bytes_atomic(Path(path), encode_et(metadata, nodes))


def read_et(path: str | os.PathLike[str]) -> tuple[GlobalMetadata, list[Node]]:
    """Read an ET file; raise ChakraFormatError (naming the file and byte) if it is malformed."""
    require_file(path, "Chakra ET")
    return decode_et(Path(path).read_bytes(), os.fspath(path))


def decode_et(data: bytes, name: str) -> tuple[GlobalMetadata, list[Node]]:
    """Decode an ET stream; ``name`` (usually the file path) prefixes every error message.

    Refuses, with ChakraFormatError: an empty stream, a length prefix or message cut short, a
    message that does not decode, and a first message that is not a GlobalMetadata.
    """
    frames = list(_frames(data, name))
    if not frames:
        raise ChakraFormatError(
            f"{name}: empty file (byte 0): a Chakra ET starts with a GlobalMetadata message; "
            f"regenerate it"
        )
    metadata = _decode_metadata(name, *frames[0])
    nodes = []
    for index, (offset, payload) in enumerate(frames[1:]):
        node = Node()
        try:
            node.ParseFromString(payload)
        except DecodeError as err:
            raise ChakraFormatError(
                f"{name}: node {index} (message at byte {offset}, {len(payload)} bytes) does not "
                f"decode as a Chakra Node ({err}); the file is corrupt — regenerate it"
            ) from err
        nodes.append(node)
    return metadata, nodes


def _frames(data: bytes, name: str) -> Iterator[tuple[int, bytes]]:
    """Split a stream into ``(offset of the length prefix, payload)`` pairs."""
    pos = 0
    while pos < len(data):
        try:
            decoded = decode_varint(data, pos, _MAX_PREFIX_BYTES)
        except ValueError as err:
            raise ChakraFormatError(
                f"{name}: bad length prefix at byte {pos} (longer than {_MAX_PREFIX_BYTES} "
                f"bytes); this is not a Chakra ET file, or it is corrupt — regenerate it"
            ) from err
        if decoded is None:
            raise ChakraFormatError(
                f"{name}: truncated length prefix at byte {pos} (the file ends inside it); "
                f"the file is incomplete — regenerate it"
            )
        length, start = decoded
        left = len(data) - start
        if length > left:
            raise ChakraFormatError(
                f"{name}: truncated message at byte {pos} (length prefix says {length} bytes, "
                f"{left} left); the file is incomplete — regenerate it"
            )
        yield pos, data[start : start + length]
        pos = start + length


def _decode_metadata(name: str, offset: int, payload: bytes) -> GlobalMetadata:
    """Decode the first message, refusing anything that is not a GlobalMetadata.

    A Node's bytes can parse as a GlobalMetadata (protobuf keeps unmatched fields aside as
    unknown fields) or fail to (a node name read as an attribute), depending on its fields. So
    the test is strict: it must parse with no field outside GlobalMetadata's own. Every real Node
    has a ``type`` (field 3), which GlobalMetadata lacks, so no Node passes.
    """
    metadata = GlobalMetadata()
    try:
        metadata.ParseFromString(payload)
    except DecodeError as err:
        problem = f"it does not decode ({err})"
    else:
        foreign = sorted({field.field_number for field in UnknownFieldSet(metadata)})
        if not foreign:
            return metadata
        problem = f"it has field(s) {foreign}, which GlobalMetadata lacks"
    node = Node()
    try:
        node.ParseFromString(payload)
    except DecodeError:
        node.Clear()
    if node.type != NodeType.INVALID_NODE:
        raise ChakraFormatError(
            f"{name}: missing GlobalMetadata: the first message (byte {offset}) is a "
            f"{NodeType.Name(node.type)} node (id {node.id}, name {node.name!r}); ASTRA-sim would "
            f"read it as the metadata and silently lose that node — write a GlobalMetadata "
            f"message first (tacos.formats.chakra.write_et does)"
        )
    raise ChakraFormatError(
        f"{name}: the first message (byte {offset}, {len(payload)} bytes) is not a Chakra "
        f"GlobalMetadata: {problem}; this is not a Chakra ET file, or it is corrupt — regenerate it"
    )


def attr(name: str, value: AttrValue) -> AttributeProto:
    """Build an attribute, storing the value in the oneof member ASTRA-sim reads for ``name``.

    For names in :data:`ASTRA_SIM_ATTRIBUTE_MEMBERS` the member is fixed (``comm_src`` ->
    ``int32_val``); for other names it follows the value's Python type (bool -> bool_val,
    int -> int64_val, float -> double_val, str -> string_val, bytes -> bytes_val, a non-empty
    sequence of those -> the matching ``*_list``). Raises TypeError for a value of the wrong
    Python type (a bool is not accepted as an int, nor an int as a bool) and ValueError for an
    integer out of the member's range.
    """
    items = _sequence_items(value)
    member = ASTRA_SIM_ATTRIBUTE_MEMBERS.get(name) or _inferred_member(name, value, items)
    prefix, _, shape = member.rpartition("_")
    expected = _MEMBER_PYTHON_TYPES[prefix]
    if (items is not None) != (shape == "list"):
        kind = "a sequence" if shape == "list" else "a single value"
        raise TypeError(f"attribute {name!r} is stored in {member}, which takes {kind}")
    for item in [value] if items is None else items:
        if not _is_python_type(item, expected):
            raise TypeError(
                f"attribute {name!r} is stored in {member}, which takes {expected.__name__}, "
                f"got {item!r}"
            )
    proto = AttributeProto(name=name)
    if items is None:
        setattr(proto, member, value)
    else:
        getattr(proto, member).values.extend(items)
    return proto


def _sequence_items(value: AttrValue) -> list[Scalar] | None:
    """The items of a list value, or None for a scalar (str and bytes are scalars here)."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    return None


def _inferred_member(name: str, value: AttrValue, items: list[Scalar] | None) -> str:
    """The oneof member for an attribute ASTRA-sim does not read, from the value's Python type."""
    sample = value if items is None else items[0] if items else None
    prefix = _INFERRED_PREFIX.get(type(sample))
    if prefix is None:
        raise TypeError(
            f"cannot choose an attribute member for {name!r} from {value!r}; give a bool, int, "
            f"float, str or bytes, or a non-empty sequence of one of those"
        )
    return f"{prefix}_val" if items is None else f"{prefix}_list"


def _is_python_type(item: object, expected: type) -> bool:
    """isinstance, except that bool is not an int here and an int is a valid float."""
    if expected is bool or isinstance(item, bool):
        return expected is bool and isinstance(item, bool)
    if expected is float:
        return isinstance(item, int | float)
    return isinstance(item, expected)


def get_attr(message: Node | GlobalMetadata, name: str) -> AttrValue | None:
    """Return the value of the attribute called ``name``, from whichever oneof member is set.

    ``*_list`` members come back as a list, an attribute with no member set as None. Raises
    KeyError if there is no such attribute and ValueError if there are several (ASTRA-sim would
    keep one of them, depending on the name, so the file is ambiguous).
    """
    matches = [a for a in message.attr if a.name == name]
    if not matches:
        raise KeyError(name)
    if len(matches) > 1:
        raise ValueError(f"{len(matches)} attributes are named {name!r}; expected one")
    member = matches[0].WhichOneof("value")
    if member is None:
        return None
    value = getattr(matches[0], member)
    return list(value.values) if member.endswith("_list") else value


def attr_type_mismatches(node: Node) -> list[str]:
    """Describe each attribute stored in another member than the one ASTRA-sim reads it from.

    ASTRA-sim reads such a value as 0 (for ``involved_dim`` it exits), so an empty list means
    the node's attributes will be read as written.
    """
    problems = []
    for attribute in node.attr:
        expected = ASTRA_SIM_ATTRIBUTE_MEMBERS.get(attribute.name)
        actual = attribute.WhichOneof("value")
        if expected is not None and actual != expected:
            problems.append(
                f"node {node.id}: attribute {attribute.name!r} is stored in {actual}, but "
                f"ASTRA-sim reads {expected}"
            )
    return problems
