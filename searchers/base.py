"""The searcher protocol: `ask() -> arch`, `tell(arch, record)`, `best()`.

The loop, constraints, deduplication policy, logging and resume live once, in
`nas/engine/searching/loop.py`. A searcher proposes architectures and learns from the results:
1. `ask()` proposes an arch (any values; the runner canonicalises it);
2. the runner rejects it (`reject`: infeasible, or `duplicate` found an earlier trial) or
   `claim`s it and evaluates it;
3. `tell(arch, record)` hands back the results.jsonl record of the evaluation; the value to
   maximise is `objective(record)` (`nas.core.pareto`): the value of the search's score.
When a budget admits so few archs that `max_rejections` proposals in a row fail, the loop
`enqueue`s the min subnet (which meets every budget): the next ask returns it, and the searcher
learns from it like any other evaluation. No arch is queued otherwise.
Local searchers (`ReplaySearcher`) keep no state of their own: the runner replays
`results.jsonl` into `restore`, and every random draw comes from a generator derived from
(seed, evaluations told, proposals since the last tell), so a resumed search continues
exactly as an uninterrupted one. Shared searchers (Optuna) keep their state in a storage.
"""
from __future__ import annotations

import abc
import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from nas.core.arch import Arch, arch_id
from nas.core.errors import SearchError, clip
from nas.core.pareto import objective
from nas.core.registry import SUPERNET_SCORE
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace
from searchers.window import WindowDraws

Record = dict[str, Any]


@dataclass(frozen=True)
class SearchContext:
    """What a searcher is told about the search it serves.

    Attributes:
        space: The architecture space.
        trials: Evaluations the search aims for (in the shared study for Optuna).
        seed: This worker's seed (the search seed plus `worker`).
        worker: Index of this process among the workers of a shared study.
        costs: Costs that are objectives besides accuracy: `macs` and every constrained cost.
        budgets: Constrained cost name -> budget.
        out_dir: The search directory.
        storage: Optuna storage URL (None: a journal file in `out_dir`).
        study: Optuna study name (None: `search`).
        settings: Identity of the search (searcher, space, constraints...), checked on resume.
        stored_options: Options a resumed local search ran with (None: a new search).
        candidates: Every feasible canonical arch when the space is small enough to list.
        generator: The run's trained architecture generator, when it has one:
            `generator.generate(max_macs, seed) -> (arch, attempts, shrunk)` and
            `generator.propose(target_macs, torch_generator, sample, temperature) -> arch`.
        window: Cost name -> (low, high): the neighbourhood of the budgets, where `window_arch`
            draws (empty: none).
        cost_of: `cost_of(arch) -> {cost name: value}`, the search's costs of an arch (None: unknown).
    """

    space: ArchSpace
    trials: int
    seed: int
    worker: int = 0
    costs: tuple[str, ...] = ("macs",)
    budgets: Mapping[str, float] = field(default_factory=dict)
    out_dir: Path | None = None
    storage: str | None = None
    study: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    stored_options: Mapping[str, Any] | None = None
    candidates: tuple[Arch, ...] | None = None
    generator: Any = None
    window: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    cost_of: Callable[[Arch], Mapping[str, float]] | None = None


# Settings that searches stored before the setting existed ran with (a missing key reads as this).
SETTING_DEFAULTS: Mapping[str, Any] = {"score": SUPERNET_SCORE}


def rank_key(record: Mapping[str, Any]) -> tuple:
    """Sort key putting the best record first: highest objective (the score's value), then
    fewer MACs, then the earlier trial."""
    return -objective(record), record["macs"], record["trial"]


def best_record(records: Sequence[Mapping[str, Any]]) -> Record | None:
    """The first record by `rank_key`: highest objective; ties go to fewer MACs, then the earlier trial."""
    if not records:
        return None
    return dict(min(records, key=rank_key))


def check_settings(stored: Mapping[str, Any], current: Mapping[str, Any], where: str, fix: str) -> None:
    """Raise `SearchError` when a resumed search would run with other settings."""
    def before(key: str) -> Any:
        return stored.get(key, SETTING_DEFAULTS.get(key))

    diffs = [f"{key} {clip(before(key), 40)} there, {clip(current[key], 40)} now"
             for key in current if before(key) != current[key]]
    if diffs:
        raise SearchError(f"{where} was run with other settings ({'; '.join(diffs)})", fix=fix)


def merge_options(given: Any, resolved: Any, stored: Mapping[str, Any] | None, where: str, fix: str) -> Any:
    """Options of a resumed search: the stored ones, unless the caller set a different value.

    Defaults derived from `--trials` are frozen when the search starts, so raising `--trials`
    later continues the same search instead of changing its population.
    """
    if stored is None:
        return resolved
    conflicts = [f"{f.name} {stored.get(f.name)!r} there, {getattr(given, f.name)!r} now"
                 for f in dataclasses.fields(given)
                 if getattr(given, f.name) is not None and stored.get(f.name) != getattr(given, f.name)]
    if conflicts:
        raise SearchError(f"{where} was run with other options ({'; '.join(conflicts)})", fix=fix)
    known = {f.name for f in dataclasses.fields(resolved)}
    return dataclasses.replace(resolved, **{k: v for k, v in stored.items() if k in known})


class Searcher(abc.ABC):
    """Proposes architectures and learns from their evaluations (see the module docstring)."""

    name = "searcher"
    shared = False  # True: state lives in a storage several processes share (not replayed)

    def __init__(self, context: SearchContext, options: Any):
        self.context = context
        self.space = context.space
        self.options = merge_options(options, self.resolve_options(options, context.trials),
                                     context.stored_options, f"the search in {context.out_dir}",
                                     "resume with the same options or use another {out}")

    @classmethod
    def resolve_options(cls, options: Any, trials: int) -> Any:
        """`options` with every None default derived from `trials`."""
        return options

    @abc.abstractmethod
    def ask(self) -> Arch:
        """Propose the next architecture."""

    @abc.abstractmethod
    def trial_number(self) -> int:
        """Number of the trial the last `ask` opened (the `trial` field of its record)."""

    @abc.abstractmethod
    def tell(self, arch: Arch, record: Record) -> None:
        """Record the evaluation of the last asked arch (`record` is its results.jsonl line)."""

    @abc.abstractmethod
    def reject(self, arch: Arch, reason: str, costs: Mapping[str, float]) -> None:
        """The last asked arch is not evaluated (infeasible or a duplicate)."""

    @abc.abstractmethod
    def duplicate(self, arch_id: str) -> int | None:
        """Trial number of an earlier (or running) evaluation of `arch_id`, or None."""

    @abc.abstractmethod
    def enqueue(self, archs: Sequence[Arch]) -> None:
        """Propose `archs` (canonical, feasible, distinct) first, in order, skipping those the
        search has already evaluated."""

    @abc.abstractmethod
    def history(self) -> list[Record]:
        """Records of every finished evaluation of the search (all workers)."""

    def completed(self) -> int:
        """Finished evaluations of the search (all workers)."""
        return len(self.history())

    def best(self) -> Record | None:
        """The record with the highest objective (every evaluated arch is feasible)."""
        return best_record(self.history())

    def limit(self) -> int | None:
        """Most evaluations this searcher makes whatever `trials` is (None: no limit)."""
        return None

    def restore(self, records: Sequence[Record]) -> None:
        """Replay finished records of a resumed search (local searchers)."""
        for record in records:
            self.tell(record["arch"], record)

    def claim(self, target: int) -> bool:
        """Whether the asked arch may be evaluated now (False: the trial budget is taken)."""
        return True

    def abort(self, error: BaseException) -> None:
        """The evaluation of the asked arch raised `error`."""

    def resolved_options(self) -> dict[str, Any]:
        """The options in effect, as plain data."""
        return dataclasses.asdict(self.options)

    def close(self) -> None:
        """Release threads and storages."""


class ReplaySearcher(Searcher):
    """A searcher whose whole state is the list of records told to it."""

    def __init__(self, context: SearchContext, options: Any):
        super().__init__(context, options)
        self.records: list[Record] = []
        self.index: dict[str, int] = {}
        self.attempt = 0  # proposals since the last tell
        self.queue: list[Arch] = []
        self.draws = WindowDraws(context.space, context.candidates, context.window, context.cost_of)

    def rng(self) -> random.Random:
        """The generator of the current proposal: a function of (seed, told, attempt)."""
        return python_rng(self.context.seed, self.name, len(self.records), self.attempt)

    def enqueue(self, archs: Sequence[Arch]) -> None:
        self.queue = [dict(arch) for arch in archs]

    def ask(self) -> Arch:
        while self.queue:   # queued archs draw nothing, so the proposals after them replay exactly
            arch = self.queue.pop(0)
            if arch_id(arch) not in self.index:
                return arch
        arch = self.propose(self.rng())
        self.attempt += 1
        return arch

    @abc.abstractmethod
    def propose(self, rng: random.Random) -> Arch:
        """The next arch, drawn with `rng` only."""

    def random_arch(self, rng: random.Random) -> Arch:
        """A uniform draw (`WindowDraws.uniform`) avoiding the archs told."""
        return self.draws.uniform(rng, self.index)

    def window_arch(self, rng: random.Random) -> Arch:
        """An arch within the window (`WindowDraws.near`) avoiding the archs told."""
        return self.draws.near(rng, self.index)

    def trial_number(self) -> int:
        return len(self.records)

    def tell(self, arch: Arch, record: Record) -> None:
        self.records.append(dict(record))
        self.index[record["arch_id"]] = record["trial"]
        self.attempt = 0

    def reject(self, arch: Arch, reason: str, costs: Mapping[str, float]) -> None:
        """Nothing to record: `ask` already advanced `attempt`, so the next proposal draws anew."""

    def duplicate(self, arch_id: str) -> int | None:
        return self.index.get(arch_id)

    def history(self) -> list[Record]:
        return list(self.records)

    def completed(self) -> int:
        return len(self.records)
