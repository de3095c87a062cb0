"""The generated schema module keeps Chakra's wire contract, and matches proto/et_def.proto.

The expected numbers below were copied from Chakra's schema (mlcommons/chakra,
schema/protobuf/et_def.proto, identical at astra-sim/chakra 214f2c5, the commit ASTRA-sim
c459ab6 pins). A field renumbered or retyped here would make ASTRA-sim read 0 or garbage
without any error, so every message, field and enum value is pinned, not just a sample.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2

from tacos.proto import et_def_pb2

REPO = Path(__file__).resolve().parents[1]
PROTO_FILE = REPO / "proto" / "et_def.proto"
REGEN_SCRIPT = REPO / "scripts" / "regen_proto.py"


def _load_regen_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regen_proto", REGEN_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


regen_proto = _load_regen_script()

_LISTS = {
    "DoubleList": "double",
    "FloatList": "float",
    "Int32List": "int32",
    "Int64List": "int64",
    "Uint32List": "uint32",
    "Uint64List": "uint64",
    "Sint32List": "sint32",
    "Sint64List": "sint64",
    "Fixed32List": "fixed32",
    "Fixed64List": "fixed64",
    "Sfixed32List": "sfixed32",
    "Sfixed64List": "sfixed64",
    "BoolList": "bool",
    "StringList": "string",
    "BytesList": "bytes",
}

# message -> field -> (number, type); "repeated X" for repeated fields, message/enum by name.
EXPECTED_FIELDS: dict[str, dict[str, tuple[int, str]]] = {
    "AttributeProto": {
        "name": (1, "string"),
        "doc_string": (2, "string"),
        "double_val": (3, "double"),
        "double_list": (4, "DoubleList"),
        "float_val": (5, "float"),
        "float_list": (6, "FloatList"),
        "int32_val": (7, "int32"),
        "int32_list": (8, "Int32List"),
        "int64_val": (9, "int64"),
        "int64_list": (10, "Int64List"),
        "uint32_val": (11, "uint32"),
        "uint32_list": (12, "Uint32List"),
        "uint64_val": (13, "uint64"),
        "uint64_list": (14, "Uint64List"),
        "sint32_val": (15, "sint32"),
        "sint32_list": (16, "Sint32List"),
        "sint64_val": (17, "sint64"),
        "sint64_list": (18, "Sint64List"),
        "fixed32_val": (19, "fixed32"),
        "fixed32_list": (20, "Fixed32List"),
        "fixed64_val": (21, "fixed64"),
        "fixed64_list": (22, "Fixed64List"),
        "sfixed32_val": (23, "sfixed32"),
        "sfixed32_list": (24, "Sfixed32List"),
        "sfixed64_val": (25, "sfixed64"),
        "sfixed64_list": (26, "Sfixed64List"),
        "bool_val": (27, "bool"),
        "bool_list": (28, "BoolList"),
        "string_val": (29, "string"),
        "string_list": (30, "StringList"),
        "bytes_val": (31, "bytes"),
        "bytes_list": (32, "BytesList"),
    },
    **{name: {"values": (1, f"repeated {item}")} for name, item in _LISTS.items()},
    "GlobalMetadata": {
        "version": (1, "string"),
        "attr": (2, "repeated AttributeProto"),
    },
    "Node": {
        "id": (1, "uint64"),
        "name": (2, "string"),
        "type": (3, "NodeType"),
        "ctrl_deps": (4, "repeated uint64"),
        "data_deps": (5, "repeated uint64"),
        "start_time_micros": (6, "uint64"),
        "duration_micros": (7, "uint64"),
        "inputs": (8, "IOInfo"),
        "outputs": (9, "IOInfo"),
        "attr": (10, "repeated AttributeProto"),
    },
    "IOInfo": {
        "values": (1, "string"),
        "shapes": (2, "string"),
        "types": (3, "string"),
    },
    "Tensor": {
        "tensor_id": (1, "uint64"),
        "storage_id": (2, "uint64"),
        "offset": (3, "uint64"),
        "num_elem": (4, "uint64"),
        "elem_bytes": (5, "uint64"),
        "device": (6, "string"),
    },
}

EXPECTED_ENUMS: dict[str, dict[str, int]] = {
    "NodeType": {
        "INVALID_NODE": 0,
        "METADATA_NODE": 1,
        "MEM_LOAD_NODE": 2,
        "MEM_STORE_NODE": 3,
        "COMP_NODE": 4,
        "COMM_SEND_NODE": 5,
        "COMM_RECV_NODE": 6,
        "COMM_COLL_NODE": 7,
    },
    "CollectiveCommType": {
        "ALL_REDUCE": 0,
        "REDUCE": 1,
        "ALL_GATHER": 2,
        "GATHER": 3,
        "SCATTER": 4,
        "BROADCAST": 5,
        "ALL_TO_ALL": 6,
        "REDUCE_SCATTER": 7,
        "REDUCE_SCATTER_BLOCK": 8,
        "BARRIER": 9,
    },
}

_TYPE_NAMES = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()
}


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    """The schema as protoc compiled it into the generated module (stable across runtimes)."""
    return descriptor_pb2.FileDescriptorProto.FromString(et_def_pb2.DESCRIPTOR.serialized_pb)


def _message(name: str) -> descriptor_pb2.DescriptorProto:
    return next(m for m in _file_proto().message_type if m.name == name)


def _field_signature(field: descriptor_pb2.FieldDescriptorProto) -> tuple[int, str]:
    kind = field.type_name.rpartition(".")[2] or _TYPE_NAMES[field.type]
    repeated = field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    return field.number, f"repeated {kind}" if repeated else kind


def test_package_is_chakras_so_type_names_match_on_both_sides() -> None:
    assert _file_proto().package == "ChakraProtoMsg"
    assert et_def_pb2.Node.DESCRIPTOR.full_name == "ChakraProtoMsg.Node"


def test_schema_declares_exactly_chakras_messages_and_enums() -> None:
    file_proto = _file_proto()
    assert {m.name for m in file_proto.message_type} == set(EXPECTED_FIELDS)
    assert {e.name for e in file_proto.enum_type} == set(EXPECTED_ENUMS)


@pytest.mark.parametrize("message", sorted(EXPECTED_FIELDS))
def test_message_fields_have_chakras_numbers_and_types(message: str) -> None:
    fields = {f.name: _field_signature(f) for f in _message(message).field}
    assert fields == EXPECTED_FIELDS[message]


def test_attribute_values_are_one_oneof_named_value() -> None:
    attribute = _message("AttributeProto")
    assert [o.name for o in attribute.oneof_decl] == ["value"]
    in_oneof = {f.name for f in attribute.field if f.HasField("oneof_index")}
    assert in_oneof == set(EXPECTED_FIELDS["AttributeProto"]) - {"name", "doc_string"}


@pytest.mark.parametrize("enum", sorted(EXPECTED_ENUMS))
def test_enum_values_match_chakras(enum: str) -> None:
    enum_proto = next(e for e in _file_proto().enum_type if e.name == enum)
    assert {v.name: v.number for v in enum_proto.value} == EXPECTED_ENUMS[enum]


def test_generated_module_runs_on_any_supported_protobuf_runtime() -> None:
    # protoc >= 27 inserts a runtime gate that refuses protobuf older than itself; the module
    # must not have one, since the project supports protobuf 5.26 and later.
    source = Path(et_def_pb2.__file__).read_text(encoding="utf-8")
    assert "ValidateProtobufRuntimeVersion" not in source
    assert "# Protobuf Python Version: 5.26.1" in source


@pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpcio-tools is not installed (pip install grpcio-tools to compare the checked-in "
    "et_def_pb2.py with proto/et_def.proto)",
)
def test_generated_module_describes_the_proto_file_as_it_is_now() -> None:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        descriptor_set = Path(tmp) / "et_def.pb"
        status = protoc.main(
            [
                "protoc",
                f"--proto_path={PROTO_FILE.parent}",
                f"--descriptor_set_out={descriptor_set}",
                str(PROTO_FILE),
            ]
        )
        assert status == 0, "protoc failed on proto/et_def.proto"
        compiled = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file[0]
    for message in compiled.message_type:
        for field in message.field:
            field.ClearField("json_name")  # descriptor sets carry it, generated modules do not
    assert compiled == _file_proto(), "run scripts/regen_proto.py"


@pytest.mark.skipif(
    regen_proto.installed_grpcio_tools() != regen_proto.PINNED_GRPCIO_TOOLS,
    reason=f"byte-for-byte regeneration needs grpcio-tools=={regen_proto.PINNED_GRPCIO_TOOLS} "
    f"(found {regen_proto.installed_grpcio_tools()}); other protoc versions print other code",
)
def test_generated_module_is_byte_identical_to_a_fresh_regeneration() -> None:
    result = subprocess.run(
        [sys.executable, str(REGEN_SCRIPT), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
