"""The arch table behind attentive sampling: MACs bins, a prior over the
bins and, per bin, an independent categorical distribution of every choice.

Bins split the space's MACs range [macs(min), macs(max)] into `bins` equal intervals (the
last one closed). The table is built deterministically from the seed:

1. `size` uniformly sampled archs; the prior of a bin is the fraction of them that fall in
   it, so a bin that no sampled arch reaches gets prior 0 and is never drawn.
2. Uniform sampling rarely reaches the tails, so a bin with prior > 0 but fewer than `fill`
   distinct archs is topped up with mutations of its own archs that stay in the bin, at most
   `tries` attempts per bin. These archs enrich the bin's choice distributions only; the
   prior stays the uniform sample's.

The distribution of a choice in a bin counts only the archs where the choice is active (a
block beyond its stage's depth carries no information); a choice never active in a bin is
uniform there. In training the table is cached as `attentive_table.json` in the run
directory, keyed by the space's choices, the MACs range, the seed and the table settings, so
a resumed run reuses it and a changed config rebuilds it.
"""
from __future__ import annotations

import json
import random
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch.distributed as dist

from nas.core.arch import Arch, arch_json
from nas.core.bins import MacsBins
from nas.core.files import write_json
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace

TABLE_FILE = "attentive_table.json"
FORMAT_VERSION = 1
MUTATION_PROB = 0.1   # per choice when topping up a sparse bin: a few changes per child


@dataclass(frozen=True)
class TableSettings:
    """How the table is built (the options of the attentive sampler that shape it)."""

    bins: int
    size: int
    fill: int
    tries: int


@dataclass(frozen=True)
class Row:
    """One table entry: an arch, its MACs, and whether it belongs to the uniform sample."""

    arch: Arch
    macs: int
    uniform: bool


class ArchTable:
    """Prior over MACs bins and per-bin choice distributions, from a table of sampled archs."""

    def __init__(self, space: ArchSpace, bins: MacsBins, rows: Sequence[Row]):
        self.space, self.bins, self.rows = space, bins, list(rows)
        by_bin: list[list[Row]] = [[] for _ in range(bins.count)]
        for row in self.rows:
            by_bin[bins.index(row.macs)].append(row)
        self.sizes = [len(members) for members in by_bin]   # table archs per bin
        counts = [sum(row.uniform for row in members) for members in by_bin]
        total = sum(counts)
        if total == 0:
            raise ValueError("the attentive table has no uniformly sampled archs")
        self.prior = [c / total for c in counts]
        self.conditionals = [self._conditional(members) for members in by_bin]

    def _conditional(self, members: Sequence[Row]) -> dict[str, list[float]]:
        choices = self.space.choices()
        counts = {key: [0] * len(values) for key, values in choices.items()}
        for row in members:
            for key in self.space.active_keys(row.arch):
                counts[key][choices[key].index(row.arch[key])] += 1
        return {key: ([n / sum(c) for n in c] if sum(c) else [1.0 / len(c)] * len(c))
                for key, c in counts.items()}

    def draw_bin(self, rng: random.Random) -> int:
        """A bin drawn from the prior."""
        return rng.choices(range(self.bins.count), weights=self.prior)[0]

    def draw(self, b: int, rng: random.Random) -> Arch:
        """An arch with every choice drawn independently from its distribution in bin `b`."""
        return self.space.canonical({key: rng.choices(values, weights=self.conditionals[b][key])[0]
                                     for key, values in self.space.choices().items()})

    def draw_in(self, b: int, rng: random.Random, tries: int) -> Arch:
        """`draw(b)` repeated up to `tries` times until the arch falls in bin `b` (the last draw
        is returned otherwise)."""
        for _ in range(tries):
            arch = self.draw(b, rng)
            if self.bin_of(arch) == b:
                break
        return arch

    def bin_of(self, arch: Arch) -> int:
        """The MACs bin of `arch`."""
        return self.bins.index(self.space.macs(arch))


class BinnedTable:
    """Mixin of samplers that draw archs inside MACs bins: `table`, built on first use from
    their options (`bins`, `table_size`, `table_fill`, `table_tries`), seed and `cache_dir`."""

    _table: ArchTable | None = None

    @property
    def table(self) -> ArchTable:
        """The arch table, loaded from `cache_dir` or built on first use."""
        if self._table is None:
            o = self.options
            settings = TableSettings(o.bins, o.table_size, o.table_fill, o.table_tries)
            self._table = load_or_build(self.space, settings, self.seed, self.cache_dir)
        return self._table


def macs_bins(space: ArchSpace, count: int) -> MacsBins:
    """`count` equal-width bins over the space's MACs range."""
    return MacsBins(space.macs(space.min()), space.macs(space.max()), count)


def build_rows(space: ArchSpace, bins: MacsBins, settings: TableSettings, seed: int) -> list[Row]:
    """The table's archs: the uniform sample, then bounded top-ups of sparse bins."""
    rng = python_rng(seed, "attentive-table")
    rows = []
    for _ in range(settings.size):
        arch = space.sample(rng)
        rows.append(Row(arch, space.macs(arch), True))
    members: dict[int, list[Row]] = {}
    for row in rows:
        members.setdefault(bins.index(row.macs), []).append(row)
    for b in sorted(members):
        in_bin = members[b]
        seen = {arch_json(row.arch) for row in in_bin}
        for _ in range(settings.tries):
            if len(seen) >= settings.fill:
                break
            child = space.mutate(rng.choice(in_bin).arch, MUTATION_PROB, rng)
            macs = space.macs(child)
            if bins.index(macs) == b and arch_json(child) not in seen:
                seen.add(arch_json(child))
                in_bin.append(Row(child, macs, False))
                rows.append(in_bin[-1])
    return rows


def cache_key(space: ArchSpace, bins: MacsBins, settings: TableSettings, seed: int) -> dict[str, Any]:
    """What the table depends on, as plain JSON data."""
    key = {"format_version": FORMAT_VERSION, "space": space.name, "seed": seed,
           "macs_range": [bins.low, bins.high], "settings": asdict(settings),
           "choices": {k: list(v) for k, v in space.choices().items()}}
    return json.loads(json.dumps(key))


def _encode(space: ArchSpace, rows: Sequence[Row]) -> list[dict[str, Any]]:
    choices = space.choices()
    return [{"macs": row.macs, "uniform": row.uniform,
             "choice": [choices[key].index(row.arch[key]) for key in choices]} for row in rows]


def _decode(space: ArchSpace, data: Sequence[dict[str, Any]]) -> list[Row]:
    choices = space.choices()
    return [Row(space.canonical({key: choices[key][i] for key, i in zip(choices, item["choice"])}),
                int(item["macs"]), bool(item["uniform"])) for item in data]


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        warnings.warn(f"{path}: unreadable attentive table ({e}); rebuilding it", stacklevel=3)
        return None


def _write(path: Path, data: dict) -> None:
    """Atomic write, by rank 0 only (every rank builds the same table from the seed)."""
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, data, indent=None)


def load_or_build(space: ArchSpace, settings: TableSettings, seed: int,
                  cache_dir: Path | None = None) -> ArchTable:
    """The table from `cache_dir/attentive_table.json` if its key matches, else built (and
    written there when `cache_dir` is given)."""
    bins = macs_bins(space, settings.bins)
    key = cache_key(space, bins, settings, seed)
    path = Path(cache_dir) / TABLE_FILE if cache_dir is not None else None
    stored = _read(path) if path is not None else None
    if stored is not None and stored.get("key") == key:
        rows = _decode(space, stored["archs"])
    else:
        rows = build_rows(space, bins, settings, seed)
        if path is not None:
            _write(path, {"key": key, "archs": _encode(space, rows)})
    return ArchTable(space, bins, rows)
