"""Once-for-All's published MobileNetV3 supernets (`ofa_mbv3_d234_e346_k357_w1.0`, `_w1.2`).

The file is what OFA's model zoo downloads: `torch.save({"state_dict": ...})` of an
`OFAMobileNetV3(ks_list=[3, 5, 7], expand_ratio_list=[3, 4, 6], depth_list=[2, 3, 4])`; a
bare state dict is read too. Keys are read in every spelling OFA's own
`OFAMobileNetV3.load_state_dict` accepts: `.mobile_inverted_conv.` for `.conv.`, and the
dynamic layers' nested `.conv.conv.weight`, `.bn.bn.`, `.linear.linear.` or their flat forms.
The width comes from the stem's shape (16 channels: w1.0, 24: w1.2) and picks the shipped
config (`imagenet_ofa_mbv3_w10` / `_w12`); the classes from the classifier's. The renaming is
mechanical, no tensor is reshaped: OFA's block 0 is stage 0, block n >= 1 is block j of stage
i where n = 1 + (the largest depths of stages 1..i-1) + j; `final_expand_layer` is the 1x1
feature-mix block, `feature_mix_layer` the conv_head.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from nas.core.config import load_config
from nas.core.errors import CheckpointError
from nas.engine.importing import IMPORTERS, Imported, first_few, read_weights_only
from search_spaces.base import ArchSpace

CONFIGS = {16: ("1.0", "imagenet_ofa_mbv3_w10"), 24: ("1.2", "imagenet_ofa_mbv3_w12")}   # by stem width
STEM = "first_conv.conv.weight"
# OFA's accepted spellings -> the flat one (OFA's load_state_dict maps between these).
SPELLINGS = ((".mobile_inverted_conv.", ".conv."), (".bn.bn.", ".bn."), (".conv.conv.weight", ".conv.weight"),
             (".linear.linear.", ".linear."))
# the parts of a nas inverted residual -> the flat OFA name inside `blocks.N.conv.`
BLOCK_PARTS = (("conv_pw.weight.tensor", "inverted_bottleneck.conv.weight"), ("bn1.", "inverted_bottleneck.bn."),
               ("conv_dw.weight.tensor", "depth_conv.conv.weight"), ("bn2.", "depth_conv.bn."),
               ("se.conv_reduce.weight.tensor", "depth_conv.se.fc.reduce.weight"),
               ("se.conv_reduce.bias.tensor", "depth_conv.se.fc.reduce.bias"),
               ("se.conv_expand.weight.tensor", "depth_conv.se.fc.expand.weight"),
               ("se.conv_expand.bias.tensor", "depth_conv.se.fc.expand.bias"),
               ("conv_pwl.weight.tensor", "point_linear.conv.weight"), ("bn3.", "point_linear.bn."))
TOP_PARTS = (("conv_stem.weight.tensor", STEM), ("bn1.", "first_conv.bn."),
             ("conv_head.weight", "feature_mix_layer.conv.weight"), ("classifier.", "classifier.linear."))


def flat_key(key: str) -> tuple[str, tuple[str, ...]]:
    """`key` in OFA's flat spelling, and the spellings it was written in."""
    used = []
    for spelled, flat in SPELLINGS:
        if spelled in key:
            key, used = key.replace(spelled, flat), used + [spelled.strip(".")]
    return key, tuple(used)


def ofa_key(nas_key: str, block_index: Mapping[tuple[int, int], int], mix_stage: int) -> str:
    """The flat OFA name of a `nas` supernet state-dict key."""
    for ours, theirs in TOP_PARTS:
        if nas_key.startswith(ours):
            return theirs + nas_key[len(ours):]
    match = re.fullmatch(r"blocks\.(\d+)\.(\d+)\.(.+)", nas_key)
    if match is None:
        raise KeyError(nas_key)
    stage, block, rest = int(match[1]), int(match[2]), match[3]
    if stage == mix_stage:
        return "final_expand_layer." + rest.replace("conv.weight.tensor", "conv.weight").replace("bn1.", "bn.")
    transform = re.fullmatch(r"conv_dw\.transforms\.(\d+to\d+)", rest)
    if transform:
        return f"blocks.{block_index[stage, block]}.conv.depth_conv.conv.{transform[1]}_matrix"
    for ours, theirs in BLOCK_PARTS:
        if rest.startswith(ours):
            return f"blocks.{block_index[stage, block]}.conv.{theirs}{rest[len(ours):]}"
    raise KeyError(nas_key)


def _state_dict(path: Path) -> dict[str, torch.Tensor]:
    raw = read_weights_only(path)
    state = raw["state_dict"] if isinstance(raw, Mapping) and "state_dict" in raw else raw
    if not isinstance(state, Mapping) or not state:
        raise CheckpointError(f"FILE: {path} holds a {type(state).__name__}, not a state dict (a mapping of names "
                              f"to tensors, or {{'state_dict': ...}} as OFA saves)")
    bad = [str(k) for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"FILE: {path}: not a state dict: {first_few(bad)} not a name with a tensor")
    return dict(state)


@IMPORTERS.register("ofa")
def read_ofa(path: Path, overrides: Sequence[str]) -> Imported:
    """An OFA MobileNetV3 checkpoint as a run of `imagenet_ofa_mbv3_w10` or `_w12` (see the module)."""
    from nas.engine.run import build_strategy

    given = _state_dict(path)
    flat: dict[str, torch.Tensor] = {}
    spellings: set[str] = set()
    for key, tensor in given.items():
        name, used = flat_key(key)
        flat[name] = tensor
        spellings.update(used)
    if STEM not in flat or flat[STEM].dim() != 4:
        raise CheckpointError(f"FILE: {path}: no {STEM} (the stem of an OFAMobileNetV3); keys start "
                              f"{first_few(list(given))}")
    stem = int(flat[STEM].shape[0])
    if stem not in CONFIGS:
        known = ", ".join(f"{c} channels: w{w}" for c, (w, _) in CONFIGS.items())
        raise CheckpointError(f"FILE: {path}: unknown width: the stem has {stem} channels (OFA's MobileNetV3: {known})")
    width, config_name = CONFIGS[stem]
    classes = flat.get("classifier.linear.weight")
    classes_set = [f"data.num_classes={int(classes.shape[0])}"] if classes is not None and classes.dim() == 2 else []
    config = load_config(config_name, [*classes_set, *overrides])
    strategy = build_strategy(config)
    expected = strategy.model_state_dict()
    options = config.space.options
    starts = [1]
    for depths in options.depths[1:]:
        starts.append(starts[-1] + max(depths))
    index = {(i, j): 0 if i == 0 else starts[i - 1] + j
             for i in range(len(options.depths)) for j in range(max(options.depths[i]))}
    names = {ofa_key(k, index, len(options.depths)): k for k in expected}
    missing = [k for k in names if k not in flat]
    extra = [k for k in flat if k not in names]
    if missing or extra:
        parts = [f"missing {first_few(missing)}" if missing else "", f"unexpected {first_few(extra)}" if extra else ""]
        raise CheckpointError(f"FILE: {path}: not OFA's w{width} MobileNetV3 (d234, e346, k357): "
                              f"{'; '.join(p for p in parts if p)}")
    shapes = [f"{k} {list(flat[k].shape)} (expected {list(expected[v].shape)})" for k, v in names.items()
              if flat[k].shape != expected[v].shape]
    if shapes:
        raise CheckpointError(f"FILE: {path}: not OFA's w{width} MobileNetV3 (d234, e346, k357): other shapes: "
                              f"{first_few(shapes)}")
    model = {ours: flat[theirs].to(expected[ours].dtype).clone() for theirs, ours in names.items()}
    strategy.load_model_state_dict(model)         # proves the state loads before anything is written
    record = {"config": config_name, "width": width, "num_classes": int(expected["classifier.weight"].shape[0]),
              "spellings": sorted(spellings) or ["flat"], "keys": len(given),
              "bn_statistics": "the checkpoint's (recalibrated on data.root by eval, search and export)"}
    return Imported(config, strategy.model_state_dict(), strategy.state_dict(), record)


def ofa_subnet(space: ArchSpace, arch: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of OFA's `set_active_subnet` (`ks`, `e`, `d`: per elastic block, per stage)
    and the `image_size` of an arch of an OFA space (stage 0 is OFA's fixed first block)."""
    arch = space.canonical(arch)
    stages = range(1, len(space.options.depths))
    blocks = [(i, j) for i in stages for j in range(max(space.options.depths[i]))]
    return {"ks": [arch[f"stage{i}.block{j}.kernel_size"] for i, j in blocks],
            "e": [arch[f"stage{i}.block{j}.expand_ratio"] for i, j in blocks],
            "d": [arch[f"stage{i}.depth"] for i in stages], "image_size": arch["resolution"]}
