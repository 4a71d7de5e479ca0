"""Elastic batch norm: the active channels use a prefix slice of every parameter and buffer."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ElasticBatchNorm2d(nn.BatchNorm2d):
    """`nn.BatchNorm2d` of `max_channels` whose active prefix follows the input's channels.

    Training updates only the sliced running statistics (views into the full buffers); being a
    `BatchNorm2d`, BN recalibration resets and re-estimates it like any other BN layer.
    """

    def __init__(self, max_channels: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True):
        super().__init__(max_channels, eps=eps, momentum=momentum, affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels = x.shape[1]
        if channels == self.num_features:
            return super().forward(x)
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        tracked = self.track_running_stats
        return F.batch_norm(
            x, self.running_mean[:channels] if tracked else None,
            self.running_var[:channels] if tracked else None,
            self.weight[:channels] if self.affine else None, self.bias[:channels] if self.affine else None,
            self.training or not tracked, factor, self.eps)

    @torch.no_grad()
    def to_static(self, channels: int) -> nn.BatchNorm2d:
        """A plain `nn.BatchNorm2d` with copies of the first `channels` parameters and statistics."""
        bn = nn.BatchNorm2d(channels, eps=self.eps, momentum=self.momentum, affine=self.affine)
        if self.affine:
            bn.weight.copy_(self.weight[:channels])
            bn.bias.copy_(self.bias[:channels])
        bn.running_mean.copy_(self.running_mean[:channels])
        bn.running_var.copy_(self.running_var[:channels])
        bn.num_batches_tracked.copy_(self.num_batches_tracked)
        return bn
