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

`select_archs(space, n, seed, extends=m)` grows a selection without discarding its trainings:
the first m archs are exactly `select_archs(space, m, seed)`, the n - m others are drawn one at
a time from the bin (of n - 2 equal-width bins) that holds the fewest selected archs, ties
broken at random, so the whole is again spread over the MACs range. (Plain selections of
different sizes share few archs: each size has its own bins.) A grown selection grows again
when named by its lineage: `extends="48-ext24"` is the 48-arch selection grown from the plain
24, so `select_archs(space, 96, seed, extends="48-ext24")` keeps all of its 48 archs (a bare
48 would mean the plain 48-arch selection, which shares few).
"""
from __future__ import annotations

import random
import re
from collections import Counter

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


_LINEAGE = re.compile(r"[0-9]+(-ext[0-9]+)*")


def parse_extends(extends: int | str) -> tuple[int, ...]:
    """The sizes a selection grew through, smallest first: 48 -> (48,), "48-ext24" -> (24, 48).

    Raises:
        ConfigError: naming `extends` when the text is no lineage, a size is below 2 or a
        selection does not grow the one it names.
    """
    if isinstance(extends, str):
        sizes = [int(word) for word in extends.split("-ext")] if _LINEAGE.fullmatch(extends) else []
        if not sizes or any(larger <= smaller for larger, smaller in zip(sizes, sizes[1:])):
            raise ConfigError(f"extends: {extends!r} is not a selection: M (the plain M-arch selection) or M-extK "
                              f"(the M-arch selection grown from the K-arch one, K < M), e.g. 48-ext24")
        grown = tuple(reversed(sizes))
    else:
        grown = (extends,)
    for size in grown:
        check_int("extends", size, 2, " (the min and max subnets are always measured)")
    return grown


def lineage(sizes: tuple[int, ...]) -> str:
    """The name of the selection grown through `sizes` (smallest first): (24, 48) -> "48-ext24"."""
    return "-ext".join(str(size) for size in reversed(sizes))


def check_extends(count: int, extends: int | str | None) -> tuple[int, ...]:
    """The sizes `extends` grew through (`parse_extends`; () for None), checked against `count`.

    Raises:
        ConfigError: naming `extends` unless it names a selection of 2 to `count` archs.
    """
    if extends is None:
        return ()
    sizes = parse_extends(extends)
    if sizes[-1] > count:
        raise ConfigError(f"extends: {sizes[-1]} is more than {{archs={count}}}: it names the smaller selection "
                          f"that this one grows")
    return sizes


def select_archs(space: ArchSpace, count: int, seed: int = 0, extends: int | str | None = None) -> list[Arch]:
    """`count` distinct archs stratified over the MACs range: min first, max last, the others
    between them by MACs; with `extends` (a size, or a lineage like "48-ext24"), a superset of
    that selection (see the module docstring).

    Raises:
        ConfigError: naming `archs` when `count` < 2 or the pool has too few archs, naming
        `extends` when it names no selection of 2 to `count` archs.
    """
    check_int("archs", count, 2)
    return _select(space, count, seed, check_extends(count, extends))


def _select(space: ArchSpace, count: int, seed: int, grown_from: tuple[int, ...]) -> list[Arch]:
    """The `count`-arch selection grown through the sizes `grown_from` (smallest first)."""
    if grown_from and grown_from[-1] == count:
        return _select(space, count, seed, grown_from[:-1])
    if grown_from:
        base = _select(space, grown_from[-1], seed, grown_from[:-1])
        return _macs_order(space, [*base, *_fill_thinnest(space, _pool(space, seed, base, count), base, count, seed)])
    ends = list({arch_id(a): a for a in (space.min(), space.max())}.values())
    return _macs_order(space, [*ends, *_stratified(space, _pool(space, seed, ends, count), count - len(ends), seed)])


def _pool(space: ArchSpace, seed: int, taken: list[Arch], count: int) -> list[Arch]:
    """The live candidates not in `taken`; `ConfigError` when they cannot make up `count` archs."""
    ids = {arch_id(a) for a in taken}
    pool = [a for a in candidate_pool(space, seed) if arch_id(a) not in ids and space.is_live(a)]
    if len(ids) + len(pool) < count:
        raise ConfigError(f"archs: the space '{space.name}' offers only {len(ids) + len(pool)} distinct live "
                          f"architectures to measure, fewer than {count}")
    return pool


def _macs_order(space: ArchSpace, archs: list[Arch]) -> list[Arch]:
    """The min arch first, the max last (when they differ), the others between them by MACs."""
    low, high = space.min(), space.max()
    ends = {arch_id(low), arch_id(high)}
    middle = sorted((a for a in archs if arch_id(a) not in ends), key=lambda a: (space.macs(a), arch_id(a)))
    return [low, *middle, high] if len(ends) == 2 else [low, *middle]


def _by_bin(space: ArchSpace, archs: list[Arch], bins: MacsBins) -> dict[int, list[Arch]]:
    members: dict[int, list[Arch]] = {}
    for arch in archs:
        members.setdefault(bins.index(space.macs(arch)), []).append(arch)
    return members


def _fill_thinnest(space: ArchSpace, pool: list[Arch], base: list[Arch], count: int, seed: int) -> list[Arch]:
    """`count - len(base)` archs of `pool`, each from the bin (of `count - 2`) holding the fewest."""
    bins = MacsBins(space.macs(space.min()), space.macs(space.max()), max(count - 2, 1))
    members = _by_bin(space, pool, bins)
    held = Counter(bins.index(space.macs(a)) for a in base)
    rng = python_rng(seed, "fidelity-extend")
    added: list[Arch] = []
    while len(base) + len(added) < count:
        open_bins = [b for b in sorted(members) if members[b]]
        fewest = min(held[b] for b in open_bins)
        b = rng.choice([b for b in open_bins if held[b] == fewest])
        added.append(members[b].pop(rng.randrange(len(members[b]))))
        held[b] += 1
    return added


def _stratified(space: ArchSpace, pool: list[Arch], count: int, seed: int) -> list[Arch]:
    if count <= 0:
        return []
    members = _by_bin(space, pool, MacsBins(space.macs(space.min()), space.macs(space.max()), count))
    rng = python_rng(seed, "fidelity-select")
    chosen: list[Arch] = []
    while len(chosen) < count:
        order = sorted(b for b in members if members[b])
        rng.shuffle(order)
        for b in order[:count - len(chosen)]:
            chosen.append(members[b].pop(rng.randrange(len(members[b]))))
    return chosen
