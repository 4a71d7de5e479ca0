"""Which archs a fidelity measurement trains: MACs-stratified, a function of the space and a seed.

`select_archs(space, n, seed)` returns n distinct canonical archs in MACs order:
1. `space.min()` and `space.max()` always;
2. a candidate pool: every distinct arch when the space has at most `ENUMERATE_LIMIT` raw
   archs, else `POOL_SIZE` uniform draws plus `POOL_SIZE` "level" draws (each draws a level u
   in [0, 1], then every choice takes index Binomial(len - 1, u) of its values, which are
   ordered cheapest first), so that the pool reaches the cheap and expensive ends of the
   MACs range, which uniform draws rarely do; networks whose output ignores their input
   (`space.is_live`) are left out: both rankings would put them last for nothing;
3. n - 2 equal-width bins between the min's and the max's MACs; in rounds, each bin with
   candidates left gives one arch drawn uniformly from them (bins in a random order per
   round), until n - 2 archs are drawn. The first round covers every bin the pool reaches.

Every draw comes from generators derived from `seed`: the selection never depends on
trained weights, so every run on one space measures the same archs.
"""
from __future__ import annotations

import random

from nas.core.arch import Arch, arch_id
from nas.core.bins import MacsBins
from nas.core.errors import ConfigError, check_int
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace

ENUMERATE_LIMIT = 20_000
POOL_SIZE = 2_000


def level_sample(space: ArchSpace, level: float, rng: random.Random) -> Arch:
    """An arch whose choices sit around `level` of the way from the cheapest to the dearest value."""
    return space.canonical({key: values[sum(rng.random() < level for _ in range(len(values) - 1))]
                            for key, values in space.choices().items()})


def candidate_pool(space: ArchSpace, seed: int) -> list[Arch]:
    """Distinct canonical candidate archs (see the module docstring), in a deterministic order."""
    if space.raw_size() <= ENUMERATE_LIMIT:
        archs = space.enumerate()
    else:
        rng = python_rng(seed, "fidelity-pool")
        archs = [space.sample(rng) for _ in range(POOL_SIZE)]
        archs += [level_sample(space, rng.random(), rng) for _ in range(POOL_SIZE)]
    return list({arch_id(a): a for a in archs}.values())


def select_archs(space: ArchSpace, count: int, seed: int = 0) -> list[Arch]:
    """`count` distinct archs stratified over the MACs range: min first, max last, the others
    between them by MACs.

    Raises:
        ConfigError: naming `--archs` when `count` < 2 or the pool has too few archs.
    """
    check_int("archs", count, 2)
    low, high = space.min(), space.max()
    ends = {arch_id(low): low, arch_id(high): high}
    pool = [a for a in candidate_pool(space, seed) if arch_id(a) not in ends and space.is_live(a)]
    if len(ends) + len(pool) < count:
        raise ConfigError(f"archs: the space '{space.name}' offers only {len(ends) + len(pool)} distinct live "
                          f"architectures to measure, fewer than {count}")
    middle = sorted(_stratified(space, pool, count - len(ends), seed), key=lambda a: (space.macs(a), arch_id(a)))
    return [low, *middle, high] if len(ends) == 2 else [low, *middle]


def _stratified(space: ArchSpace, pool: list[Arch], count: int, seed: int) -> list[Arch]:
    if count <= 0:
        return []
    bins = MacsBins(space.macs(space.min()), space.macs(space.max()), count)
    members: dict[int, list[Arch]] = {}
    for arch in pool:
        members.setdefault(bins.index(space.macs(arch)), []).append(arch)
    rng = python_rng(seed, "fidelity-select")
    chosen: list[Arch] = []
    while len(chosen) < count:
        order = sorted(b for b in members if members[b])
        rng.shuffle(order)
        for b in order[:count - len(chosen)]:
            chosen.append(members[b].pop(rng.randrange(len(members[b]))))
    return chosen
