"""AlphaNet-A0 to A6 as named archs of the `imagenet_alphanet` space (`--arch alphanet_a0`).

Their choices are AlphaNet's configs/eval_alphanet_models.yml (A5 is their `alphanet_a5_small`,
A5-1 their `alphanet_a5_base`): the resolution, then per-stage lists as their code lists them,
widths being the stem's, the seven stages' and the feature-mix conv's.
"""
from __future__ import annotations

from typing import NamedTuple

from nas.core.arch import Arch


class PublishedModel(NamedTuple):
    """One released model: its resolution and per-stage choices."""

    resolution: int
    widths: tuple[int, ...]
    kernel_sizes: tuple[int, ...]
    expand_ratios: tuple[int, ...]
    depths: tuple[int, ...]

    def arch(self) -> Arch:
        """The model as an arch of the `attentive_mbv3` space."""
        arch: Arch = {"resolution": self.resolution, "stem_width": self.widths[0], "head_width": self.widths[-1]}
        for i, (width, kernel, expand, depth) in enumerate(zip(self.widths[1:-1], self.kernel_sizes,
                                                               self.expand_ratios, self.depths)):
            arch.update({f"stage{i}.depth": depth, f"stage{i}.width": width, f"stage{i}.kernel_size": kernel,
                         f"stage{i}.expand_ratio": expand})
        return arch


ALPHANET_MODELS = {
    "alphanet_a0": PublishedModel(192, (16, 16, 24, 32, 64, 112, 192, 216, 1792), (3, 3, 3, 3, 3, 3, 3),
                                  (1, 4, 4, 4, 4, 6, 6), (1, 3, 3, 3, 3, 3, 1)),
    "alphanet_a1": PublishedModel(224, (16, 16, 24, 32, 64, 112, 192, 216, 1984), (3, 3, 3, 5, 3, 5, 3),
                                  (1, 4, 4, 4, 4, 6, 6), (1, 3, 3, 3, 3, 3, 1)),
    "alphanet_a2": PublishedModel(224, (16, 16, 24, 32, 64, 112, 200, 224, 1984), (3, 3, 3, 3, 3, 5, 3),
                                  (1, 4, 5, 4, 4, 6, 6), (1, 3, 3, 3, 3, 4, 1)),
    "alphanet_a3": PublishedModel(224, (16, 16, 24, 32, 64, 112, 208, 224, 1984), (3, 3, 3, 5, 3, 3, 3),
                                  (1, 4, 4, 4, 4, 6, 6), (2, 3, 3, 4, 3, 5, 1)),
    "alphanet_a4": PublishedModel(256, (16, 16, 24, 32, 64, 112, 192, 216, 1984), (3, 3, 3, 5, 3, 5, 3),
                                  (1, 4, 4, 5, 4, 6, 6), (1, 3, 3, 4, 3, 5, 1)),
    "alphanet_a5": PublishedModel(256, (16, 16, 24, 32, 64, 112, 208, 216, 1984), (3, 3, 3, 3, 3, 5, 3),
                                  (1, 4, 4, 5, 4, 6, 6), (1, 3, 3, 4, 4, 5, 1)),
    "alphanet_a5_1": PublishedModel(288, (16, 16, 24, 32, 64, 112, 200, 216, 1984), (3, 3, 5, 5, 3, 3, 3),
                                    (1, 4, 4, 4, 5, 6, 6), (2, 3, 4, 3, 3, 5, 1)),
    "alphanet_a6": PublishedModel(288, (16, 16, 24, 32, 64, 112, 216, 224, 1984), (3, 3, 3, 3, 3, 5, 3),
                                  (1, 4, 6, 5, 4, 6, 6), (1, 3, 3, 4, 4, 6, 1)),
}
