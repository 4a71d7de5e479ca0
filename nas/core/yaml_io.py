"""The one YAML reader of `nas`: safe, strict about duplicates, YAML-1.2-like floats.

Plain `yaml.safe_load` keeps the last of two duplicate keys and reads `1e-3` as a string; this
loader rejects the first and reads the second as a float. It never builds Python objects from
tags, and reports syntax errors with line and column.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from nas.core.errors import ConfigError, clip

_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                          |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                          |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                          |[-+]?\.(?:inf|Inf|INF)
                          |\.(?:nan|NaN|NAN))$""", re.X)


MAX_DEPTH = 100          # nesting levels of collections (deeper documents exhaust the recursive parser)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with duplicate-key rejection, exponent floats without a dot and bounded nesting."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"unsupported key {clip(key)}", key_node.start_mark)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


def _reject_tag(loader: _StrictLoader, suffix: str, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"tag '{node.tag}' is not allowed", node.start_mark)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_multi_constructor("!", _reject_tag)
_StrictLoader.add_multi_constructor("tag:yaml.org,2002:python/", _reject_tag)


def _where(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


def _problem(error: yaml.YAMLError) -> str:
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    return f"{context}, {problem}" if context and "duplicate" not in problem else problem


MAX_VALUES = 100_000     # values of a document once aliases are expanded (a few aliases can make billions)


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values `node` stands for with every alias expanded (each distinct node is visited once)."""
    if id(node) not in sizes:
        sizes[id(node)] = 0          # a node that contains itself counts once
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(_expanded_size(child, sizes) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
        else:
            total = 1
        sizes[id(node)] = min(total, MAX_VALUES + 1)
    return sizes[id(node)]


def loads(text: str, source: str = "<string>") -> Any:
    """Parse YAML text strictly; errors name `source`, line and column."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_VALUES:
            raise ConfigError(f"{source}: expands to more than {MAX_VALUES:,} values (aliases of aliases?); "
                              f"write the values out")
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: {_where(e)}{_problem(e)}") from e
    finally:
        loader.dispose()


def load_mapping(path: str | Path) -> dict:
    """Read a YAML file whose top level must be a non-empty mapping."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {e.start})") from e
    data = loads(text, str(path))
    if data is None:
        raise ConfigError(f"{path}: the file is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return data


def parse_scalar(text: str, source: str = "overrides") -> Any:
    """Parse a `--set` value with the same rules as the files (`1e-3` is a float, `[1, 2]` a list)."""
    if text.strip() == "":
        return ""
    return loads(text, source)


def dumps(data: Any) -> str:
    """YAML text for plain data, keys in insertion order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, allow_unicode=True)
