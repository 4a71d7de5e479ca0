"""`cell201`: a NAS-Bench-201-style cell space (Dong & Yang, 2020).

Macro skeleton as NAS-Bench-201: stem (conv 3x3 + BN), `cells_per_stage` cells at C channels,
a residual reduction block, cells at 2C, a reduction block, cells at 4C, then BN + ReLU,
global average pooling and a linear classifier. Every cell has the same genotype (the arch): a
4-node DAG whose 6 edges each choose an operation among `none`, `skip_connect`,
`avg_pool_3x3`, `conv_1x1`, `conv_3x3` (ReLU-Conv-BN). Weights are shared per cell, edge and
operation.

An edge is *live* when it lies on a path of non-`none` edges from node 0 to node 3. Dead edges
are pruned in the supernet and in the export (a convolution fed by an all-zero node still
outputs its BN shift in eval mode), and `canonical` sets them to `none`, so archs that differ
only on dead edges are the same network. `size()` counts distinct canonical archs.

Shipped defaults (28x28 grey Fashion-MNIST on 2 CPU cores): C = 8 and one cell per stage keep
the all-`conv_3x3` arch at 9.6 MMACs; its training step (batch 128, 2 threads, channels_last)
took ~0.15 s on a quiet machine (0.2-0.3 s under load), the all-`none` arch 1.5 MMACs. Two
cells per stage roughly double both. The stem has stride 1: the reduction blocks halve
28 -> 14 -> 7, and a stride-2 stem would give a 7 -> 3/4 mismatch between the shortcut's 2x2
pooling and the strided convolution.

Arch keys: `edge{to}<-{from}` (e.g. `edge3<-1: conv_3x3`). `to_nb201_string` and
`from_nb201_string` convert to and from NAS-Bench-201's `|op~0|+|op~0|op~1|+|...|` strings;
wherever an arch is accepted (`--arch`, arch files, score tables) such a string is too.

Costs (`costs` option): `macs` (default) counts the multiply-accumulates of the convolutions
and the classifier, as everywhere in `nas`. `nb201` counts as the NAS-Bench-201 figures of
NASLib's zero-cost file do (`flops` there; `benchmarks/nb201_costs.py` checks all 725 archs):
per element, 2 for an affine batch norm and 1 for a ReLU (on its input), k x k per output
element of a k x k average pooling (the 3x3 pooling edges and the reduction shortcut's 2x2),
`(window + 1)^2` per channel for the global pooling (the counter's own rule), plus the MACs.
Parameters are the same either way. One documented difference remains: the benchmark also
runs (and counts) the dead edges that this space prunes, so an arch with a dead convolution
costs less here than there.

`bn_affine: false` builds every batch norm without a learnt scale and shift, as PA&DA's and its
baselines' NAS-Bench-201 supernets do (a scale shared by every path is a compromise such a
supernet need not learn); the parameters drop by two per BN channel, the MACs count as before.
"""
from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from nas.core.arch import Arch
from nas.core.errors import ArchError, ConfigError, int_problems
from nas.core.registry import SPACES, did_you_mean
from search_spaces.base import ArchSpace, LayerCost, MixableLayer, Supernet
from search_spaces.ops import (
    ElasticBatchNorm2d,
    ElasticConv2d,
    ElasticLinear,
    conv_macs,
)
from search_spaces.ops.nb201 import (
    CONV_KERNELS,
    Edge,
    ElasticCell,
    ElasticResNetBasicBlock,
)

COST_COUNTS = ("macs", "nb201")
EDGES = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))   # (to, from), NAS-Bench-201 string order
OPERATIONS = ("none", "skip_connect", "avg_pool_3x3", "conv_1x1", "conv_3x3")   # cheapest first
NB201_NAMES = {"none": "none", "skip_connect": "skip_connect", "avg_pool_3x3": "avg_pool_3x3",
               "conv_1x1": "nor_conv_1x1", "conv_3x3": "nor_conv_3x3"}


def by_sum_then_order(sizes: list[int]) -> Iterator[tuple[int, ...]]:
    """Every index tuple (index k below `sizes[k]`) by ascending sum, then lexicographically:
    `sorted(product(...), key=lambda t: (sum(t), t))`, made one tuple at a time, so a search
    that stops at the first few never lists the space (15,625 tuples: 1.6 s a call, sorted)."""
    def with_sum(k: int, total: int) -> Iterator[tuple[int, ...]]:
        if k == len(sizes):
            if total == 0:
                yield ()
            return
        rest = sum(size - 1 for size in sizes[k + 1:])
        for i in range(max(0, total - rest), min(sizes[k] - 1, total) + 1):
            for tail in with_sum(k + 1, total - i):
                yield (i, *tail)

    for total in range(sum(size - 1 for size in sizes) + 1):
        yield from with_sum(0, total)


def edge_key(to: int, source: int) -> str:
    """The arch key of the edge from node `source` to node `to`."""
    return f"edge{to}<-{source}"


def live_edges(arch: Mapping[str, Any]) -> list[Edge]:
    """(to, from, operation) of every edge on a path of non-`none` edges from node 0 to node 3."""
    used = [(to, source) for to, source in EDGES if arch[edge_key(to, source)] != "none"]
    from_input, to_output = {0}, {3}
    for to, source in used:                    # EDGES is ordered by target node
        if source in from_input:
            from_input.add(to)
    for to, source in reversed(used):          # reversed: a node's outgoing edges come before its incoming
        if to in to_output:
            to_output.add(source)
    return [(to, source, arch[edge_key(to, source)]) for to, source in used
            if source in from_input and to in to_output]


def to_nb201_string(arch: Mapping[str, Any]) -> str:
    """NAS-Bench-201's string of `arch`, e.g. `|nor_conv_3x3~0|+|none~0|skip_connect~1|+|...|`.

    The string describes the arch as given; pass `space.canonical(arch)` to look up the
    network this space runs (dead edges set to `none`), which is also NAS-Bench-201's.
    """
    for to, source in EDGES:
        op = arch.get(edge_key(to, source))
        if op not in NB201_NAMES:
            raise ArchError(f"{edge_key(to, source)}: {op!r} is not an operation; choose one of {list(OPERATIONS)}")
    return "+".join("|" + "".join(f"{NB201_NAMES[arch[edge_key(to, i)]]}~{i}|" for i in range(to))
                    for to in range(1, 4))


def from_nb201_string(text: str) -> Arch:
    """The arch of a NAS-Bench-201 string (`|op~0|+|op~0|op~1|+|op~0|op~1|op~2|`)."""
    ours = {name: op for op, name in NB201_NAMES.items()}
    nodes = str(text).strip().split("+")
    if len(nodes) != 3:
        raise ArchError(f"NAS-Bench-201 string {text!r}: expected 3 nodes separated by '+', got {len(nodes)}")
    arch: Arch = {}
    for to, node in enumerate(nodes, start=1):
        parts = node.split("|")
        if len(parts) != to + 2 or parts[0] or parts[-1]:
            raise ArchError(f"NAS-Bench-201 string {text!r}: node {to} must read |op~0|...|op~{to - 1}|, got {node!r}")
        for i, part in enumerate(parts[1:-1]):
            name, _, source = part.rpartition("~")
            if source != str(i):
                raise ArchError(f"NAS-Bench-201 string {text!r}: node {to} input {i} must end with ~{i}, got {part!r}")
            if name not in ours:
                raise ArchError(f"NAS-Bench-201 string {text!r}: unknown operation {name!r}"
                                f"{did_you_mean(name, ours)}; known: {', '.join(ours)}")
            arch[edge_key(to, i)] = ours[name]
    return {edge_key(to, source): arch[edge_key(to, source)] for to, source in EDGES}


@functools.lru_cache(maxsize=64)
def _count_networks(choices: tuple[tuple[str, tuple[str, ...]], ...], required: frozenset[str] = frozenset()) -> int:
    keys = [key for key, _ in choices]
    first = {key: values[0] for key, values in choices}
    seen = set()
    for values in itertools.product(*(values for _, values in choices)):
        arch = dict(zip(keys, values))
        live = {edge_key(to, source) for to, source, _ in live_edges(arch)}
        if required <= live:
            seen.add(tuple(arch[key] if key in live else first[key] for key in keys))
    return len(seen)


@dataclass(frozen=True)
class _Nb201Extras:
    """What `costs: nb201` adds to the MACs of a layer (all zero for `costs: macs`): the
    per-element rules of the counter behind NASLib's NAS-Bench-201 figures (module docstring)."""

    on: bool

    def bn(self, elements: int) -> int:
        return 2 * elements if self.on else 0

    def relu(self, elements: int) -> int:
        return elements if self.on else 0

    def pool(self, kernel: int, out_elements: int) -> int:
        return kernel * kernel * out_elements if self.on else 0

    def global_pool(self, channels: int, side: int) -> int:
        return channels * (side + 1) ** 2 if self.on else 0


@dataclass(frozen=True)
class Cell201Options:
    """Options of the `cell201` space (`space.options` in YAML)."""

    image_size: int = 28          # fixed input side; must be divisible by 4 (two reductions)
    channels: int = 8             # C: cells of the three stages have C, 2C, 4C channels
    cells_per_stage: int = 1      # N
    operations: tuple[str, ...] = OPERATIONS
    costs: str = "macs"           # macs | nb201: what MACs count (module docstring)
    bn_affine: bool = True        # false: no BN learns a scale and shift (PA&DA's NAS-Bench-201 supernet)

    def __post_init__(self) -> None:
        problems = []
        if self.costs not in COST_COUNTS:
            problems.append(f"costs: {self.costs!r} is not a way of counting{did_you_mean(self.costs, COST_COUNTS)}; "
                            f"choose one of {list(COST_COUNTS)}")
        if self.image_size < 4 or self.image_size % 4:
            problems.append(f"image_size: must be a positive multiple of 4 (two 2x reductions), got {self.image_size}")
        problems += int_problems(1, channels=self.channels, cells_per_stage=self.cells_per_stage)
        if not isinstance(self.bn_affine, bool):
            problems.append(f"bn_affine: must be true or false, got {self.bn_affine!r}")
        unknown = [op for op in self.operations if op not in OPERATIONS]
        if unknown:
            problems.append(f"operations: unknown {unknown}{did_you_mean(unknown[0], OPERATIONS)}; "
                            f"choose from {list(OPERATIONS)}")
        if not self.operations or len(set(self.operations)) != len(self.operations):
            problems.append(f"operations: must be a non-empty list of distinct names, got {list(self.operations)}")
        if problems:
            raise ConfigError(problems)


@SPACES.register("cell201", options=Cell201Options)
class Cell201Space(ArchSpace):
    """NAS-Bench-201 cell choices (one operation per edge) and their analytic costs."""

    name = "cell201"

    def __init__(self, options: Cell201Options, in_chans: int, num_classes: int):
        self.options, self.in_chans, self.num_classes = options, in_chans, num_classes
        operations = tuple(op for op in OPERATIONS if op in options.operations)
        super().__init__({edge_key(to, source): operations for to, source in EDGES})

    def input_size(self, arch: Mapping[str, Any]) -> int:
        return self.options.image_size

    def active_keys(self, arch: Mapping[str, Any]) -> set[str]:
        """The live edges."""
        return {edge_key(to, source) for to, source, _ in live_edges(arch)}

    def size(self) -> int:
        """Distinct canonical archs, by enumerating every raw arch once (cached)."""
        return _count_networks(tuple(self.choices().items()), self._required)

    def can_activate(self, key: str) -> bool:
        """Whether `key` is live in some arch: in the one with every edge at its last (most
        connected) operation, as adding a non-`none` edge never kills another."""
        return key in self.active_keys({k: values[-1] for k, values in self.choices().items()})

    def splittable_keys(self) -> tuple[str, ...]:
        """Every edge's operation, in NAS-Bench-201 string order."""
        return tuple(edge_key(to, source) for to, source in EDGES)

    def key_parameters(self, key: str) -> tuple[str, ...]:
        """The edge's operations in every cell (`cells.{k}.convs.{to}<-{from}.`)."""
        return tuple(f"cells.{index}.convs.{key[len('edge'):]}." for index, (kind, *_)
                     in enumerate(self.stages()) if kind == "cell")

    def is_live(self, arch: Mapping[str, Any]) -> bool:
        """Whether some path of non-`none` edges joins the cell's input to its output."""
        return bool(live_edges(arch))

    def arch_from_text(self, text: str) -> Arch | None:
        """The arch of a NAS-Bench-201 string (text starting with `|`), else None."""
        return from_nb201_string(text) if str(text).strip().startswith("|") else None

    def arch_label(self, arch: Mapping[str, Any]) -> str:
        """NAS-Bench-201's string of the canonical `arch` (dead edges written `none`)."""
        return to_nb201_string(self.canonical(arch))

    def min(self) -> Arch:
        """The cheapest arch, a live network where one costs as little as the dead all-`none`
        cell (e.g. a single `skip_connect` edge from input to output): see `_live_extreme`."""
        return self._live_extreme(super().min(), cheapest=True)

    def max(self) -> Arch:
        """The most expensive arch, a live network where one costs as much (see `min`)."""
        return self._live_extreme(super().max(), cheapest=False)

    def _live_extreme(self, extreme: Arch, cheapest: bool) -> Arch:
        """`extreme` if it is live; else, among the archs of exactly its (MACs, params), the
        live one with the fewest and cheapest operations (smallest sum of choice indices, then
        first in choice order; mirrored for the max); else `extreme` itself.

        A dead cell ignores its input, so a sandwich rule training it as the min subnet would
        spend a pass per step on a network stuck at chance. The answer is cached per choices.
        """
        if self.is_live(extreme):
            return extreme
        choices = self.choices()
        key = (cheapest, tuple(choices.items()))
        cache = self.__dict__.setdefault("_extremes", {})
        if key not in cache:
            cache[key] = extreme
            target = self.costs(extreme)
            sizes = [len(values) for values in choices.values()]
            for ordered in by_sum_then_order(sizes):
                indices = ordered if cheapest else [size - 1 - i for size, i in zip(sizes, ordered)]
                arch = {k: values[i] for (k, values), i in zip(choices.items(), indices)}
                if self.is_live(arch) and self.costs(arch) == target:
                    cache[key] = self.canonical(arch)
                    break
        return dict(cache[key])

    def mutate(self, arch: Mapping[str, Any], prob: float, rng: random.Random) -> Arch:
        """Each edge moves to a different operation with probability `prob`."""
        arch = self.canonical(arch)
        child = {key: (rng.choice([v for v in values if v != arch[key]])
                       if len(values) > 1 and rng.random() < prob else arch[key])
                 for key, values in self.choices().items()}
        return self._admitted_or(self.canonical(child), arch)

    def stages(self) -> list[tuple[str, int, int, int]]:
        """(kind, in channels, out channels, input side) of every cell and reduction block."""
        o, layout = self.options, []
        channels, side = o.channels, o.image_size
        for stage in range(3):
            if stage:
                layout.append(("reduce", channels, 2 * channels, side))
                channels, side = 2 * channels, side // 2
            layout += [("cell", channels, channels, side)] * o.cells_per_stage
        return layout

    def layers(self, arch: Mapping[str, Any]) -> list[LayerCost]:
        """Stem, every live edge of every cell, the reduction blocks and the head.

        A cell is listed edge by edge (`cells.{k}.edges.{to}<-{from}`, each runnable on the
        cell's input shape), so a latency table needs one entry per (operation, stage) instead
        of one per genotype; the node sums are element-wise adds and belong to no layer.
        """
        arch = self.canonical(arch)
        c, side, cin = self.options.channels, self.options.image_size, self.in_chans
        extra = _Nb201Extras(self.options.costs == "nb201")
        live = live_edges(arch)
        bn = 2 if self.options.bn_affine else 0   # a BN's learnt parameters per channel
        layers = [LayerCost(f"stem:{cin}x{side}x{side}:{c}", conv_macs(cin, c, 3, (side, side)) + extra.bn(c * side * side),
                            cin * c * 9 + bn * c, (cin, side, side), ("stem",))]
        for index, (kind, cin, cout, side) in enumerate(self.stages()):
            shape = (cin, side, side)
            if kind == "reduce":
                half = side // 2
                out = cout * half * half
                macs = (conv_macs(cin, cout, 3, (half, half)) + conv_macs(cout, cout, 3, (half, half))
                        + conv_macs(cin, cout, 1, (half, half)) + extra.relu(cin * side * side) + extra.bn(out)
                        + extra.relu(out) + extra.bn(out) + extra.pool(2, cin * half * half))
                params = cin * cout * 9 + cout * cout * 9 + cin * cout + 2 * bn * cout
                layers.append(LayerCost(f"resblock:{cin}x{side}x{side}:{cout}", macs, params, shape,
                                        (f"cells.{index}",)))
                continue
            elements = cin * side * side
            for to, source, op in live:
                kernel = CONV_KERNELS.get(op)
                macs = conv_macs(cin, cin, kernel, (side, side)) + extra.relu(elements) + extra.bn(elements) if kernel else 0
                if op == "avg_pool_3x3":
                    macs = extra.pool(3, elements)
                params = cin * cin * kernel * kernel + bn * cin if kernel else 0
                layers.append(LayerCost(f"edge:{op}:{cin}x{side}x{side}", macs, params, shape,
                                        (f"cells.{index}.edges.{to}<-{source}",)))
        width, side = 4 * c, self.options.image_size // 4
        head = (width * self.num_classes + extra.bn(width * side * side) + extra.relu(width * side * side)
                + extra.global_pool(width, side))
        layers.append(LayerCost(f"head:{width}x{side}x{side}:{self.num_classes}", head,
                                bn * width + width * self.num_classes + self.num_classes, (width, side, side),
                                ("lastact", "global_pooling", "flatten", "classifier")))
        return layers

    def build_supernet(self) -> "Cell201Supernet":
        return Cell201Supernet(self)


class StaticCell201Net(nn.Module):
    """A plain NAS-Bench-201 network holding only the operations its arch uses."""

    def __init__(self, stem: nn.Sequential, cells: nn.ModuleList, lastact: nn.Sequential, classifier: nn.Linear):
        super().__init__()
        self.stem, self.cells, self.lastact = stem, cells, lastact
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for cell in self.cells:
            x = cell(x)
        return self.classifier(self.flatten(self.global_pooling(self.lastact(x))))


class Cell201Supernet(Supernet):
    """Weight-sharing NAS-Bench-201 network: every cell has weights for every (edge, operation)."""

    def __init__(self, space: Cell201Space):
        super().__init__(space)
        c = space.options.channels
        operations = tuple(op for op in OPERATIONS if op in space.options.operations)
        affine = space.options.bn_affine
        self.stem = nn.Sequential(ElasticConv2d(space.in_chans, c, 3), ElasticBatchNorm2d(c, affine=affine))
        self.cells = nn.ModuleList([ElasticCell(cin, list(EDGES), operations, affine) if kind == "cell"
                                    else ElasticResNetBasicBlock(cin, cout, affine)
                                    for kind, cin, cout, _ in space.stages()])
        self.lastact = nn.Sequential(ElasticBatchNorm2d(4 * c, affine=affine), nn.ReLU())
        self.classifier = ElasticLinear(4 * c, space.num_classes)
        self.set_active(space.max())

    def _configure(self, arch: dict) -> None:
        live = live_edges(arch)
        for cell in self.cells:
            if isinstance(cell, ElasticCell):
                cell.configure(live)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(self.resize_input(x))
        for cell in self.cells:
            x = cell(x)
        return self.classifier(self.lastact(x).mean((2, 3)))

    def mixable_layers(self) -> list[MixableLayer]:
        """Every cell (`conv`): one op per (edge, convolution), its weight the only source."""
        return [MixableLayer("conv", f"cells.{index}",
                             tuple((f"cells.{index}.convs.{edge}.{op}.conv.weight",)
                                   for edge, ops in cell.convs.items() for op in ops))
                for index, cell in enumerate(self.cells) if isinstance(cell, ElasticCell)]

    @torch.no_grad()
    def _build_static(self) -> StaticCell201Net:
        conv, bn = self.stem
        lastact = nn.Sequential(self.lastact[0].to_static(self.lastact[0].num_features), nn.ReLU())
        return StaticCell201Net(nn.Sequential(conv.to_static(), bn.to_static(conv.out_channels)),
                                nn.ModuleList([cell.to_static() for cell in self.cells]),
                                lastact, self.classifier.to_static())
