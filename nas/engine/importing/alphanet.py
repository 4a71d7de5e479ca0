"""AlphaNet's released supernet (`alphanet_pretrained.pth.tar`) as weights of the `attentive_mbv3` space.

The file is AttentiveNAS's `AttentiveNasDynamicModel` state dict under `state_dict`, saved from
DistributedDataParallel (every key starts with `module.`), beside the training `args` in
PyTorch's legacy pickle format (read without running code: `safe_pickle`). The map is
mechanical, no reshapes: their block n is block j of stage i in the order of the stages' largest
depths; `bn_tracking.*` (two BN layers per BN that their training kept for the max and min
subnets, never used by a forward pass) is dropped; a block's shortcut projection is kept where
some arch uses it (the first block of a stage) and dropped where in and out widths are always
equal (their every block has one). Their BN was trained with momentum 0: the statistics in the
file are not the subnets' own, so BN must be recalibrated on data before any accuracy.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from nas.core.config import load_config
from nas.core.errors import CheckpointError, ConfigError, plural
from nas.engine.importing import IMPORTERS, Imported
from nas.engine.importing.safe_pickle import Inert, convert_command, read_published
from search_spaces.attentive_mbv3 import AttentiveMbv3Supernet

FORMAT = "alphanet"
CONFIG = "imagenet_alphanet"
RECALIBRATE_NOTE = ("AlphaNet trained BN with momentum 0, so the file's BN statistics are not the subnets' own: "
                    "recalibrate BN on your data before any accuracy (nas eval and nas export do, given data.root)")
BN_ENTRIES = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
SHOWN = 3


def _bn(theirs: str, ours: str) -> dict[str, str]:
    return {f"{theirs}.bn.{entry}": f"{ours}.{entry}" for entry in BN_ENTRIES}


def _conv(theirs: str, ours: str) -> dict[str, str]:
    return {f"{theirs}.conv.weight": f"{ours}.weight.tensor"}


def alphanet_names(supernet: AttentiveMbv3Supernet) -> tuple[dict[str, str], set[str]]:
    """(their key -> this supernet's state-dict key, their keys this supernet has no use for)."""
    names = {**_conv("first_conv.conv", "stem.conv"), **_bn("first_conv.bn", "stem.bn")}
    unused: set[str] = set()
    n = 0
    for i, stage in enumerate(supernet.blocks):
        for j, block in enumerate(stage):
            theirs, ours = f"blocks.{n}.mobile_inverted_conv", f"blocks.{i}.{j}"
            if block.expand is not None:
                names.update(_conv(f"{theirs}.inverted_bottleneck.conv", f"{ours}.expand.conv"))
                names.update(_bn(f"{theirs}.inverted_bottleneck.bn", f"{ours}.expand.bn"))
            names.update(_conv(f"{theirs}.depth_conv.conv", f"{ours}.conv_dw"))
            names.update(_bn(f"{theirs}.depth_conv.bn", f"{ours}.bn_dw"))
            if block.se is not None:
                for fc, conv in (("reduce", "conv_reduce"), ("expand", "conv_expand")):
                    for entry in ("weight", "bias"):
                        names[f"{theirs}.depth_conv.se.fc.{fc}.{entry}"] = f"{ours}.se.{conv}.{entry}.tensor"
            names.update(_conv(f"{theirs}.point_linear.conv", f"{ours}.conv_pwl"))
            names.update(_bn(f"{theirs}.point_linear.bn", f"{ours}.bn_pwl"))
            shortcut = f"blocks.{n}.shortcut.conv.conv.weight"
            if block.projection is not None:
                names[shortcut] = f"{ours}.projection.weight.tensor"
            else:
                unused.add(shortcut)
            n += 1
    names.update(_conv("last_conv.final_expand_layer.conv", "final_expand.conv"))
    names.update(_bn("last_conv.final_expand_layer.bn", "final_expand.bn"))
    names.update(_conv("last_conv.feature_mix_layer.conv", "feature_mix"))
    names.update({"classifier.linear.linear.weight": "classifier.weight.tensor",
                  "classifier.linear.linear.bias": "classifier.bias.tensor"})
    return names, unused


def _first(keys: Any) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def _their_tensors(checkpoint: Any, path: Path) -> dict[str, torch.Tensor]:
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, Mapping) else None
    if not isinstance(state, Mapping) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        pickled = isinstance(checkpoint, Inert) or isinstance(state, Inert)
        raise CheckpointError(f"FILE: {path} holds no state dict of tensors (AlphaNet's file has one under "
                              "'state_dict')" + (f"; a pickled model? convert it: {convert_command(path)}"
                                                 if pickled else ""))
    return {(key[len("module."):] if key.startswith("module.") else key): value for key, value in state.items()
            if ".bn_tracking." not in key}


def alphanet_state_dict(path: str | Path, supernet: AttentiveMbv3Supernet) -> tuple[dict[str, torch.Tensor], dict]:
    """`supernet`'s state dict with AlphaNet's tensors from the file at `path`, and a record of
    the import (what was dropped, the BN note). Raises `CheckpointError` (one line) for a file
    that is not AlphaNet's supernet: missing or extra keys (the first few named), or shapes
    that differ (the space of `imagenet_alphanet` is theirs)."""
    path = Path(path)
    raw = read_published(path)
    tracking = sum(".bn_tracking." in key for key in (raw.get("state_dict", raw) if isinstance(raw, Mapping) else {}))
    theirs = _their_tensors(raw, path)
    names, unused = alphanet_names(supernet)
    extra = set(theirs) - set(names) - unused
    if extra:
        raise CheckpointError(f"FILE: {path} has {plural(len(extra), 'key')} AlphaNet's supernet does not "
                              f"({_first(extra)}): not AlphaNet's supernet, or another space than imagenet_alphanet's")
    ours = supernet.state_dict()
    missing = {key for key, mine in names.items() if key not in theirs and not mine.endswith("num_batches_tracked")}
    if missing:
        raise CheckpointError(f"FILE: {path} lacks {plural(len(missing), 'key')} of AlphaNet's supernet "
                              f"({_first(missing)})")
    state = dict(ours)
    for key, mine in names.items():
        if key not in theirs:
            continue
        if tuple(theirs[key].shape) != tuple(ours[mine].shape):
            raise CheckpointError(f"FILE: {path}: {key} has shape {list(theirs[key].shape)}, the space's "
                                  f"{mine} {list(ours[mine].shape)}: another space than imagenet_alphanet's")
        state[mine] = theirs[key].to(ours[mine].dtype)
    dropped = sorted(key for key in unused if key in theirs)
    record = {"format": FORMAT, "file": str(path.resolve()), "tensors": len(names),
              "dropped": {"bn_tracking": tracking, "unused_shortcuts": len(dropped)},
              "bn_statistics": "from the file, not recalibrated", "note": RECALIBRATE_NOTE}
    return state, record


def load_alphanet(path: str | Path, supernet: AttentiveMbv3Supernet) -> dict:
    """Load AlphaNet's supernet from `path` into `supernet` (strictly); returns the import record."""
    state, record = alphanet_state_dict(path, supernet)
    supernet.load_state_dict(state, strict=True)
    return record


@IMPORTERS.register(FORMAT)
def read_alphanet(path: Path, overrides: Sequence[str]) -> Imported:
    """AlphaNet's released supernet as a run of `imagenet_alphanet` (with the `--set` overrides)."""
    from nas.engine.run import build_strategy

    config = load_config(CONFIG, list(overrides))
    strategy = build_strategy(config)
    supernet = strategy.subnet_for(strategy.space.max())
    if not isinstance(supernet, AttentiveMbv3Supernet):
        raise ConfigError(f"space.name: AlphaNet's supernet is an attentive_mbv3 space, not {supernet.space.name}")
    record = load_alphanet(path, supernet)
    return Imported(config, strategy.model_state_dict(), strategy.state_dict(),
                    {**record, "config": CONFIG, "num_classes": supernet.space.num_classes})
