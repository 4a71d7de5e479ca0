"""Weight sources: where an elastic op's full-size tensor comes from.

An elastic op slices its active part out of a full-size tensor that it asks its source for.
`SharedTensor` (one learned tensor, the classic weight-sharing supernet) is the default;
a mixture-of-experts source can mix several expert tensors per architecture instead, and is
swapped in with `set_source` without a second copy of any op.
"""
from __future__ import annotations

import abc

import torch
from torch import nn


class WeightSource(nn.Module, abc.ABC):
    """Produces the full-size tensor of one op's weight or bias."""

    shape: tuple[int, ...]

    @abc.abstractmethod
    def full(self) -> torch.Tensor:
        """The full-size tensor the op slices its active part from."""


class SharedTensor(WeightSource):
    """One learned tensor shared by every subnet (prefix/centre slices of it)."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__()
        self.tensor = nn.Parameter(tensor)
        self.shape = tuple(tensor.shape)

    def full(self) -> torch.Tensor:
        return self.tensor


def set_source(op: nn.Module, attribute: str, source: WeightSource) -> None:
    """Replace `op.<attribute>` (a weight source) by `source`, checking the shape matches."""
    current = getattr(op, attribute)
    if not isinstance(current, WeightSource):
        raise TypeError(f"{type(op).__name__}.{attribute} is not a weight source")
    if tuple(source.shape) != tuple(current.shape):
        raise ValueError(f"source shape {tuple(source.shape)} != {tuple(current.shape)} of "
                         f"{type(op).__name__}.{attribute}")
    setattr(op, attribute, source)
