"""YAML loading that refuses documents that expand beyond any real scenario.

PyYAML's safe loader shares the object behind an alias, so loading a "billion
laughs" document is cheap; everything that walks the result afterwards (the
model's validation, ``{scenario_dir}`` substitution, dumping the scenario into
the run directory) pays for every expansion, and a 342-byte document reached
3.7 GB that way. So the node graph is measured before anything is built: its
size with every alias expanded, and its nesting depth. A real scenario has a
few hundred nodes; the bounds leave room for generous ones.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 100_000
"""Nodes a document may hold with its aliases expanded."""
MAX_DEPTH = 64
"""How deeply collections may nest (argument templates allow 32 of it)."""


class YamlTooLarge(ValueError):
    """The document expands beyond :data:`MAX_NODES` or nests beyond :data:`MAX_DEPTH`."""


def _expanded_size(root: yaml.Node) -> int:
    """Nodes under ``root`` with aliases expanded; memoized, so shared subtrees are measured once."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise YamlTooLarge("an alias refers to a collection that contains it (a recursive anchor)")
        if depth > MAX_DEPTH:
            raise YamlTooLarge(f"collections nest more than {MAX_DEPTH} levels deep")
        total = 1
        if isinstance(node, yaml.CollectionNode):
            on_path.add(key)
            children: list[yaml.Node] = (
                [part for pair in node.value for part in pair]
                if isinstance(node, yaml.MappingNode)
                else list(node.value)
            )
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_NODES:
                    raise YamlTooLarge(
                        f"it expands to more than {MAX_NODES:,} values through its aliases "
                        "(&anchor, *alias); no scenario needs that many"
                    )
            on_path.discard(key)
        sizes[key] = total
        return total

    return size(root, 0)


def load(text: str) -> Any:
    """Parse one YAML document with the safe loader, bounded; raises yaml.YAMLError or YamlTooLarge."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlTooLarge(f"collections nest more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()
