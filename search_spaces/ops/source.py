"""Weight sources: where an elastic op's full-size tensor comes from.

An elastic op slices its active part out of a full-size tensor that it asks its source for.
`SharedTensor` (one learned tensor, the classic weight-sharing supernet) is the default. A
source may depend on the active architecture (`uses_arch`): a mixture-of-experts source mixes
several expert tensors with weights a router computes from the arch's encoding. The supernet
binds every such source to the encoding of the arch it activates, so forward passes, exports
and equality checks all see the weights of that arch; sources are swapped with
`Supernet.replace_source` without a second copy of any op.
"""
from __future__ import annotations

import abc

import torch
from torch import nn


class WeightSource(nn.Module, abc.ABC):
    """Produces the full-size tensor of one op's weight or bias."""

    shape: tuple[int, ...]
    uses_arch = False   # True: `full()` depends on the arch bound by `bind`

    @abc.abstractmethod
    def full(self) -> torch.Tensor:
        """The full-size tensor the op slices its active part from (for the bound arch)."""

    def bind(self, encoding: torch.Tensor) -> None:
        """Make `full()` produce the weights of the arch whose `space.encode(arch)` is given.

        Called by `Supernet.set_active` on every source with `uses_arch`; other sources are
        the same for every arch and ignore it.
        """
        del encoding


class SharedTensor(WeightSource):
    """One learned tensor shared by every subnet (prefix/centre slices of it)."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__()
        self.tensor = nn.Parameter(tensor)
        self.shape = tuple(tensor.shape)

    def full(self) -> torch.Tensor:
        return self.tensor


def set_source(op: nn.Module, attribute: str, source: WeightSource) -> None:
    """Replace `op.<attribute>` (a weight source) by `source`, checking the shape matches.

    On a supernet use `Supernet.replace_source`, which also keeps its list of sources current.
    """
    current = getattr(op, attribute)
    if not isinstance(current, WeightSource):
        raise TypeError(f"{type(op).__name__}.{attribute} is not a weight source")
    if tuple(source.shape) != tuple(current.shape):
        raise ValueError(f"source shape {tuple(source.shape)} != {tuple(current.shape)} of "
                         f"{type(op).__name__}.{attribute}")
    setattr(op, attribute, source)
