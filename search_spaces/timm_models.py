"""Rebuild an export as a timm model from its `timm.json` (timm users need nothing of nas).

Only this module touches timm's model builders (`_efficientnet_builder` is private, hence the
pin to the timm 1.0 series). `timm.json` names the model class (`MobileNetV3`,
`VisionTransformer`), its constructor arguments and a `pretrained_cfg` (input size, mean/std,
interpolation), which the rebuilt model carries so `timm.data.resolve_data_config(model=model)`
gives the export's preprocessing.
"""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from torch import nn


def _mobilenetv3(config: dict) -> nn.Module:
    from timm.layers import get_act_layer
    from timm.models._efficientnet_blocks import SqueezeExcite
    from timm.models._efficientnet_builder import decode_arch_def, round_channels
    from timm.models.mobilenetv3 import MobileNetV3

    kwargs = dict(config["kwargs"])
    se = kwargs.pop("se_layer")
    se_layer = partial(SqueezeExcite, gate_layer=se["gate_layer"],
                       force_act_layer=get_act_layer(se["force_act_layer"]),
                       rd_round_fn=round_channels)
    act_layer = get_act_layer(kwargs.pop("act_layer"))
    return MobileNetV3(decode_arch_def(config["arch_def"]), se_layer=se_layer, act_layer=act_layer, **kwargs)


def _vision_transformer(config: dict) -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(**config["kwargs"])


BUILDERS = {"MobileNetV3": _mobilenetv3, "VisionTransformer": _vision_transformer}


def build_timm_model(config: dict | str | Path) -> nn.Module:
    """A timm model from a `timm.json` dict or file (random weights: load `weights.safetensors`)."""
    if not isinstance(config, dict):
        config = json.loads(Path(config).read_text())
    model = BUILDERS[config["model"]](config)
    if "pretrained_cfg" in config:
        model.pretrained_cfg = dict(config["pretrained_cfg"])
        model.default_cfg = model.pretrained_cfg     # the older name timm still reads
    return model


def load_timm_export(export_dir: str | Path) -> Any:
    """The timm model of an export directory with its weights loaded strictly, in eval mode."""
    from safetensors.torch import load_file

    export_dir = Path(export_dir)
    model = build_timm_model(export_dir / "timm.json")
    model.load_state_dict(load_file(str(export_dir / "weights.safetensors")), strict=True)
    return model.eval()
