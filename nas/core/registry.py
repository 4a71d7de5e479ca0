"""Registries: search spaces, samplers, distillation losses, strategies, searchers and estimators by name.

YAML names a plugin (`sampler: sandwich`); the registry maps the name to the object and the
dataclass that declares its options. Packages register on import; third-party packages add
entries through the `nas.plugins` entry-point group.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, is_dataclass
from importlib import metadata
from typing import Any, Callable, Generic, Iterator, TypeVar

from nas.core.errors import RegistryError

T = TypeVar("T")
PLUGIN_GROUP = "nas.plugins"
_BUILTIN_PACKAGES = ("search_spaces", "supernets", "searchers", "estimators")
_loaded = False


@dataclass(frozen=True)
class NoOptions:
    """Options of a plugin that takes none."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered object and the dataclass of its YAML options."""

    name: str
    obj: T
    options: type


def did_you_mean(name: str, candidates: Any) -> str:
    """` (did you mean 'x'?)` for the closest candidate, or an empty string."""
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def load_plugins() -> None:
    """Import the built-in plugin packages and every `nas.plugins` entry point, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for package in _BUILTIN_PACKAGES:
        importlib.import_module(package)
    for entry_point in metadata.entry_points(group=PLUGIN_GROUP):
        entry_point.load()


class Registry(Generic[T]):
    """Named plugins of one kind; `yaml_key` is where YAML (or the Python API's parameter) names them
    (for error messages)."""

    def __init__(self, kind: str, yaml_key: str):
        self.kind = kind
        self.yaml_key = yaml_key
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, options: type = NoOptions) -> Callable[[T], T]:
        """Decorator registering `obj` under `name`, with its options dataclass."""
        if not is_dataclass(options):
            raise TypeError(f"options of {self.kind} '{name}' must be a dataclass, got {options!r}")

        def decorate(obj: T) -> T:
            if name in self._entries:
                raise RegistryError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = Entry(name, obj, options)
            return obj

        return decorate

    def get(self, name: str, key: str | None = None) -> Entry[T]:
        """The entry for `name`; an unknown name lists the available ones, naming `key` (default
        `yaml_key`: where the caller took the name from)."""
        load_plugins()
        if name not in self._entries:
            raise RegistryError(
                f"{key or self.yaml_key}: unknown {self.kind} '{name}'{did_you_mean(name, self._entries)};"
                f" available: {', '.join(sorted(self._entries))}")
        return self._entries[name]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


SPACES: Registry = Registry("search space", "space.name")
SAMPLERS: Registry = Registry("sampler", "strategy.sampler.name")
DISTILL_LOSSES: Registry = Registry("distillation loss", "strategy.distill.name")
STRATEGIES: Registry = Registry("strategy", "strategy.name")
SEARCHERS: Registry = Registry("searcher", "searcher")
ESTIMATORS: Registry = Registry("estimator", "score")
# The estimator that ranks by the trained supernet's own accuracy: a search's default score,
# the one every fidelity measurement reports, and the score of records written before scores.
SUPERNET_SCORE = "supernet"
