"""Seeding without global state: local generators derived from (seed, purpose, step...)."""
from __future__ import annotations

import hashlib
import random

import torch


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed that is a pure function of `seed` and `keys` (stable across processes)."""
    text = ":".join([str(seed), *map(str, keys)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def python_rng(seed: int, *keys: object) -> random.Random:
    """A `random.Random` seeded from `derive_seed(seed, *keys)`."""
    return random.Random(derive_seed(seed, *keys))


def torch_generator(seed: int, *keys: object) -> torch.Generator:
    """A CPU `torch.Generator` seeded from `derive_seed(seed, *keys)`."""
    generator = torch.Generator()
    generator.manual_seed(derive_seed(seed, *keys))
    return generator
