"""The input preprocessing of every model the engine runs, and what an export records of it.

Images are scaled to [0, 1], resized to the arch's resolution (bilinear unless the space says
otherwise, e.g. bicubic for AttentiveNAS's; no antialiasing, `align_corners=False`), then normalised per channel with the data's mean and std. Evaluation,
the zero-cost proxies, the supernet's own forward pass, dataset resizing and the
`preprocessing` of an export's `metrics.json` all use this one definition, so an exported
model sees at deployment exactly what it was measured on.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.nn import functional as F

INTERPOLATION = "bilinear"
INTERPOLATIONS = ("bilinear", "bicubic")
ANTIALIAS = False


def resize(x: torch.Tensor, size: int, interpolation: str = INTERPOLATION) -> torch.Tensor:
    """`x` (N×C×H×W, floating point) resized to `size` × `size` by `interpolation` (one of
    `INTERPOLATIONS`); `x` itself when it has that size."""
    if x.shape[-1] == size and x.shape[-2] == size:
        return x
    return F.interpolate(x, size=(size, size), mode=interpolation, align_corners=False, antialias=ANTIALIAS)


def normalize(x: torch.Tensor, mean: Sequence[float] | torch.Tensor,
              std: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """((x - mean) / std) per channel of N×C×H×W inputs scaled to [0, 1], in float32, on x's device."""
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=x.device).reshape(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=x.device).reshape(-1, 1, 1)
    return (x - mean_t) / std_t


def preprocessing_metadata(resolution: int, mean: Sequence[float], std: Sequence[float],
                           interpolation: str = INTERPOLATION) -> dict[str, Any]:
    """The `preprocessing` entry of an export's `metrics.json` (docs/exports.md)."""
    return {"resolution": int(resolution), "interpolation": interpolation, "antialias": ANTIALIAS,
            "mean": list(mean), "std": list(std)}
