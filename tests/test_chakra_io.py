"""Reading and writing Chakra ET streams: real ASTRA-sim files, round trips, refusals, attributes.

The reference files come from ASTRA-sim's own examples (see tests/paths.py); the tests that
need them skip when they are absent.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from paths import REFERENCE_DIR

from tacos.errors import TacosError
from tacos.formats.chakra import (
    ASTRA_SIM_ATTRIBUTE_MEMBERS,
    CHAKRA_VERSION,
    AttributeProto,
    ChakraFormatError,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    attr,
    attr_type_mismatches,
    decode_et,
    decode_varint,
    encode_et,
    encode_varint,
    get_attr,
    read_et,
    write_et,
)

ASTRA_SIM_DIR = REFERENCE_DIR / "astra-sim"
REFERENCE_ETS = sorted(ASTRA_SIM_DIR.glob("**/*.et"))
WORKLOAD_ETS = [p for p in REFERENCE_ETS if p.parent.parent.name == "workload"]
CUSTOM_ETS = sorted(ASTRA_SIM_DIR.glob("custom-collective/*.et"))
NO_REFERENCE = f"no Chakra ET files under {ASTRA_SIM_DIR} (set TACOS_REFERENCE_DIR)"


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ASTRA_SIM_DIR)) for p in paths]


def _send(node_id: int, dst: int, tag: int = 0, size: int = 1024) -> Node:
    node = Node(id=node_id, name=f"send{node_id}", type=NodeType.COMM_SEND_NODE)
    node.attr.extend([attr("comm_dst", dst), attr("comm_tag", tag), attr("comm_size", size)])
    return node


METADATA = GlobalMetadata(version=CHAKRA_VERSION)
NODES = [_send(0, dst=1), _send(1, dst=2, tag=7)]


# --- real ASTRA-sim files -------------------------------------------------------------------


@pytest.mark.skipif(not REFERENCE_ETS, reason=NO_REFERENCE)
@pytest.mark.parametrize("path", REFERENCE_ETS, ids=_ids(REFERENCE_ETS))
def test_reference_et_reencodes_to_identical_bytes(path: Path) -> None:
    metadata, nodes = read_et(path)
    assert encode_et(metadata, nodes) == path.read_bytes()


@pytest.mark.skipif(not WORKLOAD_ETS, reason=NO_REFERENCE)
@pytest.mark.parametrize("path", WORKLOAD_ETS, ids=_ids(WORKLOAD_ETS))
def test_workload_et_holds_one_collective_node_of_its_directorys_kind(path: Path) -> None:
    metadata, nodes = read_et(path)
    expected_kind = CollectiveCommType.Value(path.parent.name.upper())  # all_gather -> ALL_GATHER
    assert metadata.version == CHAKRA_VERSION
    assert [node.type for node in nodes] == [NodeType.COMM_COLL_NODE]
    assert get_attr(nodes[0], "comm_type") == expected_kind
    assert get_attr(nodes[0], "comm_size") == 1 << 20
    assert attr_type_mismatches(nodes[0]) == []


@pytest.mark.skipif(not CUSTOM_ETS, reason=NO_REFERENCE)
@pytest.mark.parametrize("path", CUSTOM_ETS, ids=_ids(CUSTOM_ETS))
def test_custom_collective_et_holds_sends_receives_and_computes_with_routing_attributes(
    path: Path,
) -> None:
    _, nodes = read_et(path)
    kinds = Counter(NodeType.Name(node.type) for node in nodes)
    assert set(kinds) == {"COMM_SEND_NODE", "COMM_RECV_NODE", "COMP_NODE"}
    peer = {NodeType.COMM_SEND_NODE: "comm_dst", NodeType.COMM_RECV_NODE: "comm_src"}
    for node in nodes:
        assert attr_type_mismatches(node) == []
        assert all(dep < node.id for dep in node.data_deps)
        if node.type in peer:
            assert isinstance(get_attr(node, peer[node.type]), int)
            assert isinstance(get_attr(node, "comm_tag"), int)
            assert get_attr(node, "comm_size") > 0  # type: ignore[operator]


def _match_key(node: Node, src: object, dst: object) -> tuple[object, ...]:
    """What ASTRA-sim matches a send and a receive on: (tag, src, dst, size)."""
    return get_attr(node, "comm_tag"), src, dst, get_attr(node, "comm_size")


@pytest.mark.skipif(not CUSTOM_ETS, reason=NO_REFERENCE)
def test_custom_collective_sends_and_receives_pair_up_across_ranks() -> None:
    sends: Counter[tuple[object, ...]] = Counter()
    receives: Counter[tuple[object, ...]] = Counter()
    for path in CUSTOM_ETS:
        rank = int(path.suffixes[-2].lstrip("."))  # custom_allreduce.<rank>.et
        for node in read_et(path)[1]:
            if node.type == NodeType.COMM_SEND_NODE:
                sends[_match_key(node, rank, get_attr(node, "comm_dst"))] += 1
            elif node.type == NodeType.COMM_RECV_NODE:
                receives[_match_key(node, get_attr(node, "comm_src"), rank)] += 1
    assert sends and sends == receives


# --- framing and round trips ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"), [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (150, b"\x96\x01")]
)
def test_varint_codec_matches_the_protobuf_wire_format(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_decode_varint_reports_a_varint_cut_short_as_none() -> None:
    assert decode_varint(b"\x96", 0) is None


def test_stream_is_each_message_prefixed_by_its_length() -> None:
    assert encode_et(METADATA, []) == b"\x07\x0a\x05" + CHAKRA_VERSION.encode()


def test_message_longer_than_127_bytes_gets_a_two_byte_length_prefix() -> None:
    node = Node(id=1, name="n" * 200, type=NodeType.COMP_NODE)
    data = encode_et(METADATA, [node])
    payload = node.SerializeToString(deterministic=True)
    assert data.endswith(encode_varint(len(payload)) + payload)
    assert len(encode_varint(len(payload))) == 2
    assert decode_et(data, "long.et")[1] == [node]


def test_encode_then_decode_returns_equal_messages() -> None:
    metadata, nodes = decode_et(encode_et(METADATA, NODES), "mem.et")
    assert metadata == METADATA
    assert nodes == NODES


def test_encoding_the_same_messages_twice_gives_the_same_bytes() -> None:
    assert encode_et(METADATA, NODES) == encode_et(METADATA, list(NODES))


def test_write_et_then_read_et_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "ranks.0.et"
    write_et(path, METADATA, NODES)
    assert read_et(path) == (METADATA, NODES)


def test_write_et_leaves_only_the_target_file(tmp_path: Path) -> None:
    write_et(tmp_path / "ranks.0.et", METADATA, NODES)
    assert [p.name for p in tmp_path.iterdir()] == ["ranks.0.et"]


def test_encode_refuses_a_node_in_place_of_the_metadata() -> None:
    with pytest.raises(TypeError, match="GlobalMetadata"):
        encode_et(NODES[0], NODES[1:])


def test_encode_refuses_empty_metadata_which_chakra_tools_read_as_end_of_file() -> None:
    with pytest.raises(ValueError, match="zero bytes"):
        encode_et(GlobalMetadata(), NODES)


# --- refusing malformed files ---------------------------------------------------------------


def test_format_errors_are_user_facing_tacos_errors() -> None:
    assert issubclass(ChakraFormatError, TacosError)


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ranks.3.et"
    path.write_bytes(b"")
    with pytest.raises(ChakraFormatError, match=r"ranks\.3\.et: empty file \(byte 0\)"):
        read_et(path)


def test_truncated_message_is_refused_naming_file_offset_and_lengths() -> None:
    data = encode_et(METADATA, NODES)
    last_prefix = len(encode_et(METADATA, NODES[:1]))
    left = len(data) - 5 - last_prefix - 1
    with pytest.raises(ChakraFormatError) as raised:
        decode_et(data[:-5], "ranks.3.et")
    message = str(raised.value)
    assert message.startswith(f"ranks.3.et: truncated message at byte {last_prefix} ")
    assert f"{left} left" in message
    assert "regenerate" in message


def test_file_ending_inside_a_length_prefix_is_refused() -> None:
    data = encode_et(METADATA, NODES) + b"\x80"
    with pytest.raises(
        ChakraFormatError, match=rf"x\.et: truncated length prefix at byte {len(data) - 1}"
    ):
        decode_et(data, "x.et")


@pytest.mark.parametrize(
    "first_node",
    [
        # No name: the node's bytes parse as a GlobalMetadata with unknown fields.
        Node(id=3, type=NodeType.COMM_SEND_NODE, data_deps=[1]),
        # A name: read as GlobalMetadata.attr, the bytes do not parse at all.
        _send(0, dst=1),
    ],
    ids=["nameless-node", "named-node"],
)
def test_stream_starting_with_a_node_is_refused_as_missing_global_metadata(
    first_node: Node,
) -> None:
    data = b"".join(
        encode_varint(len(payload)) + payload
        for payload in (n.SerializeToString() for n in [first_node, *NODES])
    )
    with pytest.raises(ChakraFormatError) as raised:
        decode_et(data, "ranks.1.et")
    message = str(raised.value)
    assert message.startswith("ranks.1.et: missing GlobalMetadata: the first message (byte 0)")
    assert "COMM_SEND_NODE" in message
    assert "write a GlobalMetadata message first" in message


@pytest.mark.parametrize(
    ("garbage", "problem"),
    [
        (b"hello, this is not a trace", "truncated message at byte 0"),
        (b"\xff" * 8, "bad length prefix at byte 0"),
        (b"\x02\xff\xff", "the first message (byte 0, 2 bytes) is not a Chakra GlobalMetadata"),
    ],
    ids=["text", "overlong-prefix", "undecodable"],
)
def test_garbage_bytes_are_refused_naming_file_and_offset(garbage: bytes, problem: str) -> None:
    with pytest.raises(ChakraFormatError, match="^" + re.escape(f"junk.et: {problem}")):
        decode_et(garbage, "junk.et")


def test_undecodable_node_is_refused_naming_its_index_and_offset() -> None:
    good = encode_et(METADATA, NODES)
    with pytest.raises(
        ChakraFormatError, match=rf"^bad\.et: node 2 \(message at byte {len(good)}, 2 bytes\)"
    ):
        decode_et(good + b"\x02\xff\xff", "bad.et")


# --- attributes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "member"),
    [
        ("comm_size", 1 << 20, "int64_val"),
        ("comm_type", CollectiveCommType.ALL_GATHER, "int64_val"),
        ("num_ops", 10, "int64_val"),
        ("comm_src", 3, "int32_val"),
        ("comm_dst", 4, "int32_val"),
        ("comm_tag", 5, "int32_val"),
        ("comm_priority", 0, "int32_val"),
        ("tensor_size", 2**40, "uint64_val"),
        ("is_cpu_op", False, "bool_val"),
        ("involved_dim", [True, False], "bool_list"),
        ("pg_name", "0", "string_val"),
    ],
)
def test_attr_stores_each_astra_sim_attribute_in_the_member_astra_sim_reads(
    name: str, value: object, member: str
) -> None:
    built = attr(name, value)  # type: ignore[arg-type]
    assert built.WhichOneof("value") == member
    assert get_attr(Node(attr=[built]), name) == value


def test_attr_table_covers_every_attribute_astra_sim_reads() -> None:
    assert set(ASTRA_SIM_ATTRIBUTE_MEMBERS) == {
        "is_cpu_op",
        "num_ops",
        "tensor_size",
        "comm_type",
        "comm_priority",
        "comm_size",
        "comm_src",
        "comm_dst",
        "comm_tag",
        "pg_name",
        "involved_dim",
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [("comm_src", "3"), ("comm_size", True), ("is_cpu_op", 1), ("involved_dim", True)],
)
def test_attr_refuses_a_value_of_the_wrong_python_type(name: str, value: object) -> None:
    with pytest.raises(TypeError, match=name):
        attr(name, value)  # type: ignore[arg-type]


def test_attr_refuses_an_integer_out_of_the_members_range() -> None:
    with pytest.raises(ValueError):
        attr("comm_src", 2**31)


@pytest.mark.parametrize(
    ("value", "member"),
    [
        (True, "bool_val"),
        (7, "int64_val"),
        (0.5, "double_val"),
        ("1.0.2", "string_val"),
        (b"\x00", "bytes_val"),
        ([1, 2], "int64_list"),
        (["a"], "string_list"),
    ],
)
def test_attr_picks_the_member_from_the_python_type_for_other_names(
    value: object, member: str
) -> None:
    built = attr("schema", value)  # type: ignore[arg-type]
    assert built.WhichOneof("value") == member
    assert get_attr(GlobalMetadata(attr=[built]), "schema") == value


def test_attr_refuses_an_empty_list_for_other_names_as_its_type_is_unknown() -> None:
    with pytest.raises(TypeError, match="non-empty"):
        attr("ranks", [])


def test_get_attr_raises_key_error_for_a_missing_attribute() -> None:
    with pytest.raises(KeyError):
        get_attr(NODES[0], "comm_src")


def test_get_attr_refuses_an_ambiguous_duplicate() -> None:
    node = Node(attr=[attr("comm_tag", 1), attr("comm_tag", 2)])
    with pytest.raises(ValueError, match="2 attributes are named 'comm_tag'"):
        get_attr(node, "comm_tag")


def test_attr_type_mismatches_names_attributes_astra_sim_would_read_as_zero() -> None:
    node = Node(id=9, attr=[AttributeProto(name="comm_src", int64_val=3), attr("comm_dst", 1)])
    assert attr_type_mismatches(node) == [
        "node 9: attribute 'comm_src' is stored in int64_val, but ASTRA-sim reads int32_val"
    ]
