"""Writers: each turns a Schedule into one external format.

Installed as ``tacos.exporters``. A writer module declares its options and
bundles them with its ``export`` as a :class:`~tacos.exporters.base.Writer`;
:mod:`tacos.registry` lists the writers under the names ``tacos-export
--format`` takes.
"""
