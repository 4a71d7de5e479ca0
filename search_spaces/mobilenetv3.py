"""`mobilenetv3`: an elastic MobileNetV3 space (Once-for-All / BigNAS style).

Stem, then stages of inverted-residual blocks with elastic depth per stage, width per stage,
kernel size and expand ratio per block (from one list for every stage, or a list per stage),
and the input resolution; SE and hard-swish where the options put them; a 1x1 feature-mix conv,
global pooling, a `conv_head` without BN (biased or not), dropout and the classifier, as in
timm's MobileNetV3. Widths are multiples of 8 and expanded/SE widths are rounded as timm rounds
them, so every export is also a timm `MobileNetV3` (`timm_config`). A block at expand ratio 1
has no expansion conv (timm's `ds` block); `kernel_transform` makes smaller kernels
Once-for-All's learned transformations of the largest instead of its centre crops. With a
fixed one-block first stage (kernel 3, expand ratio 1, width 16), no head bias and dropout 0.1
the space is exactly Once-for-All's `OFAMobileNetV3` (the `imagenet_ofa_mbv3_*` configs).

Arch keys: `resolution`, `stage{i}.depth`, `stage{i}.width`, `stage{i}.block{j}.kernel_size`,
`stage{i}.block{j}.expand_ratio`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from nas.core.errors import ConfigError
from nas.core.registry import SPACES
from search_spaces.base import ArchSpace, Gate, LayerCost, MixableLayer, Supernet
from search_spaces.ops import (
    ElasticBatchNorm2d,
    ElasticConv2d,
    conv_macs,
    conv_output_size,
    conv_params,
    se_reduced_channels,
)
from search_spaces.ops.soft import soft_prefix_mask
from search_spaces.ops.mbconv import (
    ACTIVATIONS,
    ElasticConvBnAct,
    ElasticInvertedResidual,
    expanded_width,
    make_activation,
)


@dataclass(frozen=True)
class MobileNetV3Options:
    """Options of the `mobilenetv3` space (`space.options` in YAML); lists are per stage."""

    resolutions: tuple[int, ...] = (24, 28)
    stem_stride: int = 2
    stem_width: int = 16
    kernel_sizes: tuple[int, ...] | tuple[tuple[int, ...], ...] = (3, 5, 7)     # for every stage, or per stage
    expand_ratios: tuple[float, ...] | tuple[tuple[float, ...], ...] = (3, 4, 6)
    depths: tuple[tuple[int, ...], ...] = ((1,), (1, 2, 3), (1, 2, 3), (1, 2, 3))
    widths: tuple[tuple[int, ...], ...] = ((16,), (16, 24), (24, 32, 40), (40, 48, 64))
    strides: tuple[int, ...] = (1, 2, 2, 1)
    se: tuple[bool, ...] = (False, True, False, True)
    activations: tuple[str, ...] = ("relu", "relu", "hswish", "hswish")
    head_width: int = 192       # the 1x1 feature-mix conv after the last stage (timm's `cn` block)
    num_features: int = 256     # width of the conv_head after pooling
    head_bias: bool = True      # conv_head has a bias (timm's MobileNetV3; Once-for-All's has none)
    dropout: float = 0.0        # dropout rate before the classifier (training only)
    kernel_transform: bool = False   # smaller kernels: Once-for-All's learned transformations, not crops

    def __post_init__(self) -> None:
        problems = []
        stages = len(self.depths)
        for name in ("widths", "strides", "se", "activations"):
            if len(getattr(self, name)) != stages:
                problems.append(f"{name}: needs one entry per stage ({stages}, as depths), "
                                f"got {len(getattr(self, name))}")
        if not self.resolutions or any(v <= 0 for v in self.resolutions):
            problems.append("resolutions: must be a non-empty list of positive numbers")
        for name in ("kernel_sizes", "expand_ratios"):
            value = getattr(self, name)
            if value and isinstance(value[0], tuple) and len(value) != stages:
                problems.append(f"{name}: a list per stage needs one per stage ({stages}, as depths), "
                                f"got {len(value)}")
                continue
            for i in range(stages):
                values = _per_stage(value, i)
                where = f"{name}[{i}]" if value and isinstance(value[0], tuple) else name
                if not values or any(v <= 0 for v in values):
                    problems.append(f"{where}: must be a non-empty list of positive numbers")
                elif name == "kernel_sizes" and any(k % 2 == 0 for k in values):
                    problems.append(f"{where}: must be odd, got {list(values)}")
        if not 0.0 <= self.dropout < 1.0:
            problems.append(f"dropout: must be in [0, 1), got {self.dropout}")
        for i, depths in enumerate(self.depths):
            if not depths or any(d < 1 for d in depths):
                problems.append(f"depths[{i}]: must be a non-empty list of depths >= 1")
        for i, widths in enumerate(self.widths):
            if not widths or any(w <= 0 or w % 8 for w in widths):
                problems.append(f"widths[{i}]: must be positive multiples of 8, got {list(widths)}")
        for name in ("stem_width", "head_width", "num_features"):
            if getattr(self, name) <= 0 or getattr(self, name) % 8:
                problems.append(f"{name}: must be a positive multiple of 8, got {getattr(self, name)}")
        if self.stem_stride not in (1, 2) or any(s not in (1, 2) for s in self.strides):
            problems.append("stem_stride, strides: each stride must be 1 or 2")
        bad_acts = [a for a in self.activations if a not in ACTIVATIONS]
        if bad_acts:
            problems.append(f"activations: unknown {bad_acts}; choose from {sorted(ACTIVATIONS)}")
        if problems:
            raise ConfigError(list(dict.fromkeys(problems)))   # a flat list checked per stage: said once

    def stage_kernel_sizes(self, stage: int) -> tuple[int, ...]:
        """The kernel sizes the blocks of `stage` choose from."""
        return _per_stage(self.kernel_sizes, stage)

    def stage_expand_ratios(self, stage: int) -> tuple[float, ...]:
        """The expand ratios the blocks of `stage` choose from (integral ones as ints)."""
        return tuple(int(e) if float(e).is_integer() else e for e in _per_stage(self.expand_ratios, stage))


def _per_stage(values: tuple, stage: int) -> tuple:
    """`values[stage]` of a list per stage, or the one list every stage shares."""
    return tuple(values[stage]) if values and isinstance(values[0], tuple) else tuple(values)


@SPACES.register("mobilenetv3", options=MobileNetV3Options)
class MobileNetV3Space(ArchSpace):
    """Elastic MobileNetV3 choices and their analytic costs."""

    name = "mobilenetv3"

    def __init__(self, options: MobileNetV3Options, in_chans: int, num_classes: int):
        self.options, self.in_chans, self.num_classes = options, in_chans, num_classes
        self.num_stages = len(options.depths)
        choices: dict[str, tuple] = {"resolution": tuple(sorted(options.resolutions))}
        gates: dict[str, Gate] = {}
        for i in range(self.num_stages):
            choices[f"stage{i}.depth"] = tuple(sorted(options.depths[i]))
            choices[f"stage{i}.width"] = tuple(sorted(options.widths[i]))
            for j in range(max(options.depths[i])):
                for key, values in (("kernel_size", options.stage_kernel_sizes(i)),
                                    ("expand_ratio", options.stage_expand_ratios(i))):
                    name = f"stage{i}.block{j}.{key}"
                    choices[name] = tuple(sorted(values))
                    gates[name] = Gate(f"stage{i}.depth", j)
        super().__init__(choices, gates)

    def input_size(self, arch: Mapping[str, Any]) -> int:
        return int(arch["resolution"])

    def splittable_keys(self) -> tuple[str, ...]:
        """Every block's kernel size, then every block's expand ratio."""
        blocks = [f"stage{i}.block{j}" for i in range(self.num_stages) for j in range(max(self.options.depths[i]))]
        return tuple(f"{b}.kernel_size" for b in blocks) + tuple(f"{b}.expand_ratio" for b in blocks)

    def key_parameters(self, key: str) -> tuple[str, ...]:
        """A kernel size owns its block's depthwise convolution; an expand ratio the whole
        block (every layer of it is sliced by the expanded width)."""
        stage, block, choice = key.split(".")
        prefix = f"blocks.{stage[len('stage'):]}.{block[len('block'):]}."
        return (prefix + "conv_dw.",) if choice == "kernel_size" else (prefix,)

    def blocks(self, arch: Mapping[str, Any]):
        """(stage, block, in width, out width, expand ratio, kernel size, stride) of every active block."""
        width = self.options.stem_width
        for i in range(self.num_stages):
            out = arch[f"stage{i}.width"]
            for j in range(arch[f"stage{i}.depth"]):
                yield (i, j, width, out, arch[f"stage{i}.block{j}.expand_ratio"],
                       arch[f"stage{i}.block{j}.kernel_size"], self.options.strides[i] if j == 0 else 1)
                width = out

    def layers(self, arch: Mapping[str, Any]) -> list[LayerCost]:
        arch = self.canonical(arch)
        o = self.options
        size, c = arch["resolution"], self.in_chans
        out = conv_output_size(size, 3, o.stem_stride)
        layers = [LayerCost(f"stem:{c}x{size}x{size}:{o.stem_width}:k3:s{o.stem_stride}",
                            conv_macs(c, o.stem_width, 3, (out, out)),
                            conv_params(c, o.stem_width, 3) + 2 * o.stem_width,
                            (c, size, size), ("conv_stem", "bn1", "act1"))]
        size = out
        for i, j, cin, cout, expand, kernel, stride in self.blocks(arch):
            mid = expanded_width(cin, expand)
            out = conv_output_size(size, kernel, stride)
            se = o.se[i]
            macs = conv_macs(mid, mid, kernel, (out, out), groups=mid) + out * out * mid * cout
            params = (mid * kernel * kernel + 2 * mid) + (mid * cout + 2 * cout)
            if expand != 1:
                macs += size * size * cin * mid
                params += cin * mid + 2 * mid
            if se:
                rd = se_reduced_channels(mid)
                macs += 2 * mid * rd
                params += 2 * mid * rd + rd + mid
            kind = f"mbconv:{cin}x{size}x{size}:{cout}:e{mid}" if expand != 1 else f"dsconv:{cin}x{size}x{size}:{cout}"
            layers.append(LayerCost(f"{kind}:k{kernel}:s{stride}:se{int(se)}:{o.activations[i]}",
                                    macs, params, (cin, size, size), (f"blocks.{i}.{j}",)))
            size = out
        last = arch[f"stage{self.num_stages - 1}.width"]
        layers.append(LayerCost(f"mix:{last}x{size}x{size}:{o.head_width}",
                                size * size * last * o.head_width, last * o.head_width + 2 * o.head_width,
                                (last, size, size), (f"blocks.{self.num_stages}.0",)))
        head_params = (o.head_width * o.num_features + (o.num_features if o.head_bias else 0)
                       + o.num_features * self.num_classes + self.num_classes)
        layers.append(LayerCost(f"head:{o.head_width}x{size}x{size}:{o.num_features}:{self.num_classes}",
                                o.head_width * o.num_features + o.num_features * self.num_classes,
                                head_params, (o.head_width, size, size),
                                ("global_pool", "conv_head", "act2", "flatten", "dropout", "classifier")))
        return layers

    def build_supernet(self) -> "MobileNetV3Supernet":
        return MobileNetV3Supernet(self)


class StaticMobileNetV3(nn.Module):
    """A plain MobileNetV3 subnet with timm's module names (loads into timm strictly)."""

    def __init__(self, conv_stem: nn.Module, bn1: nn.Module, blocks: nn.Sequential, conv_head: nn.Module,
                 classifier: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.conv_stem, self.bn1, self.act1 = conv_stem, bn1, make_activation("hswish")
        self.blocks = blocks
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.conv_head, self.act2 = conv_head, make_activation("hswish")
        self.flatten = nn.Flatten(1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.act1(self.bn1(self.conv_stem(x))))
        x = self.act2(self.conv_head(self.global_pool(x)))
        return self.classifier(self.dropout(self.flatten(x)))


class MobileNetV3Supernet(Supernet):
    """Weight-sharing MobileNetV3: every block at its largest shape, sliced per arch."""

    def __init__(self, space: MobileNetV3Space):
        super().__init__(space)
        o = space.options
        self.conv_stem = ElasticConv2d(space.in_chans, o.stem_width, 3, o.stem_stride)
        self.bn1 = ElasticBatchNorm2d(o.stem_width)
        self.act1 = make_activation("hswish")
        stages, width = [], o.stem_width
        for i in range(space.num_stages):
            blocks = []
            for j in range(max(o.depths[i])):
                max_in = width if j == 0 else max(o.widths[i])
                kernel_sizes = o.stage_kernel_sizes(i)
                blocks.append(ElasticInvertedResidual(
                    max_in, max(o.widths[i]), max(o.stage_expand_ratios(i)), max(kernel_sizes),
                    o.strides[i] if j == 0 else 1, o.se[i], o.activations[i], kernel_sizes, o.kernel_transform))
            stages.append(nn.Sequential(*blocks))
            width = max(o.widths[i])
        stages.append(nn.Sequential(ElasticConvBnAct(width, o.head_width, 1, 1, "hswish")))
        self.blocks = nn.Sequential(*stages)
        self.conv_head = nn.Conv2d(o.head_width, o.num_features, 1, bias=o.head_bias)
        self.act2 = make_activation("hswish")
        self.dropout = nn.Dropout(o.dropout)
        self.classifier = nn.Linear(o.num_features, space.num_classes)
        self.depths = [max(d) for d in o.depths]
        self._soft: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None   # set_soft's masks, gates
        self._zero_residual_gammas()
        self.set_active(space.max())

    def _zero_residual_gammas(self) -> None:
        """BigNAS: blocks that always have a shortcut start as the identity (last BN scale 0)."""
        for stage in self.blocks[:-1]:
            for block in stage[1:]:
                nn.init.zeros_(block.bn3.weight)

    def _configure(self, arch: dict) -> None:
        self._soft = None
        self.depths = [arch[f"stage{i}.depth"] for i in range(self.space.num_stages)]
        for i, j, cin, cout, expand, kernel, _ in self.space.blocks(arch):
            self.blocks[i][j].configure(cin, cout, expand, kernel)
        last = arch[f"stage{self.space.num_stages - 1}.width"]
        self.blocks[-1][0].configure(last, self.space.options.head_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._soft is not None:
            return self._soft_forward(x)
        x = self.act1(self.bn1(self.conv_stem(self.resize_input(x))))
        for stage, depth in zip(self.blocks, self.depths):
            for block in stage[:depth]:
                x = block(x)
        return self._head(x)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks[-1][0](x)
        x = self.act2(self.conv_head(x.mean((2, 3), keepdim=True)))
        return self.classifier(self.dropout(x.flatten(1)))

    def soft_keys(self) -> tuple[str, ...]:
        """Stage widths, stage depths and expand ratios (kernel sizes and resolution stay hard)."""
        keys = []
        for i, depth in enumerate(self.space.options.depths):
            keys += [f"stage{i}.depth", f"stage{i}.width"]
            keys += [f"stage{i}.block{j}.expand_ratio" for j in range(max(depth))]
        return tuple(keys)

    def set_soft(self, arch: Mapping[str, Any], weights: Mapping[str, torch.Tensor]) -> dict:
        """Widest widths, depths and expand ratios, masked by `weights` (see `Supernet.set_soft`).

        Stage outputs are masked to the stage's width choices; each block's expanded channels
        to the widths its expand ratios give on `arch`'s input width; block j of a stage is
        gated by `P(depth > j)` (`x + gate * (block(x) - x)`). An approximation of the hard
        subnet for a one-hot: the SE reduction and a stage's first shortcut follow the widest
        configuration.
        """
        space = self.space
        choices, arch = space.choices(), space.canonical(arch)
        configured = self.set_active({**arch, **{key: choices[key][-1] for key in self.soft_keys()}})
        masks, gates, cin = [], [], space.options.stem_width
        for i in range(space.num_stages):
            widths, depths = choices[f"stage{i}.width"], choices[f"stage{i}.depth"]
            masks.append(soft_prefix_mask(weights[f"stage{i}.width"], widths, max(widths)).view(1, -1, 1, 1))
            gates.append(soft_prefix_mask(weights[f"stage{i}.depth"], depths, max(depths)))
            for j, block in enumerate(self.blocks[i]):
                key = f"stage{i}.block{j}.expand_ratio"
                mids = [expanded_width(cin, e) for e in choices[key]]
                block.mid_mask = soft_prefix_mask(weights[key], mids, block.conv_dw.max_channels)
                cin = arch[f"stage{i}.width"]
        self._soft = (masks, gates)
        return configured

    def _soft_forward(self, x: torch.Tensor) -> torch.Tensor:
        masks, gates = self._soft
        x = self.act1(self.bn1(self.conv_stem(self.resize_input(x))))
        for stage, mask, gate in zip(self.blocks, masks, gates):
            for j, block in enumerate(stage):
                y = block(x) * mask
                x = y if j == 0 else x + gate[j] * (y - x)
        return self._head(x)

    def mixable_layers(self) -> list[MixableLayer]:
        """The two 1x1 convolutions (`pointwise`: expand and project) of every inverted residual
        that has an expansion conv."""
        return [MixableLayer("pointwise", f"blocks.{i}.{j}",
                             ((f"blocks.{i}.{j}.conv_pw.weight",), (f"blocks.{i}.{j}.conv_pwl.weight",)))
                for i in range(self.space.num_stages) for j in range(len(self.blocks[i]))
                if self.blocks[i][j].conv_pw is not None]

    def _build_static(self) -> StaticMobileNetV3:
        stages = [nn.Sequential(*[block.to_static() for block in stage[:depth]])
                  for stage, depth in zip(self.blocks, self.depths)]
        stages.append(nn.Sequential(self.blocks[-1][0].to_static()))
        head = nn.Conv2d(self.conv_head.in_channels, self.conv_head.out_channels, 1,
                         bias=self.conv_head.bias is not None)
        classifier = nn.Linear(self.classifier.in_features, self.classifier.out_features)
        head.load_state_dict(self.conv_head.state_dict())
        classifier.load_state_dict(self.classifier.state_dict())
        return StaticMobileNetV3(self.conv_stem.to_static(), self.bn1.to_static(self.conv_stem.out_channels),
                                 nn.Sequential(*stages), head, classifier, self.space.options.dropout)

    def timm_config(self, arch: Mapping[str, Any]) -> dict | None:
        """timm `MobileNetV3` definition of `arch` (stem stride 2 only, as timm's stem is fixed)."""
        o, arch = self.space.options, self.space.canonical(arch)
        if o.stem_stride != 2:
            return None
        arch_def: list[list[str]] = [[] for _ in range(self.space.num_stages)]
        for i, _, _, cout, expand, kernel, stride in self.space.blocks(arch):
            act = "_nre" if o.activations[i] == "relu" else ""
            se = "_se0.25" if o.se[i] else ""
            if expand == 1:
                arch_def[i].append(f"ds_r1_k{kernel}_s{stride}_c{cout}{se}{act}")
            else:
                arch_def[i].append(f"ir_r1_k{kernel}_s{stride}_e{expand:g}_c{cout}{se}{act}")
        arch_def.append([f"cn_r1_k1_s1_c{o.head_width}"])
        return {"model": "MobileNetV3", "arch_def": arch_def,
                "kwargs": {"num_classes": self.space.num_classes, "in_chans": self.space.in_chans,
                           "stem_size": o.stem_width, "fix_stem": True, "num_features": o.num_features,
                           "head_bias": o.head_bias, "drop_rate": o.dropout, "act_layer": "hard_swish",
                           "se_layer": {"gate_layer": "hard_sigmoid", "force_act_layer": "relu",
                                        "rd_round_fn": "round_channels"}},
                "input_size": [self.space.in_chans, arch["resolution"], arch["resolution"]]}
