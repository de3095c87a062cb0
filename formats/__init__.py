"""Each external format's data model and wire code, shared by its reader and its writer.

Installed as ``tacos.formats``. A format's reader (in ``importers/``) and
writer (in ``exporters/``) both build on its module here, never on each
other: :mod:`~tacos.formats.chakra` (the Chakra ET vocabulary and its framed
protobuf codec), :mod:`~tacos.formats.astrasim` (ASTRA-sim's analytical
network YAML) and :mod:`~tacos.formats.msccl` (the MSCCL program model, its
XML codec, checker and interpreter).
"""
