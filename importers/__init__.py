"""Readers: each reads one external format into a Topology or a Schedule.

Installed as ``tacos.importers``. A topology reader is ``read(text, source) ->
TopologyImport`` (:mod:`tacos.importers.base`); a schedule reader is
``read(source, *, collective, topology) -> Schedule``; a format that can judge
its own files (MSCCL) also declares a :class:`~tacos.importers.base.Checker`.
Readers build on their format's model in :mod:`tacos.formats` and never on a
writer; :mod:`tacos.registry` says which reader reads which file.
"""
