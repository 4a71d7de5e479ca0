"""The ShiftNAS hypergradient: how the bin probabilities should move, by a one-step look-ahead.

The bin logits `theta` minimise the normalised validation loss the supernet would have after
one weight update under the current bin probabilities `p = p(theta)` (a DARTS-like bilevel
reading of the paper's criterion; the paper gives no formula):

    Phi(w) = sum_k L_val_k(w) / R_k,      w' = w - xi * sum_j p_j g_j,   g_j = grad L_train_j(w)

with `L_*_k` the label loss of bin k's probe arch on the probe batches and `R_k` the bin's
squared validation-gradient norm at the first update (`reference`). Every bin enters `Phi`
with a fixed weight, so there is no direct term that would favour bins that are already
converged; `theta` acts only through the look-ahead. Since `dw'/dp_j = -xi g_j` exactly,

    dPhi(w')/dp_j = -xi * grad Phi(w') . g_j = -xi * s_j.

`s_j`, the score of bin j, is how much one step on bin j lowers the normalised validation loss
of all bins. Its diagonal part is `grad L_val_j(w') . g_j / R_j`, about the bin's squared
validation-gradient norm now relative to its own at the first update: any per-arch factor
(parameter count, widths, the layers the norm sums over) cancels, because a bin's probe arch
is fixed for the run. The cross terms carry what training one bin does for the others
through the shared weights.

`s_j` is not computed from the K stored gradients: as DARTS does, the dot product with the
direction `d = grad Phi(w')` is a central finite difference of the training losses,
`s_j ~ (L_train_j(w + eps d) - L_train_j(w - eps d)) / (2 eps)` with `eps = 0.01 / |d|`, so
no second-order term and no per-bin gradient is kept (three copies of the weights: saved,
accumulated step, direction). Cost per update, for K reachable bins and B probe batches of
each split: K*B backward passes on training batches at w, K*B backward passes on validation
batches at w', 2*K*B forward passes at w +/- eps d. Weights, gradients and buffers are
restored exactly afterwards (the weights from a saved copy, never by subtracting).

Every rank of a job sees the same probe batches, so the ranks share the bins out (rank r takes
every `world_size`-th from r) and sum their shares: the step, the direction and the norms
(all-reduced, parameter-sized), then the scores. Each rank does 1/`world_size` of the passes and
every rank ends with the scores one process computes.
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nas.core.arch import Arch
from supernets.base import Batches, preserved_buffers

FD_SCALE = 0.01   # eps = FD_SCALE / |d|, as DARTS


@dataclass(frozen=True)
class Lookahead:
    """One update's result: per-bin scores `s` and squared validation-gradient norms at w'."""

    scores: torch.Tensor
    val_sq_norms: torch.Tensor


def _mean_loss(subnet_for: Callable[[Arch], nn.Module], arch: Arch, batches: Batches) -> torch.Tensor:
    net = subnet_for(arch)
    return sum(F.cross_entropy(net(images).float(), labels) for images, labels in batches) / len(batches)


def _grads(loss: torch.Tensor, params: Sequence[nn.Parameter]) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


def _set(params: Sequence[nn.Parameter], values: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for p, v in zip(params, values):
            p.copy_(v)


def lookahead_scores(subnet_for: Callable[[Arch], nn.Module], archs: Sequence[Arch | None],
                     probs: torch.Tensor, reference: torch.Tensor, xi: float,
                     train: Batches, val: Batches, rank: int = 0, world_size: int = 1,
                     all_reduce_mean: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Lookahead:
    """Scores `s_j` (module docstring) of every bin with a probe arch (`archs[j]`, None for a
    masked bin, which scores 0). `reference[k] > 0` is `R_k`; where it is 0 the bin's own
    squared norm at w' is used (the first update). With `world_size` ranks (each given the same
    batches and its `all_reduce_mean`) this rank measures its share of the bins and every rank
    returns the whole result. Leaves weights, gradients and buffers as they were."""
    bins = [j for j, arch in enumerate(archs) if arch is not None]
    scores = torch.zeros(len(archs), dtype=torch.float64)
    norms = torch.zeros(len(archs), dtype=torch.float64)
    if not bins or not train or not val:
        return Lookahead(scores, norms)
    mine = bins[rank::world_size]
    nets = {id(net): net for net in (subnet_for(archs[j]) for j in bins)}
    params = list({id(p): p for net in nets.values() for p in net.parameters() if p.requires_grad}.values())
    saved = [p.detach().clone() for p in params]

    def summed(shares: list[torch.Tensor]) -> list[torch.Tensor]:
        """The ranks' `shares` summed (as they are on one process)."""
        if world_size == 1 or all_reduce_mean is None:
            return shares
        flat = torch.cat([t.reshape(-1).to(saved[0].device, torch.float64) for t in shares])
        total = all_reduce_mean(flat) * world_size
        return [part.view_as(t).to(t.device, t.dtype) for part, t in zip(total.split([t.numel() for t in shares]),
                                                                          shares)]

    with ExitStack() as stack:
        for net in nets.values():
            stack.enter_context(preserved_buffers(net))
        try:
            step = [torch.zeros_like(p) for p in params]
            for j in mine:
                for acc, g in zip(step, _grads(_mean_loss(subnet_for, archs[j], train), params)):
                    acc.add_(g, alpha=float(probs[j]))
            _set(params, [w - xi * s for w, s in zip(saved, summed(step))])
            direction = [torch.zeros_like(p) for p in params]
            for k in mine:
                grads = _grads(_mean_loss(subnet_for, archs[k], val), params)
                norms[k] = sum(g.double().pow(2).sum() for g in grads).item()
                weight = float(reference[k]) if reference[k] > 0 else norms[k].item()
                if weight > 0:
                    for acc, g in zip(direction, grads):
                        acc.add_(g, alpha=1.0 / weight)
            *direction, norms = summed([*direction, norms])
            size = torch.sqrt(sum(d.double().pow(2).sum() for d in direction)).item()
            if size > 0:
                eps = FD_SCALE / size
                with torch.no_grad():
                    _set(params, [w + eps * d for w, d in zip(saved, direction)])
                    plus = [_mean_loss(subnet_for, archs[j], train).double() for j in mine]
                    _set(params, [w - eps * d for w, d in zip(saved, direction)])
                    minus = [_mean_loss(subnet_for, archs[j], train).double() for j in mine]
                for j, hi, lo in zip(mine, plus, minus):
                    scores[j] = ((hi - lo) / (2 * eps)).item()
                scores, = summed([scores])
        finally:
            _set(params, saved)
    return Lookahead(scores, norms)
