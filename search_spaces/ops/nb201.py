"""NAS-Bench-201 operations: ReLU-Conv-BN, the residual reduction block and the 4-node cell.

After Dong & Yang, 2020, "NAS-Bench-201: Extending the Scope of Reproducible Neural
Architecture Search". Shapes are fixed (no elastic widths); the convolutions still take their
weights from weight sources, so a mixture-of-experts source can replace them like any other
elastic op's. A cell's node `j` is the sum of its live incoming edges `op(node i)`, `i < j`;
the cell's output is node 3. Only live edges (on a path of non-`none` edges from node 0 to
node 3) run: an edge fed by an all-zero node is not zero in eval mode (BN adds its shift).
"""
from __future__ import annotations

import torch
from torch import nn

from search_spaces.ops.conv import ElasticConv2d
from search_spaces.ops.norm import ElasticBatchNorm2d

CONV_KERNELS = {"conv_1x1": 1, "conv_3x3": 3}
PARAMETER_FREE = ("none", "skip_connect", "avg_pool_3x3")

Edge = tuple[int, int, str]   # (to node, from node, operation)


def avg_pool_3x3() -> nn.AvgPool2d:
    """NAS-Bench-201's pooling edge: 3x3 average, stride 1, padding not counted."""
    return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)


class ReLUConvBN(nn.Module):
    """Static ReLU, convolution (no bias), batch norm."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d):
        super().__init__()
        self.relu, self.conv, self.bn = nn.ReLU(), conv, bn   # not in place: a node feeds several edges

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(self.relu(x)))


class ElasticReLUConvBN(nn.Module):
    """ReLU, convolution (weights from a weight source), batch norm with running statistics
    (with a learnt scale and shift unless `affine` is false)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 affine: bool = True):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv = ElasticConv2d(in_channels, out_channels, kernel_size, stride)
        self.bn = ElasticBatchNorm2d(out_channels, affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(self.relu(x)))

    def to_static(self) -> ReLUConvBN:
        return ReLUConvBN(self.conv.to_static(), self.bn.to_static(self.conv.out_channels))


class ResNetBasicBlock(nn.Module):
    """Static reduction block: `conv_b(conv_a(x)) + downsample(x)` (NAS-Bench-201's names)."""

    def __init__(self, conv_a: ReLUConvBN, conv_b: ReLUConvBN, shortcut: nn.Conv2d):
        super().__init__()
        self.conv_a, self.conv_b = conv_a, conv_b
        self.downsample = nn.Sequential(nn.AvgPool2d(2, 2), shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_b(self.conv_a(x)) + self.downsample(x)


class ElasticResNetBasicBlock(nn.Module):
    """Reduction block: ReLU-Conv3x3(s2)-BN, ReLU-Conv3x3-BN, shortcut AvgPool(2) + Conv1x1."""

    def __init__(self, in_channels: int, out_channels: int, affine: bool = True):
        super().__init__()
        self.conv_a = ElasticReLUConvBN(in_channels, out_channels, 3, stride=2, affine=affine)
        self.conv_b = ElasticReLUConvBN(out_channels, out_channels, 3, affine=affine)
        self.pool = nn.AvgPool2d(2, 2)
        self.shortcut = ElasticConv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_b(self.conv_a(x)) + self.shortcut(self.pool(x))

    def to_static(self) -> ResNetBasicBlock:
        return ResNetBasicBlock(self.conv_a.to_static(), self.conv_b.to_static(), self.shortcut.to_static())


def _run_edges(cell: nn.Module, x: torch.Tensor, live: list[Edge]) -> torch.Tensor:
    # Live edges come ordered by target node, so every source node is complete before use.
    if not live:
        return torch.zeros_like(x)
    nodes: list[torch.Tensor | None] = [x, None, None, None]
    for to, source, op in live:
        out = cell.apply_edge(to, source, op, nodes[source])
        nodes[to] = out if nodes[to] is None else nodes[to] + out
    return nodes[3]


class Cell(nn.Module):
    """Static cell holding only the operations of its live edges (`edges["3<-1"]`)."""

    def __init__(self, live: list[Edge], edges: dict[str, nn.Module]):
        super().__init__()
        self.live = list(live)
        self.edges = nn.ModuleDict(edges)

    def apply_edge(self, to: int, source: int, op: str, x: torch.Tensor) -> torch.Tensor:
        return self.edges[f"{to}<-{source}"](x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _run_edges(self, x, self.live)

    def extra_repr(self) -> str:
        return ", ".join(f"{to}<-{source}: {op}" for to, source, op in self.live) or "all edges dead: zeros"


class ElasticCell(nn.Module):
    """A cell with its own weights for every (edge, convolution); runs the live edges only."""

    def __init__(self, channels: int, edges: list[tuple[int, int]], operations: tuple[str, ...],
                 affine: bool = True):
        super().__init__()
        self.convs = nn.ModuleDict({
            f"{to}<-{source}": nn.ModuleDict({op: ElasticReLUConvBN(channels, channels, CONV_KERNELS[op], affine=affine)
                                              for op in operations if op in CONV_KERNELS})
            for to, source in edges})
        self.avg_pool = avg_pool_3x3()
        self.live: list[Edge] = []

    def configure(self, live: list[Edge]) -> None:
        """Set the live edges, ordered by target node."""
        self.live = list(live)

    def apply_edge(self, to: int, source: int, op: str, x: torch.Tensor) -> torch.Tensor:
        if op == "skip_connect":
            return x
        if op == "avg_pool_3x3":
            return self.avg_pool(x)
        return self.convs[f"{to}<-{source}"][op](x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _run_edges(self, x, self.live)

    def to_static(self) -> Cell:
        """A static `Cell` with copies of the weights and statistics of the live convolutions."""
        edges: dict[str, nn.Module] = {}
        for to, source, op in self.live:
            key = f"{to}<-{source}"
            if op == "skip_connect":
                edges[key] = nn.Identity()
            elif op == "avg_pool_3x3":
                edges[key] = avg_pool_3x3()
            else:
                edges[key] = self.convs[key][op].to_static()
        return Cell(self.live, edges)
