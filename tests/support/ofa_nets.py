"""Once-for-All's own MobileNetV3 supernet with random weights, for the import and equivalence tests.

Random weights (BN affine parameters included), kernel transformation matrices moved away from
the identity, and BN running statistics averaged over random images, so every tensor the import
renames matters to the logits and the logits depend on the input. Needs the `ofa` package (dev extra).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

OFA_LISTS = dict(ks_list=[3, 5, 7], expand_ratio_list=[3, 4, 6], depth_list=[2, 3, 4])


def random_ofa_net(width_mult: float = 1.0, n_classes: int = 1000, seed: int = 0, side: int = 40,
                   statistics_of: str = "max"):
    """An `OFAMobileNetV3` in eval mode, randomised as the module says; the BN statistics are
    averaged over random images through the `max` or `min` subnet (a random network is well
    conditioned in fp32 only on the subnet its statistics came from)."""
    from ofa.imagenet_classification.elastic_nn.networks import OFAMobileNetV3

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = OFAMobileNetV3(n_classes=n_classes, width_mult=width_mult, dropout_rate=0.1, **OFA_LISTS)
        with torch.no_grad():
            for name, param in net.named_parameters():
                if name.endswith("_matrix"):
                    param.add_(0.05 * torch.randn_like(param))
                elif ".bn." in name and name.endswith("weight"):    # residual branches kept small, as trained
                    low = 0.1 if "point_linear" in name else 0.5                 # nets' are: the logits stay
                    param.copy_(torch.empty_like(param).uniform_(low, 2 * low))   # well-conditioned in fp32
                elif param.dim() == 1:
                    param.copy_(0.1 * torch.randn_like(param))
        batch_norms = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        for bn in batch_norms:      # a plain average over the batches below (as BN recalibration does)
            bn.reset_running_stats()
            bn.momentum = None
        net.train()
        if statistics_of == "min":
            net.set_active_subnet(ks=min(OFA_LISTS["ks_list"]), e=min(OFA_LISTS["expand_ratio_list"]),
                                  d=min(OFA_LISTS["depth_list"]))
        with torch.no_grad():
            for _ in range(4):
                net(torch.randn(8, 3, side, side))
        for bn in batch_norms:
            bn.momentum = 0.1
        net.set_max_net()
    return net.eval()



@contextmanager
def float64_layers() -> Iterator[None]:
    """New layers are created in float64 inside: an export (ours, or OFA's `get_active_subnet`)
    of a float64 supernet would otherwise round its transformed kernels to float32."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
