"""Chakra execution-trace schema bindings, installed as ``tacos.proto``.

``et_def.proto`` is TACOS's wire-compatible copy of Chakra's schema; ``et_def_pb2`` is generated
from it by ``scripts/regen_proto.py`` (never edit it by hand). Read and write ET files through
:mod:`tacos.formats.chakra` rather than these classes' raw (de)serialisers: a file is a framed
stream.
"""
