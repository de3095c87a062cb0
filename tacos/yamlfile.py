"""Reading YAML that users wrote or edited: safely, with bounded size, errors at the line.

YAML anchors (``&a``) and aliases (``*a``) let a few hundred bytes describe a
structure of billions of values (the "billion laughs"): PyYAML builds it
without copying, but anything that walks it -- a length, a repr in an error
message -- takes minutes and gigabytes. So the node tree is measured as it
would expand, before any Python value is built, and documents that expand past
:data:`MAX_EXPANDED_VALUES` or refer to themselves are refused. Errors about a
value describe it with :func:`tacos.errors.describe`, never its repr.

Example:
    >>> parse_yaml("a: [1, 2]", "x.yml")[1]
    {'a': [1, 2]}
"""

from __future__ import annotations

from typing import Any

import yaml

from tacos.errors import TacosError

MAX_EXPANDED_VALUES = 100_000
"""Scalars, lists and mappings a document may hold once its aliases are expanded."""


def parse_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for line numbers) and its Python value, safely built."""
    try:
        loader = yaml.SafeLoader(text)  # refuses control characters at once
    except yaml.YAMLError as err:
        raise TacosError(_described(err, source)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_expansion(node, source)
        return node, loader.construct_document(node)
    except RecursionError:  # PyYAML composes, and _check_expansion measures, recursively
        raise TacosError(
            f"{source}: nested too deeply to read (thousands of [ or {{); this is no YAML "
            "tacos reads"
        ) from None
    except yaml.YAMLError as err:
        raise TacosError(_described(err, source)) from None
    finally:
        loader.dispose()


def _described(err: yaml.YAMLError, source: str) -> str:
    """One line naming ``source``, the place (where PyYAML knows it) and the problem."""
    mark = getattr(err, "problem_mark", None)
    where = f" line {mark.line + 1} column {mark.column + 1}:" if mark else ""
    if isinstance(err, yaml.reader.ReaderError):  # no mark: a character YAML forbids
        code = err.character if isinstance(err.character, int) else ord(err.character)
        return (
            f"{source}: character {err.position + 1}: not valid YAML (control character "
            f"#x{code:02x}); remove it"
        )
    problem = getattr(err, "problem", None) or str(err)
    return f"{source}:{where} not valid YAML ({problem})"


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Count the values ``root`` expands to (shared nodes counted at every use)."""
    expanded: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in on_path:
            raise TacosError(
                f"{source}: line {node.start_mark.line + 1}: an alias refers to a value that "
                "contains it; write the value out instead"
            )
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_VALUES:
                raise TacosError(
                    f"{source}: line {node.start_mark.line + 1}: the document expands to more "
                    f"than {MAX_EXPANDED_VALUES} values through its aliases (*name); "
                    "write the values out or use fewer aliases"
                )
        on_path.discard(key)
        expanded[key] = total
        return total

    size(root)
