"""The one exception type that reaches users.

Library code raises :class:`TacosError` for anything caused by the user's input
(a bad spec string, a malformed file, an impossible request). The CLI prints
``str(err)`` as a single line and exits with status 2, so the message must say
what is wrong, where (file, line, field) and what to do about it.
"""


class TacosError(Exception):
    """An error caused by user input; the CLI prints str(err) as one line and exits 2."""
