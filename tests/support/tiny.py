"""A tiny real-data run config for training tests (seconds on 2 cores)."""
from __future__ import annotations

TINY_SPACE = {"name": "mobilenetv3", "options": {
    "resolutions": [20, 28], "depths": [[1], [1, 2]], "widths": [[8], [16, 24]], "kernel_sizes": [3, 5],
    "expand_ratios": [3, 4], "strides": [2, 2], "se": [False, True], "activations": ["relu", "hswish"],
    "stem_width": 8, "head_width": 32, "num_features": 64}}


TINY_SPACES = {
    "mobilenetv3": TINY_SPACE,
    "vit": {"name": "vit", "options": {"embed_dims": [16, 32], "depths": [1, 2], "num_heads": [1, 2],
                                       "mlp_ratios": [2.0, 4.0], "head_dim": 8, "patch_size": 7}},
    "cell201": {"name": "cell201", "options": {"channels": 4, "image_size": 12,
                                               "operations": ["none", "skip_connect", "conv_1x1", "conv_3x3"]}},
}


def tiny_config(sampler: str = "sandwich", distill: str = "kl", steps: int = 24, space: str = "mobilenetv3",
                **train) -> dict:
    """Plain config data: 1,024 training images, 512 validation images, batch 64."""
    sampler_section = {"name": sampler, "num_random": 1} if sampler == "sandwich" else {"name": sampler}
    return {
        "space": TINY_SPACES[space],
        "data": {"name": "fashion_mnist", "val_size": 512, "train_size": 1024},
        "strategy": {"sampler": sampler_section, "distill": {"name": distill}},
        "train": {"epochs": None, "steps": steps, "batch_size": 64, "seed": 0,
                  "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5.0e-4},
                  "scheduler": {"name": "cosine", "warmup_steps": 0},
                  "checkpoint": {"every_steps": 5, "every_seconds": 600}, **train},
        "eval": {"bn_recal_batches": 2, "bn_recal_batch_size": 64, "batch_size": 256},
    }
