"""`attentive_mbv3`: the AttentiveNAS / AlphaNet supernet's space.

A stem of elastic width, stages of MBConv blocks with elastic depth and width and one kernel
size and one expand ratio per stage (tied over the stage's blocks), a shortcut on every block
(`search_spaces/ops/attentive.py`), then MobileNetV3's head: a 1x1 expansion to 6x the last
stage's width with BN, global pooling, a 1x1 feature-mix conv of elastic width (no BN, no
bias), dropout and the classifier. Swish by default everywhere; inputs of another size are
resized bicubically (`interpolation`).

Arch keys: `resolution`, `stem_width`, `stage{i}.depth`, `stage{i}.width`,
`stage{i}.kernel_size`, `stage{i}.expand_ratio`, `head_width`. AlphaNet's released models are
named archs (`alphanet_a0` ... `alphanet_a6`, `alphanet_a5_1`: `search_spaces/alphanet_models.py`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, NamedTuple

import torch
from torch import nn

from nas.core.arch import Arch
from nas.core.errors import ArchError, ConfigError
from nas.core.preprocessing import INTERPOLATIONS
from nas.core.registry import SPACES
from search_spaces.alphanet_models import ALPHANET_MODELS
from search_spaces.base import ArchSpace, LayerCost, Supernet
from search_spaces.ops import ElasticConv2d, ElasticLinear, conv_macs, conv_output_size, se_reduced_channels
from search_spaces.ops.attentive import (
    ACTIVATIONS,
    ElasticAttentiveBlock,
    ElasticConvNormAct,
    expanded_channels,
    make_activation,
)


@dataclass(frozen=True)
class AttentiveMbv3Options:
    """Options of the `attentive_mbv3` space (`space.options` in YAML); lists of lists are per stage."""

    resolutions: tuple[int, ...] = (24, 28)
    stem_widths: tuple[int, ...] = (8, 16)
    stem_stride: int = 2
    depths: tuple[tuple[int, ...], ...] = ((1, 2), (1, 2), (1, 2))
    widths: tuple[tuple[int, ...], ...] = ((8, 16), (16, 24), (24, 32))
    kernel_sizes: tuple[tuple[int, ...], ...] = ((3,), (3, 5), (3, 5))
    expand_ratios: tuple[tuple[float, ...], ...] = ((1,), (4, 6), (6,))
    strides: tuple[int, ...] = (1, 2, 2)
    se: tuple[bool, ...] = (False, False, True)
    activations: tuple[str, ...] = ("swish", "swish", "swish")
    stem_activation: str = "swish"
    head_activation: str = "swish"
    head_expand: int = 6        # the final 1x1 expansion: this times the last stage's width
    head_widths: tuple[int, ...] = (32, 48)    # the feature-mix conv after pooling (their `last_conv`)
    dropout: float = 0.0        # before the classifier, in training
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        problems = []
        stages = len(self.depths)
        for name in ("widths", "kernel_sizes", "expand_ratios", "strides", "se", "activations"):
            if len(getattr(self, name)) != stages:
                problems.append(f"{name}: needs one entry per stage ({stages}, as depths), "
                                f"got {len(getattr(self, name))}")
        for name in ("resolutions", "stem_widths", "head_widths"):
            if not getattr(self, name) or any(v <= 0 for v in getattr(self, name)):
                problems.append(f"{name}: must be a non-empty list of positive integers")
        for name in ("depths", "widths", "kernel_sizes", "expand_ratios"):
            for i, values in enumerate(getattr(self, name)):
                if not values or any(v <= 0 for v in values):
                    problems.append(f"{name}[{i}]: must be a non-empty list of positive numbers")
                elif name == "kernel_sizes" and any(k % 2 == 0 for k in values):
                    problems.append(f"kernel_sizes[{i}]: must be odd, got {list(values)}")
                elif name == "expand_ratios" and min(values) < 1:
                    problems.append(f"expand_ratios[{i}]: must be >= 1, got {list(values)}")
        if self.stem_stride not in (1, 2) or any(s not in (1, 2) for s in self.strides):
            problems.append("stem_stride, strides: each stride must be 1 or 2")
        if self.head_expand <= 0:
            problems.append(f"head_expand: must be a positive integer, got {self.head_expand}")
        if not 0 <= self.dropout < 1:
            problems.append(f"dropout: must be in [0, 1), got {self.dropout}")
        names = [*self.activations, self.stem_activation, self.head_activation]
        bad_acts = [a for a in names if a not in ACTIVATIONS]
        if bad_acts:
            problems.append(f"activations, stem_activation, head_activation: unknown {bad_acts}; "
                            f"choose from {sorted(ACTIVATIONS)}")
        if self.interpolation not in INTERPOLATIONS:
            problems.append(f"interpolation: unknown '{self.interpolation}'; choose from {list(INTERPOLATIONS)}")
        if problems:
            raise ConfigError(problems)


class BlockShape(NamedTuple):
    """One active block: stage, index, in/out widths, expand ratio, kernel size, stride."""

    stage: int
    index: int
    cin: int
    cout: int
    expand_ratio: float
    kernel_size: int
    stride: int


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


@SPACES.register("attentive_mbv3", options=AttentiveMbv3Options)
class AttentiveMbv3Space(ArchSpace):
    """AttentiveNAS's choices (per-stage kernel and expand ratio) and their analytic costs.

    Costs count what AttentiveNAS's own counter counts: convolutions (SE and the shortcut
    projections included) and the classifier, not BN, activations or pooling.
    """

    name = "attentive_mbv3"

    def __init__(self, options: AttentiveMbv3Options, in_chans: int, num_classes: int):
        self.options, self.in_chans, self.num_classes = options, in_chans, num_classes
        self.num_stages = len(options.depths)
        self.interpolation = options.interpolation
        choices: dict[str, tuple] = {"resolution": tuple(sorted(options.resolutions)),
                                     "stem_width": tuple(sorted(options.stem_widths))}
        for i in range(self.num_stages):
            choices[f"stage{i}.depth"] = tuple(sorted(options.depths[i]))
            choices[f"stage{i}.width"] = tuple(sorted(options.widths[i]))
            choices[f"stage{i}.kernel_size"] = tuple(sorted(options.kernel_sizes[i]))
            choices[f"stage{i}.expand_ratio"] = tuple(sorted(_number(e) for e in options.expand_ratios[i]))
        choices["head_width"] = tuple(sorted(options.head_widths))
        super().__init__(choices)

    def input_size(self, arch: Mapping[str, Any]) -> int:
        return int(arch["resolution"])

    def arch_from_text(self, text: str) -> Arch | None:
        """A released AlphaNet model by name (`alphanet_a0` ... `alphanet_a6`, `alphanet_a5_1`),
        where this space holds it (the `imagenet_alphanet` space holds them all)."""
        model = ALPHANET_MODELS.get(text.strip().lower())
        if model is None:
            return None
        try:
            return self.canonical(model.arch())
        except ArchError:
            return None

    def arch_label(self, arch: Mapping[str, Any]) -> str | None:
        """The released AlphaNet model `arch` is, if it is one."""
        arch = self.canonical(arch)
        return next((name for name in ALPHANET_MODELS if self.arch_from_text(name) == arch), None)

    def expands(self, stage: int) -> bool:
        """Whether the stage's blocks have an expansion conv (not when its only expand ratio is 1)."""
        return max(self.options.expand_ratios[stage]) != 1

    def key_parameters(self, key: str) -> tuple[str, ...]:
        """A stage's kernel size owns its depthwise convs; its expand ratio, width and depth the
        whole stage; the stem width the stem, the head width the feature-mix conv."""
        if key.startswith("stage"):
            stage, choice = key.split(".")
            blocks = range(max(self.options.depths[int(stage[len("stage"):])]))
            prefix = f"blocks.{stage[len('stage'):]}"
            return tuple(f"{prefix}.{j}.conv_dw." for j in blocks) if choice == "kernel_size" else (f"{prefix}.",)
        return {"stem_width": ("stem.",), "head_width": ("feature_mix.",)}.get(key, ())

    def blocks(self, arch: Mapping[str, Any]) -> Iterator[BlockShape]:
        """Every active block of `arch`."""
        width = arch["stem_width"]
        for i in range(self.num_stages):
            out = arch[f"stage{i}.width"]
            for j in range(arch[f"stage{i}.depth"]):
                yield BlockShape(i, j, width, out, arch[f"stage{i}.expand_ratio"], arch[f"stage{i}.kernel_size"],
                                 self.options.strides[i] if j == 0 else 1)
                width = out

    def layers(self, arch: Mapping[str, Any]) -> list[LayerCost]:
        arch = self.canonical(arch)
        o = self.options
        size, c, stem = arch["resolution"], self.in_chans, arch["stem_width"]
        out = conv_output_size(size, 3, o.stem_stride)
        layers = [LayerCost(f"stem:{c}x{size}x{size}:{stem}:k3:s{o.stem_stride}:{o.stem_activation}",
                            conv_macs(c, stem, 3, (out, out)), c * stem * 9 + 2 * stem, (c, size, size), ("stem",))]
        size = out
        for block in self.blocks(arch):
            layers.append(self._block_cost(block, size))
            size = conv_output_size(size, block.kernel_size, block.stride)
        last = arch[f"stage{self.num_stages - 1}.width"]
        expanded, head = last * o.head_expand, arch["head_width"]
        layers.append(LayerCost(f"final_expand:{last}x{size}x{size}:{expanded}:{o.head_activation}",
                                size * size * last * expanded, last * expanded + 2 * expanded,
                                (last, size, size), ("final_expand",)))
        layers.append(LayerCost(f"head:{expanded}x{size}x{size}:{head}:{self.num_classes}:{o.head_activation}",
                                expanded * head + head * self.num_classes,
                                expanded * head + head * self.num_classes + self.num_classes,
                                (expanded, size, size),
                                ("global_pool", "feature_mix", "act_head", "flatten", "dropout", "classifier")))
        return layers

    def _block_cost(self, block: BlockShape, size: int) -> LayerCost:
        i, cin, cout, kernel = block.stage, block.cin, block.cout, block.kernel_size
        expands = self.expands(i)
        mid = expanded_channels(cin, block.expand_ratio) if expands else cin
        out = conv_output_size(size, kernel, block.stride)
        macs = conv_macs(mid, mid, kernel, (out, out), groups=mid) + out * out * mid * cout
        params = mid * kernel * kernel + 2 * mid + mid * cout + 2 * cout
        if expands:
            macs += size * size * cin * mid
            params += cin * mid + 2 * mid
        se = self.options.se[i]
        if se:
            rd = se_reduced_channels(mid)
            macs += 2 * mid * rd
            params += 2 * mid * rd + rd + mid
        if cin != cout:                       # the shortcut's 1x1 projection
            macs += out * out * cin * cout
            params += cin * cout
        return LayerCost(f"attentive_mbconv:{cin}x{size}x{size}:{cout}:e{mid}:x{int(expands)}:k{kernel}:"
                         f"s{block.stride}:se{int(se)}:{self.options.activations[i]}",
                         macs, params, (cin, size, size), (f"blocks.{i}.{block.index}",))

    def build_supernet(self) -> "AttentiveMbv3Supernet":
        return AttentiveMbv3Supernet(self)


class StaticAttentiveNet(nn.Module):
    """A plain subnet of the `attentive_mbv3` space (no input resizing: feed it its resolution)."""

    def __init__(self, stem: nn.Module, blocks: nn.Sequential, final_expand: nn.Module, feature_mix: nn.Conv2d,
                 head_activation: str, dropout: float, classifier: nn.Linear):
        super().__init__()
        self.stem, self.blocks, self.final_expand = stem, blocks, final_expand
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.feature_mix, self.act_head = feature_mix, make_activation(head_activation)
        self.flatten, self.dropout, self.classifier = nn.Flatten(1), nn.Dropout(dropout), classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.final_expand(self.blocks(self.stem(x)))
        x = self.act_head(self.feature_mix(self.global_pool(x)))
        return self.classifier(self.dropout(self.flatten(x)))


class AttentiveMbv3Supernet(Supernet):
    """Weight-sharing AttentiveNAS network: every layer at its largest shape, sliced per arch.

    Parameter names follow the static export; `nas import alphanet` maps AlphaNet's
    checkpoint onto them.
    """

    def __init__(self, space: AttentiveMbv3Space):
        super().__init__(space)
        o = space.options
        self.stem = ElasticConvNormAct(space.in_chans, max(o.stem_widths), 3, o.stem_stride, o.stem_activation)
        stages, in_widths = [], set(o.stem_widths)
        for i in range(space.num_stages):
            blocks = []
            for j in range(max(o.depths[i])):
                max_in = max(in_widths)
                expand = max(o.expand_ratios[i]) if space.expands(i) else 1
                blocks.append(ElasticAttentiveBlock(
                    max_in, max(o.widths[i]), expand, max(o.kernel_sizes[i]), o.strides[i] if j == 0 else 1,
                    o.se[i], o.activations[i], space.expands(i),
                    has_projection=j == 0 and any(a != b for a in in_widths for b in o.widths[i])))
                in_widths = set(o.widths[i])
            stages.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*stages)
        last = max(o.widths[-1])
        self.final_expand = ElasticConvNormAct(last, last * o.head_expand, 1, 1, o.head_activation)
        self.feature_mix = ElasticConv2d(last * o.head_expand, max(o.head_widths), 1)
        self.act_head = make_activation(o.head_activation)
        self.classifier = ElasticLinear(max(o.head_widths), space.num_classes)
        self.depths = [max(d) for d in o.depths]
        self._zero_block_gammas()
        self.set_active(space.max())

    def _zero_block_gammas(self) -> None:
        """AttentiveNAS: every block starts as its shortcut (the last BN's scale 0)."""
        for stage in self.blocks:
            for block in stage:
                nn.init.zeros_(block.bn_pwl.weight)

    def _configure(self, arch: dict) -> None:
        space = self.space
        self.stem.configure(space.in_chans, arch["stem_width"])
        self.depths = [arch[f"stage{i}.depth"] for i in range(space.num_stages)]
        for block in space.blocks(arch):
            self.blocks[block.stage][block.index].configure(block.cin, block.cout, block.expand_ratio,
                                                            block.kernel_size)
        last = arch[f"stage{space.num_stages - 1}.width"]
        expanded = last * space.options.head_expand
        self.final_expand.configure(last, expanded)
        self.feature_mix.configure(expanded, arch["head_width"])
        self.classifier.configure(arch["head_width"], space.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(self.resize_input(x))
        for stage, depth in zip(self.blocks, self.depths):
            for block in stage[:depth]:
                x = block(x)
        x = self.final_expand(x)
        x = self.act_head(self.feature_mix(x.mean((2, 3), keepdim=True))).flatten(1)
        if self.training and self.space.options.dropout > 0:
            x = nn.functional.dropout(x, self.space.options.dropout)
        return self.classifier(x)

    def _build_static(self) -> StaticAttentiveNet:
        o = self.space.options
        stages = [nn.Sequential(*[block.to_static() for block in stage[:depth]])
                  for stage, depth in zip(self.blocks, self.depths)]
        return StaticAttentiveNet(self.stem.to_static(), nn.Sequential(*stages), self.final_expand.to_static(),
                                  self.feature_mix.to_static(), o.head_activation, o.dropout,
                                  self.classifier.to_static())

    def timm_unavailable(self) -> str:
        """Why no timm model rebuilds an export of this space."""
        return ("no timm.json: timm cannot rebuild this block (its shortcut pools 2x2, then projects by a 1x1 conv "
                "without BN where widths change); model.pt2 and model.onnx hold the model")
