"""The search loop, once for every searcher: ask, check constraints, evaluate, tell, log.

`run_search` is independent of training: it takes a space and an `evaluate(arch) -> dict`
callable returning the arch's score (`{"score_value": number}`, the value the searcher
maximises) and/or its validation top-1 (`{"val_top1": fraction}`, the score when no
`score_value` is given). `nas.search` builds it from an estimator (`--score`): `supernet`
recalibrates batch norm and measures validation top-1 of the trained supernet, never the test
split. A population score (`SearchPlan.rank`: a rank fusion) tells each trial the arch's score
among every arch evaluated so far, and the best arch is chosen at the end by scoring all of
them together.
1. Fail fast when the cheapest subnet (`space.min()`) breaks a budget, naming its cost.
2. Small spaces (at most `ENUMERATE_LIMIT` raw archs) are listed: when fewer feasible
   distinct archs exist than `trials`, the search evaluates all of them and says so.
3. Archs queued first (`SearchPlan.anchors`, none by default; `nas.search` queues none, so the
   min and max subnets compete like any candidate): those that meet the budgets are queued on
   the searcher (`enqueue`), evaluated before anything else inside the `trials` count, and
   marked `"anchor": true`.
4. Loop until `trials` evaluations are complete: `ask`; reject (cheap checks first: analytic
   MACs and params, then the latency table; then duplicates by `arch_id` of the canonical
   arch); `claim`; `evaluate` (and `rank`); `tell`; append to results.jsonl; TensorBoard and tqdm.
   `max_rejections` rejections in a row stop the search with a `SearchError`.
5. Write `ranked.jsonl`, `pareto.json`/`pareto.png`, `best.yaml` and `summary.json`; with a
   latency table and an `export` callable, measure the best arch and report the table's error.

Files in `out_dir`: `results.jsonl` (append-only, one line per evaluation as it finished:
`{"trial", "arch", "arch_id", "val_top1"?, "macs", "params", "latency_ms"?, "score",
"score_value", "anchor"?, ...extra metrics, "eval_seconds"}`; for a population score
`score_told`, the arch's rank among the archs evaluated before it, replaces `score_value`),
`ranked.jsonl` (written at the end, for a population score only when the loop completed so
that all were ranked together: every record with its final `score_value`,
and `score_told` for a population score, best first: highest `score_value`, then fewer MACs,
then the earlier trial; its first line is `best.yaml` and summary.json's record),
`pareto.json`, `pareto.png`, `best.yaml` (bare arch mapping), `summary.json`, `search.json`
(settings of a local search, checked on resume), `tb/`, and `optuna.journal` for Optuna
searchers without `--storage`. Resume: local searchers replay results.jsonl; Optuna
searchers reload their study.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from torch import nn

from estimators.score_spec import canonical_spec
from nas.core.arch import Arch, arch_id, write_arch_file
from nas.core.costs import COST_NAMES, LATENCY, MACS
from nas.core.errors import ConfigError, NasError, SearchError, check_int, clip_words
from nas.core.files import write_json
from nas.core.pareto import front as pareto_front
from nas.core.pareto import objective
from nas.core.registry import SEARCHERS, SUPERNET_SCORE
from nas.core.wording import announce
from nas.core.schema import Problems, convert_dataclass
from nas.engine.searching.latency import LatencyTable
from nas.core.locks import folder_lock
from nas.engine.searching.pareto_report import pareto_figure, write_pareto
from nas.engine.searching.costs import Constraints, SearchCosts
from nas.engine.searching.results import (RANKED, RESULTS, SearchResult, append_record, as_logged, as_told,
                                          read_results, unique_records, write_ranked)
from search_spaces.base import ArchSpace
from searchers.base import Record, SearchContext, Searcher, best_record, check_settings

MAX_REJECTIONS = 1000
ENUMERATE_LIMIT = 20_000
_RESERVED = {"trial", "arch", "arch_id", "val_top1", *COST_NAMES, "score", "score_value", "score_told", "anchor",
             "eval_seconds"}
_log = logging.getLogger(__name__)
Evaluate = Callable[[Arch], Mapping[str, Any]]
Rank = Callable[[Sequence[Arch]], Sequence[float]]


@dataclass(frozen=True)
class SearchPlan:
    """How a search runs: which searcher, how many evaluations, which archs first.

    Attributes:
        searcher: Registered searcher name (`random`, `evolution`, `optuna-tpe`, ...).
        options: Its options: a mapping, the options dataclass, or None (defaults).
        trials: Evaluations to complete in the search (in the shared study for Optuna):
            re-running a finished search evaluates nothing, raising it continues.
        seed: Search seed; worker k of a shared study uses `seed + k`.
        anchors: Archs to evaluate first where they meet the budgets, counted in `trials` and
            marked `"anchor": true` (none by default; `nas.search` passes none: no arch is
            privileged, not even those the strategy trains at every step).
        generator: The run's architecture generator, for `searcher: generator` (None: none).
        max_rejections: Infeasible or duplicate suggestions in a row before giving up.
        score: Name of what ranks the candidates (recorded in every record and the settings).
        rank: A population score (None: the score is `evaluate`'s): the scores of archs scored
            together. Each trial is told the score of its arch among every arch evaluated so
            far (`rank(earlier + [arch])[-1]`), and the best arch is chosen by `rank(all)`.
    """

    searcher: str = "random"
    options: Any = None
    trials: int = 100
    seed: int = 0
    anchors: Sequence[Mapping[str, Any]] = ()
    generator: Any = None
    max_rejections: int = MAX_REJECTIONS
    score: str = SUPERNET_SCORE
    rank: Rank | None = None


@dataclass(frozen=True)
class SharedStudy:
    """Where the Optuna searchers keep a study that several workers search together.

    `storage`: an Optuna storage URL (None: a journal file in the search folder); `study`: its
    name (None: the folder's name); `worker`: this process's index among the study's workers.
    """

    storage: str | None = None
    study: str | None = None
    worker: int = 0


@dataclass(frozen=True)
class SearchOutput:
    """Where a search writes (`dir`, created) and what it shows while running: a tqdm bar on
    stderr (`progress`), TensorBoard scalars under `dir/tb` (`tensorboard`) and `announce`, a
    line printed on stderr once every check has passed, before the first evaluation."""

    dir: Path
    progress: bool = True
    tensorboard: bool = True
    announce: str | None = None


def parse_searcher_options(name: str, options: Any = None, path: str = "search.options") -> Any:
    """The options dataclass of searcher `name` from a mapping (errors name `path.key`)."""
    entry = SEARCHERS.get(name)
    if options is None:
        return entry.options()
    if dataclasses.is_dataclass(options):
        if not isinstance(options, entry.options):
            raise ConfigError(f"{path}: expected {entry.options.__name__}, got {type(options).__name__}")
        return options
    problems = Problems()
    value = convert_dataclass(entry.options, dict(options), path, problems)
    if problems:
        raise ConfigError([f"{p}: {problem}" for p, problem in problems])
    return value


def _feasible(space: ArchSpace, costs: SearchCosts) -> tuple[Arch, ...] | None:
    if space.raw_size() > ENUMERATE_LIMIT:
        return None
    return tuple(a for a in space.enumerate() if costs.feasible(a))


def _plain(name: str, value: Any) -> Any:
    value = value.item() if hasattr(value, "item") else value  # tensors, numpy scalars
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise SearchError(f"evaluate: metric '{name}' is a {type(value).__name__}; return numbers or strings")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _evaluate(evaluate: Evaluate, plan: SearchPlan, searcher: Searcher, arch: Arch, key: str,
              costs: Mapping[str, float], anchor: bool = False) -> Record:
    start = time.perf_counter()
    try:
        told = None
        if plan.rank is not None:     # before `evaluate`, which reports what ranking evaluated
            told = plan.rank([*(r["arch"] for r in searcher.history()), arch])[-1]
        metrics = evaluate(arch)
        if not isinstance(metrics, Mapping):
            raise SearchError(f"evaluate: returned a {type(metrics).__name__} for arch {key}; expected a mapping")
        top1 = metrics.get("val_top1")
        if top1 is not None and (not _number(top1) or not 0 <= top1 <= 1):
            raise SearchError(f"evaluate: returned val_top1={top1!r} for arch {key}; expected a fraction in [0, 1]")
        value = _plain("score_value", told if told is not None else metrics.get("score_value", top1))
        if not _number(value):
            raise SearchError(f"evaluate: returned score_value={value!r} for arch {key} (score '{plan.score}'); "
                              "expected a finite number")
        extra = {k: _plain(k, v) for k, v in metrics.items() if k not in _RESERVED}
    except BaseException as e:
        searcher.abort(e)
        raise
    return {"trial": searcher.trial_number(), "arch": arch, "arch_id": key,
            **({"val_top1": float(top1)} if top1 is not None else {}), **costs,
            "score": plan.score, "score_value": float(value), **({"anchor": True} if anchor else {}), **extra,
            "eval_seconds": round(time.perf_counter() - start, 4)}


def _rescored(records: list[Record], plan: SearchPlan) -> list[Record]:
    """A population score's records with `score_value` from scoring all of them together (the
    value told at their trial kept as `score_told`); other scores' records unchanged."""
    if plan.rank is None or not records:
        return records
    final = plan.rank([r["arch"] for r in records])
    return [{**r, "score_value": float(v), "score_told": r["score_value"]} for r, v in zip(records, final)]


class _Log:
    """tqdm progress (stderr) and TensorBoard scalars under `out_dir/tb`."""

    def __init__(self, out_dir: Path, total: int, done: int, name: str, progress: bool, tensorboard: bool,
                 score: str = SUPERNET_SCORE):
        from tqdm.auto import tqdm
        self.bar = tqdm(total=total, initial=min(done, total), desc=f"search {name}", unit="arch",
                        disable=not progress, file=sys.stderr, dynamic_ncols=True)
        self.score = score
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(log_dir=str(out_dir / "tb"))

    def step(self, record: Record, best: Record, done: int, rejected: int) -> None:
        self.bar.n = min(done, self.bar.total)
        value = objective(best)
        shown = f"{100 * value:.2f}%" if self.score == SUPERNET_SCORE else f"{self.score} {value:.4g}"
        self.bar.set_postfix(best=shown, rejected=rejected)
        if self.writer is not None:
            scalars = {**({"val_top1": record["val_top1"]} if "val_top1" in record else {}),
                       **({"best_val_top1": best["val_top1"]} if "val_top1" in best else {}),
                       "score_value": record["score_value"], "best_score_value": value,
                       **{name: record[name] for name in COST_NAMES if name in record}, "rejected": rejected}
            for name, value in scalars.items():
                self.writer.add_scalar(f"search/{name}", value, done)

    def figure(self, tag: str, make: Callable[[], Any], step: int) -> None:
        """A matplotlib figure in TensorBoard's Images tab (made only when TensorBoard is on)."""
        if self.writer is not None:
            self.writer.add_figure(tag, make(), step, close=True)

    def close(self) -> None:
        self.bar.close()
        if self.writer is not None:
            self.writer.close()


def _loop(searcher: Searcher, space: ArchSpace, evaluate: Evaluate, plan: SearchPlan, costs_of: SearchCosts,
          target: int, out_dir: Path, log: _Log, anchor_ids: frozenset[str] = frozenset()) -> int:
    max_rejections = plan.max_rejections
    new = rejected = duplicates = 0
    while searcher.completed() < target:  # bounded: every pass evaluates or counts a rejection
        if rejected >= max_rejections:
            raise SearchError(
                f"stopped after {searcher.completed()} of {target} evaluations: {max_rejections} suggestions in a "
                f"row were infeasible ({rejected - duplicates}) or already evaluated ({duplicates}); "
                "relax the budget or lower --trials")
        arch = space.canonical(searcher.ask())
        key = arch_id(arch)
        costs = costs_of(arch, key)
        reason = costs_of.violation(costs)
        if reason is None and (earlier := searcher.duplicate(key)) is not None:
            reason, duplicates = f"duplicate of trial {earlier}", duplicates + 1
        if reason is not None:
            searcher.reject(arch, reason, costs)
            rejected += 1
            continue
        if not searcher.claim(target):
            continue
        record = _evaluate(evaluate, plan, searcher, arch, key, costs, key in anchor_ids)
        searcher.tell(arch, record)
        append_record(out_dir / RESULTS, as_logged(record, plan.rank is not None))
        new += 1
        log.step(record, searcher.best(), searcher.completed(), rejected)
        rejected = duplicates = 0
    return new


def _feasible_anchors(space: ArchSpace, anchors: Sequence[Mapping[str, Any]], costs: SearchCosts) -> list[Arch]:
    """The distinct anchors that meet the budgets, canonical, in the given order."""
    chosen: dict[str, Arch] = {}
    for arch in anchors:
        arch = space.canonical(arch)
        key = arch_id(arch)
        if key not in chosen and costs.feasible(arch, key):
            chosen[key] = arch
    return list(chosen.values())


def _local_state(out_dir: Path, settings: dict[str, Any]) -> Mapping[str, Any] | None:
    path = out_dir / "search.json"
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text())
        stored_settings, options = stored["settings"], stored["options"]
        if not isinstance(stored_settings, dict) or not isinstance(options, dict):
            raise TypeError("settings and options must be mappings")
    except (ValueError, KeyError, TypeError) as e:
        raise SearchError(f"{path}: not the settings of a search ({clip_words(str(e))}); "
                          "remove the file or use another --out") from e
    if isinstance(stored_settings.get("score"), str):     # spelt by hand or before specs had one spelling
        stored_settings["score"] = _canonical_score(stored_settings["score"])
    check_settings(stored_settings, settings, f"the search in {out_dir}",
                   "resume with the same settings or use another --out")
    return options


def _canonical_score(name: str) -> str:
    """The canonical spelling of a stored score spec; the name itself when it is no valid spec
    now (an estimator since removed: the settings check then reports the difference)."""
    try:
        return canonical_spec(name)
    except NasError:
        return name


def _check_arguments(plan: SearchPlan, shared: bool, study: SharedStudy) -> None:
    """Check the arguments that depend neither on the costs nor on the search directory."""
    check_int("trials", plan.trials, 1)
    if not shared and (study.storage is not None or study.study is not None or study.worker != 0):
        raise ConfigError(f"storage: only the optuna searchers share a study; '{plan.searcher}' keeps its state "
                          "in the search directory")
    check_int("worker", study.worker, 0)


def _prepare(active: Searcher, context: SearchContext) -> tuple[int, list[str]]:
    """Replay a local search's results; returns the evaluations to reach and notes for the user."""
    notes: list[str] = []
    if not active.shared:
        records = read_results(context.out_dir / RESULTS)
        unique = unique_records(records)
        if len(unique) < len(records):
            notes.append(f"results.jsonl repeats {len(records) - len(unique)} archs; each counts once")
        active.restore([as_told(r) for r in unique])
        write_json(context.out_dir / "search.json", {"settings": dict(context.settings),
                                                      "options": active.resolved_options()})
    target = context.trials
    if context.candidates is not None and len(context.candidates) < target:
        target = len(context.candidates)
        notes.append(f"only {target} distinct architectures meet the budget; evaluating all of them "
                     f"instead of --trials {context.trials}")
    limit = active.limit()
    if limit is not None and limit < target:
        target = limit
        notes.append(f"{active.name} stops after {target} evaluations (its generations option)")
    for note in notes:
        _log.warning(note)
    return target, notes


def run_search(space: ArchSpace, evaluate: Evaluate, plan: SearchPlan, output: SearchOutput | str | Path, *,
               constraints: Constraints = Constraints(), latency: LatencyTable | None = None,
               export: Callable[[Arch], nn.Module] | None = None, study: SharedStudy = SharedStudy()) -> SearchResult:
    """Search `space` for the most accurate arch within `constraints` (see the module docstring).

    Args:
        space: The architecture space.
        evaluate: `evaluate(arch) -> {"val_top1": fraction, ...extra metrics}`.
        plan: The searcher, its options, the evaluations to complete, the seed and the anchors.
        output: Where to write (a `SearchOutput`, or just the directory).
        constraints: Budgets; `max_latency_ms` needs `latency`.
        latency: Latency table: predicts `latency_ms` of every arch (and checks its budget).
        export: `arch -> static module` (e.g. `supernet.export`): with `latency`, the best
            arch is measured on the table's device to report the table's error.
        study: The shared Optuna study this process works on (Optuna searchers only).
    """
    output = output if isinstance(output, SearchOutput) else SearchOutput(Path(output))
    entry = SEARCHERS.get(plan.searcher)
    options = parse_searcher_options(plan.searcher, plan.options)
    shared = entry.obj.shared
    _check_arguments(plan, shared, study)
    costs = SearchCosts(space, constraints.budgets(), latency)
    costs.check_cheapest()
    out_dir = Path(output.dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # One process at a time in a local search folder (Optuna storages coordinate their workers).
    with contextlib.nullcontext() if shared else folder_lock(out_dir, "search"):
        settings = {"searcher": plan.searcher, "space": space.name, "space_fingerprint": space.fingerprint(),
                    **costs.settings(), "score": plan.score}
        if not shared:
            settings["seed"] = plan.seed
        context = SearchContext(space, plan.trials, plan.seed + study.worker, study.worker, costs.names,
                                costs.budgets, out_dir, study.storage, study.study, settings,
                                None if shared else _local_state(out_dir, settings), _feasible(space, costs),
                                plan.generator)
        active = entry.obj(context, options)
        try:
            target, notes = _prepare(active, context)
            first = _feasible_anchors(space, plan.anchors, costs)
            active.enqueue(first)
            log = _Log(out_dir, target, active.completed(), plan.searcher, output.progress, output.tensorboard,
                       plan.score)
            if output.announce is not None:
                announce(output.announce)
            history: list[Record] | None = None
            try:
                new = _loop(active, space, evaluate, plan, costs, target, out_dir, log,
                            frozenset(arch_id(a) for a in first))
                history = _rescored(active.history(), plan)
            finally:
                final = history is not None or plan.rank is None     # else the values told, not final
                if history is None:    # the loop failed: what was evaluated is kept, as told
                    history = active.history()
                try:
                    if history:  # also when the loop failed: what was evaluated is kept
                        write_pareto(out_dir, history, costs.names, costs.budgets)
                        write_arch_file(best_record(history)["arch"], out_dir / "best.yaml")
                        if final:
                            write_ranked(out_dir / RANKED, history)
                        else:
                            (out_dir / RANKED).unlink(missing_ok=True)     # an earlier run's, now stale
                        log.figure("search/pareto", lambda: pareto_figure(history, costs.names, costs.budgets),
                                   len(history))
                finally:
                    log.close()
        finally:
            active.close()
        best = best_record(history)
        check = costs.latency_check(export, best["arch"])
        if check is not None:
            notes.append(f"latency of the best arch: predicted {check['predicted_ms']:.3f} ms, measured "
                         f"{check['measured_ms']:.3f} ms ({check['error_pct']:+.1f}%)")
        result = SearchResult(best["arch"], best["arch_id"], best.get("val_top1"), best["macs"], best["params"],
                              best.get(LATENCY.name), out_dir, len(history), new, best, check, notes,
                              pareto_front(history, MACS.name), sorted(history, key=lambda r: r["trial"]),
                              plan.score, objective(best))
        write_json(out_dir / "summary.json", {**result.to_json(), "searcher": plan.searcher,
                                               "options": active.resolved_options(), "seed": plan.seed,
                                               "worker": study.worker, "trials": plan.trials, "target": target,
                                               "budgets": costs.budgets, "record": best,
                                               "anchors": [arch_id(a) for a in first], "notes": notes})
    return result
