"""`ArchSpace` (named categorical choices) and the `Supernet` module interface.

An arch is a flat dict of every choice of the space. A choice can be *gated* by a depth-like
choice: `stage1.block2.kernel_size` only matters when `stage1.depth > 2`. `canonical` sets
every inactive choice to its first value, so two dicts that describe the same network are
equal. Spaces with other activity rules (cell spaces) override `active_keys` and `size`.
Every random operation takes an explicit `random.Random` and draws in the order of the
choices, never in the iteration order of a set (which changes with PYTHONHASHSEED), so a seed
gives the same archs in every process.
"""
from __future__ import annotations

import abc
import copy
import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

import torch
from torch import nn

from nas.core.arch import Arch, Value
from nas.core.errors import ArchError
from nas.core.preprocessing import INTERPOLATION, resize
from nas.core.registry import did_you_mean
from search_spaces.ops.source import WeightSource, set_source


class LayerCost(NamedTuple):
    """One layer of an architecture: its configuration key, costs and place in the export.

    `key` identifies the layer configuration (two layers with equal keys cost the same);
    `modules` are the dotted paths of the exported model's submodules that run it, in order,
    on an input of shape `in_shape` (without batch).
    """

    key: str
    macs: int
    params: int
    in_shape: tuple[int, ...]
    modules: tuple[str, ...]


@dataclass(frozen=True)
class MixableLayer:
    """Weight sources that a mixture of experts may replace, grouped as it routes them.

    Attributes:
        role: What the layer is (`ffn`: a transformer MLP; `pointwise`: the 1x1 convolutions
            of an inverted residual block); `strategy.mixture.ops` selects layers by role.
        name: Qualified name of the module that owns the layer (it runs its children by
            name, so a router may be attached to it).
        ops: Per op, the names of its sources in `Supernet.weight_sources()`, weight first,
            then bias; all of them share the op's output neurons (dimension 0).
    """

    role: str
    name: str
    ops: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Gate:
    """`key` is active only when `arch[depth_key] > index`."""

    depth_key: str
    index: int


class ArchSpace(abc.ABC):
    """Named categorical choices; each list is ordered from cheapest to most expensive."""

    name = "space"
    interpolation = INTERPOLATION     # how inputs of another size are resized to the arch's resolution

    def __init__(self, choices: Mapping[str, Sequence[Value]], gates: Mapping[str, Gate] | None = None):
        self._choices = {key: tuple(values) for key, values in choices.items()}
        self._gates = dict(gates or {})
        self._layout = dict(self._choices)        # encoding layout: restricted copies keep the full one
        self._required: frozenset[str] = frozenset()   # keys a restricted copy only admits active
        for key, values in self._choices.items():
            if not values:
                raise ValueError(f"choice '{key}' has no values")
        for key, gate in self._gates.items():
            if gate.depth_key in self._gates:
                raise ValueError(f"gate of '{key}' depends on gated key '{gate.depth_key}'")

    # -- structure ------------------------------------------------------------------------
    def choices(self) -> dict[str, tuple[Value, ...]]:
        """Every choice name with its allowed values, in order."""
        return dict(self._choices)

    def gates(self) -> dict[str, Gate]:
        """Gated choice -> its gate (choices absent are always active; cell spaces have none)."""
        return dict(self._gates)

    def active_keys(self, arch: Mapping[str, Value]) -> set[str]:
        """The choices that change the network for this arch."""
        return {key for key in self._choices
                if key not in self._gates or arch[self._gates[key].depth_key] > self._gates[key].index}

    def fingerprint(self) -> str:
        """First 12 hex digits of sha1 of the space's name and choices: tables and searches
        built for one space refuse another."""
        parts = [self.name, {k: list(v) for k, v in self._choices.items()}]
        if self._required:     # a restricted sub-space that admits only archs with these keys active
            parts.append(sorted(self._required))
        text = json.dumps(parts, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def raw_size(self) -> int:
        """Product of the number of values of every choice."""
        return math.prod(len(v) for v in self._choices.values())

    def size(self) -> int:
        """Number of distinct canonical architectures (exact)."""
        if self._required:
            return len(self.enumerate())
        gated_by: dict[str, list[str]] = {}
        for key, gate in self._gates.items():
            gated_by.setdefault(gate.depth_key, []).append(key)
        total = 1
        for key, values in self._choices.items():
            if key in self._gates:
                continue
            if key not in gated_by:
                total *= len(values)
                continue
            total *= sum(math.prod(len(self._choices[k]) for k in gated_by[key]
                                   if depth > self._gates[k].index) for depth in values)
        return total

    def restrict(self, key: str, values: Sequence[Value]) -> "ArchSpace":
        """The sub-space of the archs whose canonical `key` is one of `values` (a non-empty subset).

        Restricting every value set of a partition of `key`'s values gives sub-spaces that
        partition this space: an arch where `key` is inactive carries its first value, so it
        belongs only to the part holding that value. A part without it admits only archs
        where `key` is active: a gated key's depth choice loses the values that switch it off;
        other keys (cell edges) are checked by `admits`, which `sample`, `min`, `max`,
        `mutate` and `crossover` respect. `encode` keeps the full space's layout.
        """
        if key not in self._choices:
            raise ArchError(f"{key}: unknown choice{did_you_mean(key, self._choices)}")
        unknown = [v for v in values if v not in self._choices[key]]
        if unknown or not values:
            raise ArchError(f"{key}: cannot restrict to {list(values)}; allowed {list(self._choices[key])}")
        space = copy.copy(self)
        space._choices = dict(self._choices)
        space._choices[key] = tuple(v for v in self._choices[key] if v in values)
        if space._choices[key][0] != self._choices[key][0]:
            space._require_active(key)
        return space

    def _require_active(self, key: str) -> None:
        gate = self._gates.get(key)
        if gate is None:
            self._required = self._required | {key}
            return
        depths = tuple(d for d in self._choices[gate.depth_key] if d > gate.index)
        if not depths:
            raise ArchError(f"{key}: never active in this space (all {gate.depth_key} <= {gate.index})")
        self._choices[gate.depth_key] = depths

    def can_activate(self, key: str) -> bool:
        """Whether some arch of this space has `key` active."""
        gate = self._gates.get(key)
        return gate is None or any(d > gate.index for d in self._choices[gate.depth_key])

    def admits(self, arch: Mapping[str, Any]) -> bool:
        """Whether `arch` is valid here and its canonical form belongs to this (sub-)space."""
        try:
            canonical = self.canonical(arch)
        except ArchError:
            return False
        return self._required <= self.active_keys(canonical)

    def splittable_keys(self) -> tuple[str, ...]:
        """Choices a few-shot strategy may split the supernet on, in order (none by default)."""
        return ()

    def key_parameters(self, key: str) -> tuple[str, ...]:
        """Name prefixes of the supernet parameters that belong to `key`'s own operations
        (gradient matching leaves them out)."""
        raise NotImplementedError(f"space '{self.name}' names no parameters for '{key}'")

    # -- other spellings -----------------------------------------------------------------
    def arch_from_text(self, text: str) -> Arch | None:
        """The arch a space's own text notation names (cell201: a NAS-Bench-201 string), None
        when `text` is not in it (spaces without a notation: always None)."""
        return None

    def arch_label(self, arch: Mapping[str, Any]) -> str | None:
        """The canonical `arch` in the space's own notation, shown beside its id (or None)."""
        return None

    # -- checking -------------------------------------------------------------------------
    def validate(self, arch: Mapping[str, Any]) -> None:
        """Raise `ArchError` naming the first problem key and its allowed values."""
        if not isinstance(arch, Mapping):
            raise ArchError(f"an arch is a mapping of choice names to values, got {type(arch).__name__}")
        for key in arch:
            if key not in self._choices:
                raise ArchError(f"{key}: unknown choice of space '{self.name}'"
                                f"{did_you_mean(key, self._choices)}")
        for key, values in self._choices.items():
            if key not in arch:
                raise ArchError(f"{key}: missing (allowed values {list(values)})")
            value = arch[key]
            if isinstance(value, bool) or value not in values:
                raise ArchError(f"{key}: {value!r} is not allowed; choose one of {list(values)}")

    def canonical(self, arch: Mapping[str, Any]) -> Arch:
        """Validated copy in key order, inactive choices set to their first value."""
        self.validate(arch)
        arch = {key: self._choices[key][self._choices[key].index(arch[key])] for key in self._choices}
        active = self.active_keys(arch)
        return {key: (value if key in active else self._choices[key][0]) for key, value in arch.items()}

    def encode(self, arch: Mapping[str, Any]) -> torch.Tensor:
        """One-hot of every active choice (inactive choices all zero); fixed length.

        A sub-space made by `restrict` encodes like the space it was restricted from, so a
        router trained on the whole space reads a sub-space's archs alike.
        """
        arch = self.canonical(arch)
        active = self.active_keys(arch)
        code = torch.zeros(sum(len(v) for v in self._layout.values()))
        offset = 0
        for key, values in self._layout.items():
            if key in active:
                code[offset + values.index(arch[key])] = 1.0
            offset += len(values)
        return code

    # -- sampling and variation -----------------------------------------------------------
    def sample(self, rng: random.Random) -> Arch:
        """A canonical arch with every choice drawn uniformly (redrawn until this space admits it)."""
        for _ in range(1000):
            arch = self.canonical({key: rng.choice(values) for key, values in self._choices.items()})
            if self._required <= self.active_keys(arch):
                return arch
        raise ArchError(f"space '{self.name}': no admitted arch in 1000 draws (keys {sorted(self._required)})")

    def min(self) -> Arch:
        """The cheapest arch: the first value of every choice."""
        return self._extreme({key: values[0] for key, values in self._choices.items()}, min)

    def max(self) -> Arch:
        """The most expensive arch: the last value of every choice."""
        return self._extreme({key: values[-1] for key, values in self._choices.items()}, max)

    def _extreme(self, arch: Arch, pick: Any) -> Arch:
        arch = self.canonical(arch)
        if self._required <= self.active_keys(arch):
            return arch
        return pick(self.enumerate(), key=self.macs)   # a sub-space whose corner is not admitted

    def _admitted_or(self, arch: Arch, fallback: Arch) -> Arch:
        return arch if self._required <= self.active_keys(arch) else fallback

    def is_live(self, arch: Mapping[str, Any]) -> bool:
        """Whether the network's output depends on its input (spaces whose choices can cut
        every path from input to output, like cell spaces, override this)."""
        return True

    def mutate(self, arch: Mapping[str, Any], prob: float, rng: random.Random) -> Arch:
        """Each choice moves to a different value with probability `prob`; choices that become
        active are drawn afresh (not left at their canonical first value)."""
        arch = self.canonical(arch)
        before = self.active_keys(arch)
        child = dict(arch)
        for key, values in self._choices.items():
            if len(values) > 1 and rng.random() < prob:
                child[key] = rng.choice([v for v in values if v != arch[key]])
        woken = self.active_keys(child) - before
        for key in self._choices:    # in choice order: a set of strings iterates in PYTHONHASHSEED order
            if key in woken:
                child[key] = rng.choice(self._choices[key])
        return self._admitted_or(self.canonical(child), arch)

    def crossover(self, a: Mapping[str, Any], b: Mapping[str, Any], rng: random.Random) -> Arch:
        """Each choice taken from `a` or `b` with equal probability."""
        a, b = self.canonical(a), self.canonical(b)
        child = self.canonical({key: (a[key] if rng.random() < 0.5 else b[key]) for key in self._choices})
        return self._admitted_or(child, a)

    def shrink(self, arch: Mapping[str, Any], max_macs: float) -> Arch:
        """`arch` with choices lowered one step at a time until its MACs fit `max_macs`: each
        time the change that fits with the most MACs left if one does, else the one that saves
        the most. Raises `ArchError` when even the min arch does not fit."""
        if self.macs(self.min()) > max_macs:
            raise ArchError(f"no arch of space '{self.name}' fits {max_macs:g} MACs "
                            f"(the smallest has {self.macs(self.min())})")
        arch = self.canonical(arch)
        while self.macs(arch) > max_macs:
            lowered = [self.canonical({**arch, key: values[values.index(arch[key]) - 1]})
                       for key, values in self._choices.items()
                       if key in self.active_keys(arch) and values.index(arch[key]) > 0]
            fitting = [a for a in lowered if self.macs(a) <= max_macs]
            arch = max(fitting, key=self.macs) if fitting else min(lowered, key=self.macs)
        return arch

    def enumerate(self) -> list[Arch]:
        """Every distinct canonical arch (only for small spaces: raises above 10^6 raw archs)."""
        if self.raw_size() > 1_000_000:
            raise ArchError(f"space '{self.name}' has {self.raw_size()} raw archs: too many to list")
        seen: dict[str, Arch] = {}
        for values in itertools.product(*self._choices.values()):
            arch = self.canonical(dict(zip(self._choices, values)))
            if self._required <= self.active_keys(arch):
                seen.setdefault(repr(arch), arch)
        return list(seen.values())

    # -- costs ----------------------------------------------------------------------------
    @abc.abstractmethod
    def layers(self, arch: Mapping[str, Any]) -> list[LayerCost]:
        """Per-layer costs of `arch` (analytic, no forward pass). Spaces implement this."""

    def costs(self, arch: Mapping[str, Any]) -> tuple[int, int]:
        """(MACs, parameters) of `arch` in one pass over its layers."""
        layers = self.layers(arch)
        return sum(layer.macs for layer in layers), sum(layer.params for layer in layers)

    def macs(self, arch: Mapping[str, Any]) -> int:
        """Multiply-accumulates of one image through `arch` (FLOPs = 2 x MACs)."""
        return self.costs(arch)[0]

    def params(self, arch: Mapping[str, Any]) -> int:
        """Parameters of the exported `arch`."""
        return self.costs(arch)[1]

    def input_size(self, arch: Mapping[str, Any]) -> int:
        """Side of the square input image `arch` expects (spaces with a supernet define it)."""
        raise NotImplementedError(f"space '{self.name}' defines no input size: it has no supernet")

    def build_supernet(self) -> "Supernet":
        """A freshly initialised weight-sharing supernet over this space.

        A space may be a pure search space (choices and analytic costs, e.g. to search a cost
        model or a benchmark table), so this is not abstract.
        """
        raise NotImplementedError(f"space '{self.name}' builds no supernet (a cost-only search space)")


class Supernet(nn.Module, abc.ABC):
    """A weight-sharing network: `set_active(arch)` then `forward(x)` runs that subnet.

    Inputs of another resolution than the active arch's are resized as the space's
    `interpolation` says (bilinear unless the space sets another; no antialiasing), exactly as
    an export's recorded preprocessing does.
    """

    def __init__(self, space: ArchSpace):
        super().__init__()
        self.space = space
        self.active_arch: Arch = {}
        self._sources: dict[str, tuple[nn.Module, str]] | None = None

    def set_active(self, arch: Mapping[str, Any]) -> Arch:
        """Validate and activate `arch`; returns its canonical form.

        Every weight source that depends on the arch (`uses_arch`) is bound to
        `space.encode(arch)`, so the forward pass, `export` and any check see its weights.
        """
        arch = self.space.canonical(arch)
        self._configure(arch)
        self.active_arch = arch
        bound = [source for source in self.weight_sources().values() if source.uses_arch]
        if bound:
            encoding = self.space.encode(arch)
            for source in bound:
                source.bind(encoding)
        return arch

    def weight_sources(self) -> dict[str, WeightSource]:
        """Every weight source by qualified name (`blocks.1.0.conv_pw.weight`), in module order.

        The index is built once, on first use, and `replace_source` keeps it current, so
        activating an arch never searches the module tree.
        """
        return {name: getattr(module, attribute) for name, (module, attribute) in self._source_index().items()}

    def _source_index(self) -> dict[str, tuple[nn.Module, str]]:
        if self._sources is None:
            self._sources = {f"{owner}.{attribute}" if owner else attribute: (module, attribute)
                             for owner, module in self.named_modules()
                             for attribute, child in module.named_children() if isinstance(child, WeightSource)}
        return self._sources

    def replace_source(self, name: str, source: WeightSource) -> WeightSource:
        """Swap the source `name` (see `weight_sources`) for `source` of the same shape; returns
        the one it replaces. The new source is bound to the active arch at once."""
        index = self._source_index()
        if name not in index:
            raise KeyError(f"no weight source '{name}'{did_you_mean(name, index)}")
        module, attribute = index[name]
        previous = getattr(module, attribute)
        set_source(module, attribute, source)
        if source.uses_arch and self.active_arch:
            source.bind(self.space.encode(self.active_arch))
        return previous

    def soft_keys(self) -> tuple[str, ...]:
        """Choices this supernet can relax into prefix masks (`set_soft`); none by default."""
        return ()

    def set_soft(self, arch: Mapping[str, Any], weights: Mapping[str, torch.Tensor]) -> Arch:
        """Activate `arch` with every key of `soft_keys()` relaxed: the widest value is
        configured and `weights[key]` (choice weights, e.g. a Gumbel-softmax one-hot) mixes the
        prefix masks of its values into the activations, so the loss differentiates w.r.t. the
        weights. The next `set_active` returns to the plain path. Returns the configured arch."""
        raise NotImplementedError(f"space '{self.space.name}' has no soft (masked) choices")

    @abc.abstractmethod
    def _configure(self, arch: Arch) -> None:
        """Point every elastic op at its slice for the canonical `arch`."""

    def resize_input(self, x: torch.Tensor) -> torch.Tensor:
        return resize(x, self.space.input_size(self.active_arch), self.space.interpolation)

    def macs(self, arch: Mapping[str, Any]) -> int:
        """Analytic MACs of `arch`."""
        return self.space.macs(arch)

    def params(self, arch: Mapping[str, Any]) -> int:
        """Analytic parameter count of the exported `arch`."""
        return self.space.params(arch)

    def export(self, arch: Mapping[str, Any]) -> nn.Module:
        """A static module of plain torch layers with copies of `arch`'s weights, in eval mode."""
        previous = self.active_arch
        self.set_active(arch)
        try:
            module = self._build_static()
        finally:
            if previous:
                self.set_active(previous)
        return module.eval()

    @abc.abstractmethod
    def _build_static(self) -> nn.Module:
        """A plain module of the active arch holding copies of its sliced weights."""

    def timm_config(self, arch: Mapping[str, Any]) -> dict | None:
        """The timm model definition that rebuilds `arch`'s export, or None if none maps."""
        return None

    def timm_unavailable(self) -> str | None:
        """Why no export of this space maps to a timm model, said in its `metrics.json` (None:
        some do, or nothing to say)."""
        return None

    def mixable_layers(self) -> list[MixableLayer]:
        """The layers whose weight sources a mixture of experts may replace (none by default)."""
        return []
