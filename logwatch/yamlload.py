"""YAML for config files and rule packs, with alias expansion bounded.

PyYAML shares the objects an alias names, so a "billion laughs" document loads quickly, but
everything that then walks it (expanding `${VAR}`, validating, copying) works through the
expanded tree: 9 levels of 9 aliases are 387 million nodes.  A document whose aliases
expand past `MAX_NODES` values, and past `EXPANSION` times the values it writes out, is
refused with a clear message instead of hanging `--check` or a SIGHUP reload.  The second
bound keeps a large honest config loading: 8,000 targets sharing their `ssh:` options by an
alias are ~300,000 values from ~200,000 written (a bomb: 387 million from ~90).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import yaml

MAX_NODES = 200_000
EXPANSION = 20        # expanded values per written value above MAX_NODES: an alias bomb


class YAMLTooLarge(ValueError):
    pass


def expanded_size(node: yaml.Node, limit: int = MAX_NODES) -> int:
    """How many nodes the document has with every alias expanded (raises past `limit`, and
    for a recursive alias, which expands forever)."""
    import yaml
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise YAMLTooLarge("a recursive alias (an anchor used inside itself)")
        active.add(key)
        total = 1
        if isinstance(n, yaml.SequenceNode):
            for child in n.value:
                total += size(child)
                if total > limit:
                    break
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        active.discard(key)
        if total > limit:
            raise YAMLTooLarge(f"its aliases expand to more than {limit:,} values "
                               "(an alias bomb?); write the values out")
        sizes[key] = total
        return total

    try:
        return size(node)
    except RecursionError:
        raise YAMLTooLarge("nested too deeply") from None


def _distinct(node: yaml.Node) -> Iterator[yaml.Node]:
    """Each node the document writes out, once (an alias's target once)."""
    import yaml
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if isinstance(n, yaml.SequenceNode):
            todo.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                todo += (k, v)


def written_size(node: yaml.Node) -> int:
    """How many distinct nodes the document writes out (each alias target once)."""
    return sum(1 for _ in _distinct(node))


def refuse_duplicate_keys(node: yaml.Node) -> None:
    """A mapping that names a key twice: PyYAML keeps the last silently, so a second
    `targets:` block dropped the whole first fleet with `--check` saying ok.  Raised as
    PyYAML's own ConstructorError, so it reads `file:line:col: ... duplicate key`."""
    import yaml
    for n in _distinct(node):
        if not isinstance(n, yaml.MappingNode):
            continue
        first: dict[tuple[str, str], yaml.Node] = {}
        for k, _ in n.value:
            if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                continue
            was = first.setdefault((k.tag, k.value), k)
            if was is not k:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", n.start_mark,
                    f"duplicate key {k.value!r} (first at line {was.start_mark.line + 1}): "
                    "YAML keeps only the last", k.start_mark)


def load_yaml(stream: Any, limit: int = MAX_NODES) -> Any:
    """`yaml.safe_load`, refusing documents whose aliases expand past `limit` nodes
    (YAMLTooLarge, a ValueError with the reason).  yaml is imported here, on first use: a
    replay whose packs come from the cache (rules/patterns.py) never imports it."""
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(stream)   # libyaml when available
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node, max(limit, EXPANSION * written_size(node)))
        refuse_duplicate_keys(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
