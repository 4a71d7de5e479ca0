"""`optuna-tpe` and `optuna-nsga2`: Optuna's ask/tell over the space's categorical choices.

Every choice of the space is declared up front as a `CategoricalDistribution`
(`study.ask(fixed_distributions=...)`). TPE (Bergstra et al., 2011; constant liar for
parallel workers) maximises validation top-1; NSGA-II (Deb et al., 2002) maximises it and
minimises `macs` and every constrained cost. Infeasible and duplicate suggestions are told
PRUNED with a `reason` user attribute and their constraint values; evaluated ones COMPLETE
with their constraint values and their results.jsonl record (user attribute `record`).
Constraint values are relative, `cost / budget - 1` (<= 0: feasible), set with Optuna 5's
`Trial.set_constraint`, which both samplers read.

The study is the searcher's whole state, so several processes (worker k seeded S + k) share
it through one storage (`searchers/optuna_storage.py`), and a killed search resumes. Trial
numbers order the workers: a trial is evaluated only while the COMPLETE trials plus the
running trials numbered before it stay below `--trials`, so the study ends with exactly
`--trials` COMPLETE trials. A database error mid-search stops it with one line
(`optuna_storage.StorageLost`); what the study holds stays, for the same command to resume.
"""
from __future__ import annotations

import abc
import functools
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence, TypeVar

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError, SearchError
from nas.core.pareto import objective
from nas.core.registry import SEARCHERS
from nas.core.rng import derive_seed, python_rng
from searchers import optuna_storage
from searchers.base import (
    Record,
    SearchContext,
    Searcher,
    check_settings,
    merge_options,
)
from searchers.window import WindowDraws

DEFAULT_STUDY = "search"
POLL_SECONDS = 0.2
ASK_TIMEOUT = 60.0  # longest wait for another worker's ask in progress (a loaded machine stalls it for seconds)
WAIT_TIMEOUT = 6 * 3600.0  # longest wait for other workers' running trials near the end
_FIX = "resume with the same settings, or use another {study} (or {out})"
_Method = TypeVar("_Method", bound=Callable[..., Any])


def _on_storage(method: _Method) -> _Method:
    """`method` with the storage's errors as `StorageLost`, after which the searcher is `lost`."""
    @functools.wraps(method)
    def wrapped(self: OptunaSearcher, *args: Any, **kwargs: Any) -> Any:
        try:
            with optuna_storage.storage_errors(self.context.storage):
                return method(self, *args, **kwargs)
        except optuna_storage.StorageLost:
            self.lost = True
            raise
    return wrapped  # type: ignore[return-value]


@dataclass(frozen=True)
class TPEOptions:
    """Options of `optuna-tpe`; None defaults are derived from `--trials`."""

    n_startup_trials: int | None = None   # None: trials // 5 within [2, 10] (Optuna's 10 wastes small budgets)
    multivariate: bool = True             # model the choices jointly

    def __post_init__(self) -> None:
        if self.n_startup_trials is not None and self.n_startup_trials < 0:
            raise ConfigError(f"n_startup_trials: must be >= 0, got {self.n_startup_trials}")


@dataclass(frozen=True)
class NSGA2Options:
    """Options of `optuna-nsga2`; None defaults are derived from `--trials`."""

    population_size: int | None = None    # None: trials // 5 within [4, 50] (Optuna's 50 would be one generation)
    crossover_prob: float = 0.9
    mutation_prob: float | None = None    # None: Optuna's 1 / number of choices

    def __post_init__(self) -> None:
        problems = []
        if self.population_size is not None and self.population_size < 2:
            problems.append(f"population_size: must be >= 2, got {self.population_size}")
        if not 0 <= self.crossover_prob <= 1:
            problems.append(f"crossover_prob: must be in [0, 1], got {self.crossover_prob}")
        if self.mutation_prob is not None and not 0 <= self.mutation_prob <= 1:
            problems.append(f"mutation_prob: must be in [0, 1], got {self.mutation_prob}")
        if problems:
            raise ConfigError(problems)


class OptunaSearcher(Searcher):
    """Ask/tell over a (possibly shared) Optuna study; subclasses choose sampler and objectives."""

    shared = True

    def __init__(self, context: SearchContext, options: Any):
        super().__init__(context, options)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.distributions = {key: CategoricalDistribution(list(values))
                              for key, values in self.space.choices().items()}
        self.lost = False                       # the storage failed: nothing more is asked of it
        self._history: list[Record] = []        # what `history` read last
        storage = optuna_storage.open_storage(context.storage, context.out_dir)
        self.storage_file = optuna_storage.storage_file(context.storage, context.out_dir)
        with optuna_storage.storage_errors(context.storage):
            self.study = self._load_study(storage, context, options)
        self.heartbeat = optuna_storage.Heartbeat(optuna_storage.HEARTBEAT_INTERVAL)
        self.trial: optuna.Trial | None = None
        self.draws = WindowDraws(context.space, context.candidates, context.window, context.cost_of)

    def _load_study(self, storage: optuna.storages.BaseStorage, context: SearchContext,
                    options: Any) -> optuna.Study:
        """The study created or loaded, its settings checked, its sampler seeded, its stale trials failed."""
        name = context.study if context.study is not None else DEFAULT_STUDY
        study = optuna.create_study(storage=storage, study_name=name, directions=self.directions(),
                                    load_if_exists=True)
        where = f"study '{name}'"
        stored = study.user_attrs.get("nas_settings")
        if stored is not None:
            check_settings(stored, context.settings, where, _FIX)
            self.options = merge_options(options, self.options, study.user_attrs.get("nas_options"), where, _FIX)
        if [d.name.lower() for d in study.directions] != self.directions():
            raise SearchError(f"{where} optimises {[d.name.lower() for d in study.directions]}, "
                              f"not {self.directions()}; {_FIX}")
        if stored is None:
            study.set_user_attr("nas_settings", dict(context.settings))
            study.set_user_attr("nas_options", self.resolved_options())
        start = len(study.get_trials(deepcopy=False))
        # A fresh study starts from the worker's seed; a resumed one from a seed derived from
        # its length, so it does not replay its first suggestions.
        seed = context.seed if start == 0 else derive_seed(context.seed, "optuna", start)
        study.sampler = self.sampler(seed % 2**32)
        optuna_storage.fail_stale_trials(study)
        return study

    # -- what subclasses choose -------------------------------------------------------------
    def directions(self) -> list[str]:
        return ["maximize"]

    def values(self, record: Record) -> float | list[float]:
        return objective(record)

    @abc.abstractmethod
    def sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        """The Optuna sampler of this searcher, seeded with `seed`."""

    @abc.abstractmethod
    def startup_trials(self) -> int:
        """Completed trials before the sampler models the study (its random start-up trials)."""

    # -- protocol ---------------------------------------------------------------------------
    @_on_storage
    def ask(self) -> Arch:
        with optuna_storage.ask_lock(self.storage_file):    # one enqueued trial, one worker
            self._enqueue_window_draw()
            self.trial = self.study.ask(self.distributions)
        arch = self.space.canonical(self.trial.params)
        self.trial.set_user_attr("nas", optuna_storage.worker_info(arch_id(arch), self.context.worker))
        self.heartbeat.beat(self.trial)
        return arch

    def _enqueue_window_draw(self) -> None:
        """Among the start-up trials, every other completed one is drawn within the window (as
        evolution's first generation: `searchers.window`) rather than by the sampler: enqueued
        before the ask, unless a trial already waits (the `first` archs go first). The draw is a
        function of (seed, trials in the study), so a resumed study draws anew."""
        if not self.context.window:
            return
        trials = self.study.get_trials(deepcopy=False)
        completed = sum(t.state == TrialState.COMPLETE for t in trials)
        if completed >= self.startup_trials() or completed % 2 == 0 or any(t.state == TrialState.WAITING
                                                                          for t in trials):
            return
        seen = {key for t in trials if t.state in (TrialState.COMPLETE, TrialState.RUNNING)
                and (key := self._arch_id_of(t)) is not None}
        rng = python_rng(self.context.seed, self.name, "window", len(trials))
        self.study.enqueue_trial(dict(self.space.canonical(self.draws.near(rng, seen))))

    @_on_storage
    def enqueue(self, archs: Sequence[Arch]) -> None:
        """Enqueue each arch as a trial of the study (so the sampler learns from it) unless the
        study already holds it waiting, running or complete; a worker racing another to
        enqueue it makes a duplicate, which the runner's duplicate check prunes."""
        taken = set()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING,
                                                                   TrialState.COMPLETE)):
            info, fixed = trial.user_attrs.get("nas"), trial.system_attrs.get("fixed_params")
            if info is not None:
                taken.add(info["arch_id"])
            elif fixed is not None:
                taken.add(arch_id(self.space.canonical(fixed)))
        for arch in archs:
            if arch_id(arch) not in taken:
                self.study.enqueue_trial(dict(arch))

    def trial_number(self) -> int:
        return self._open().number

    def _open(self) -> optuna.Trial:
        if self.trial is None:
            raise AssertionError("no asked trial is open")
        return self.trial

    @_on_storage
    def _finish(self, costs: Mapping[str, float] | None, values: Any = None, state: TrialState | None = None,
                **attrs: Any) -> None:
        trial = self._open()
        self.heartbeat.beat(None)
        self.trial = None
        for cost, budget in self.context.budgets.items() if costs is not None else ():
            trial.set_constraint(cost, costs[cost] / budget - 1.0)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        try:
            self.study.tell(trial, values, state=state)
        except ValueError as e:  # our trial was failed by another worker as stale
            raise SearchError(f"trial {trial.number} was closed by another worker ({e}); "
                              f"its worker stalled for over {optuna_storage.GRACE_PERIOD:g} s") from e

    def tell(self, arch: Arch, record: Record) -> None:
        self._finish(record, self.values(record), record=dict(record))

    def reject(self, arch: Arch, reason: str, costs: Mapping[str, float]) -> None:
        self._finish(costs, state=TrialState.PRUNED, reason=reason)

    @_on_storage
    def abort(self, error: BaseException) -> None:
        if self.trial is not None:
            trial, self.trial = self.trial, None
            self.heartbeat.beat(None)
            if self.lost:       # left RUNNING: a resume fails it as its worker's, gone
                return
            trial.set_user_attr("error", f"{type(error).__name__}: {error}"[:200])
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)

    @_on_storage
    def duplicate(self, arch_id: str) -> int | None:
        mine = self._open().number
        deadline = time.monotonic() + ASK_TIMEOUT
        while True:
            pending = False
            for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
                if trial.number == mine or (trial.state == TrialState.RUNNING and trial.number > mine):
                    continue
                key = self._arch_id_of(trial)
                if key is None:
                    pending = pending or trial.state == TrialState.RUNNING
                elif key == arch_id:
                    return trial.number
            if not pending or time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def _arch_id_of(self, trial: FrozenTrial) -> str | None:
        """The arch_id of another worker's trial: its `nas` attribute, or (before its worker has
        set that) its parameters, which `study.ask` stores in full before it returns; None while
        that ask is still running."""
        info = trial.user_attrs.get("nas")
        if info is not None:
            return info["arch_id"]
        if set(trial.params) == set(self.distributions):
            return arch_id(self.space.canonical(trial.params))
        return None

    @_on_storage
    def claim(self, target: int) -> bool:
        mine = self._open().number
        deadline = time.monotonic() + WAIT_TIMEOUT
        while time.monotonic() < deadline:
            optuna_storage.fail_stale_trials(self.study, keep=mine)
            trials = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
            done = sum(t.state == TrialState.COMPLETE for t in trials)
            if done >= target:
                self._finish(None, state=TrialState.PRUNED, reason=f"trials {target} reached")
                return False
            earlier = sum(t.state == TrialState.RUNNING and t.number < mine for t in trials)
            if done + earlier < target:
                return True
            time.sleep(POLL_SECONDS)
        raise SearchError(f"waited {WAIT_TIMEOUT:g} s for other workers' trials to finish; "
                          "their workers may hang")

    @_on_storage
    def history(self) -> list[Record]:
        """The records of the study's completed trials (once the storage is lost: those read last)."""
        if not self.lost:
            trials = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            self._history = [dict(t.user_attrs["record"]) for t in trials if "record" in t.user_attrs]
        return list(self._history)

    @_on_storage
    def completed(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))

    def close(self) -> None:
        try:
            if self.trial is not None:
                self.abort(SearchError("search stopped"))
        finally:
            self.heartbeat.close()


@SEARCHERS.register("optuna-tpe", options=TPEOptions)
class TPESearcher(OptunaSearcher):
    """TPE maximising validation top-1 under the constraints."""

    name = "optuna-tpe"

    @classmethod
    def resolve_options(cls, options: TPEOptions, trials: int) -> TPEOptions:
        if options.n_startup_trials is not None:
            return options
        return replace(options, n_startup_trials=min(10, max(2, trials // 5)))

    def startup_trials(self) -> int:
        return self.options.n_startup_trials

    def sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(n_startup_trials=self.options.n_startup_trials, seed=seed,
                                              multivariate=self.options.multivariate, constant_liar=True)


@SEARCHERS.register("optuna-nsga2", options=NSGA2Options)
class NSGA2Searcher(OptunaSearcher):
    """NSGA-II over (validation top-1, MACs and every constrained cost)."""

    name = "optuna-nsga2"

    @classmethod
    def resolve_options(cls, options: NSGA2Options, trials: int) -> NSGA2Options:
        if options.population_size is not None:
            return options
        return replace(options, population_size=min(50, max(4, trials // 5)))

    def startup_trials(self) -> int:
        return self.options.population_size     # the first generation is drawn at random

    def directions(self) -> list[str]:
        return ["maximize"] + ["minimize"] * len(self.context.costs)

    def values(self, record: Record) -> list[float]:
        return [objective(record), *(float(record[c]) for c in self.context.costs)]

    def sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.NSGAIISampler(population_size=self.options.population_size,
                                             crossover_prob=self.options.crossover_prob,
                                             mutation_prob=self.options.mutation_prob, seed=seed)

