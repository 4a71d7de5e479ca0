"""The search loop, once for every searcher: ask, check constraints, evaluate, tell, log.

`search_loop` is independent of training: it takes a space, an `evaluate(arch) -> dict`
callable returning the arch's score (`{"score_value": number}`, the value the searcher
maximises) and/or its validation top-1 (`{"val_top1": fraction}`, the score when no
`score_value` is given), and a `SearchRequest`. A population score (`rank`: a rank fusion)
tells each trial the arch's score among every arch evaluated so far, and the final scores
rank all of them together at the end.
1. Fail fast when a budget is below the cheapest arch (the min subnet's MACs and params, the
   latency table's cheapest live arch) or a MACs or params budget above the max subnet's
   (`SearchCosts.check_range`), naming its cost.
2. Small spaces (at most `ENUMERATE_LIMIT` raw archs) are listed: when fewer feasible
   distinct archs exist than `trials`, the search evaluates all of them and says so.
3. Loop until `trials` evaluations are complete: `ask`; reject (cheap checks first: analytic
   MACs and params, then the latency table; then duplicates by `arch_id` of the canonical
   arch); `claim`; `evaluate` (and `rank`); `tell`; append to results.jsonl; TensorBoard and tqdm.
   The request's `first` archs (the supernet's anchors, for a search by the supernet) that
   meet the budgets are queued before the searcher's own proposals. When `max_rejections` suggestions in a row
   fail (a budget that admits few archs of a large space, e.g. `0%`, the min subnet's cost),
   the cheapest arch that meets every budget (the min subnet, or the latency floor's arch) is
   queued once; when they fail again the search
   ends with what it evaluated, and a note says so.
The loop writes results.jsonl (the journal a resume replays) and `search.json` (the settings
of a local search, checked on resume); the files of the answer are written once, by
`nas.engine.searching.outputs`, after the loop (and the finalists) ended. A loop that fails
leaves what it evaluated: `write_stopped` writes the files of what it had.

Resume: local searchers replay results.jsonl; Optuna searchers reload their study.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from estimators.score_spec import canonical_spec
from nas.core.arch import Arch, arch_id
from nas.core.costs import COST_NAMES
from nas.core.errors import ConfigError, NasError, SearchError, clip_words
from nas.core.files import write_json
from nas.core.pareto import objective
from nas.core.registry import SEARCHERS, SUPERNET_SCORE
from nas.core.schema import Problems, convert_dataclass
from nas.core.wording import announce
from nas.engine.searching.costs import SearchCosts
from nas.engine.latency.table import LatencyTable
from nas.engine.searching.outputs import write_stopped
from nas.engine.searching.request import WINDOW_SHARE, SearchRequest
from nas.engine.searching.results import (RESULTS, SearchResult, SearchRun, append_record, as_logged, as_told,
                                          read_results, unique_records)
from search_spaces.base import ArchSpace
from searchers.base import Record, SearchContext, Searcher, check_settings

ENUMERATE_LIMIT = 20_000
_RESERVED = {"trial", "arch", "arch_id", "val_top1", *COST_NAMES, "score", "score_value", "score_told",
             "eval_seconds"}
_log = logging.getLogger(__name__)
Evaluate = Callable[[Arch], Mapping[str, Any]]
Rank = Callable[[Sequence[Arch]], Sequence[float]]


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


def _record(metrics: Any, told: float | None, score: str, trial: int, arch: Arch, key: str,
            costs: Mapping[str, float], seconds: float) -> Record:
    """The results.jsonl record of an evaluation from what `evaluate` returned (checked)."""
    if not isinstance(metrics, Mapping):
        raise SearchError(f"evaluate: returned a {type(metrics).__name__} for arch {key}; expected a mapping")
    top1 = metrics.get("val_top1")
    if top1 is not None and (not _number(top1) or not 0 <= top1 <= 1):
        raise SearchError(f"evaluate: returned val_top1={top1!r} for arch {key}; expected a fraction in [0, 1]")
    value = _plain("score_value", told if told is not None else metrics.get("score_value", top1))
    if not _number(value):
        raise SearchError(f"evaluate: returned score_value={value!r} for arch {key} (score '{score}'); "
                          "expected a finite number")
    extra = {k: _plain(k, v) for k, v in metrics.items() if k not in _RESERVED}
    return {"trial": trial, "arch": arch, "arch_id": key, **({"val_top1": float(top1)} if top1 is not None else {}),
            **costs, "score": score, "score_value": float(value), **extra, "eval_seconds": round(seconds, 4)}


def _rescored(records: list[Record], rank: Rank | None) -> list[Record]:
    """A population score's records with `score_value` from scoring all of them together (the
    value told at their trial kept as `score_told`); other scores' records unchanged."""
    if rank is None or not records:
        return records
    final = rank([r["arch"] for r in records])
    return [{**r, "score_value": float(v), "score_told": r["score_value"]} for r, v in zip(records, final)]


class _Log:
    """tqdm progress (stderr) and TensorBoard scalars under `out_dir/tb`."""

    def __init__(self, request: SearchRequest, total: int, done: int, show: bool):
        from tqdm.auto import tqdm
        self.bar = tqdm(total=total, initial=min(done, total), desc=f"search {request.searcher}", unit="arch",
                        disable=not (show and request.progress), file=sys.stderr, dynamic_ncols=True)
        self.score = request.score
        self.writer = None
        if request.tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(log_dir=str(request.out / "tb"))

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
        raise SearchError(f"{path}: not the settings of a search ({clip_words(str(e))})",
                          fix="remove the file or use another {out}") from e
    if isinstance(stored_settings.get("score"), str):     # spelt by hand or before specs had one spelling
        stored_settings["score"] = _canonical_score(stored_settings["score"])
    fix = "resume with the same settings or use another {out}"
    if any(stored_settings.get(key) != settings.get(key) for key in ("checkpoint", "step")):
        fix = ("the run was trained further, or another checkpoint is searched; use another {out}, or remove "
               "the folder to search again")
    check_settings(stored_settings, settings, f"the search in {out_dir}", fix)
    return options


def _canonical_score(name: str) -> str:
    """The canonical spelling of a stored score spec; the name itself when it is no valid spec
    now (an estimator since removed: the settings check then reports the difference)."""
    try:
        return canonical_spec(name)
    except NasError:
        return name


def check_request(space: ArchSpace, request: SearchRequest, latency: LatencyTable | None = None,
                  worker: int | None = None) -> tuple[Any, SearchCosts]:
    """Check what a search of `space` can check before it makes its folder (the searcher's
    options, the study, the budgets against the cheapest subnet); returns the parsed options
    and the costs."""
    from nas.core.errors import check_int

    worker = request.worker if worker is None else worker
    options = parse_searcher_options(request.searcher, request.options)
    check_int("trials", request.trials, 1)
    if not request.shared and (request.storage is not None or request.study is not None or worker != 0):
        raise ConfigError(f"storage: only the optuna searchers share a study; '{request.searcher}' keeps its state "
                          "in the search directory")
    check_int("worker", worker, 0)
    costs = SearchCosts(space, request.constraints.budgets(), latency)
    costs.check_range()
    return options, costs


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
                     f"instead of the {context.trials} trials asked")
    limit = active.limit()
    if limit is not None and limit < target:
        target = limit
        notes.append(f"{active.name} stops after {target} evaluations (its generations option)")
    for note in notes:
        _log.warning(note)
    return target, notes


def search_loop(space: ArchSpace, evaluate: Evaluate, request: SearchRequest, *, rank: Rank | None = None,
                generator: Any = None, latency: LatencyTable | None = None, worker: int | None = None,
                show: bool = True) -> SearchRun:
    """Search `space` for the best arch within `request.constraints` (see the module docstring).

    Args:
        space: The architecture space.
        evaluate: `evaluate(arch) -> {"score_value"?, "val_top1"?, ...extra metrics}`.
        request: The search (searcher, options, trials, seed, score, budgets, folder, study).
        rank: A population score (None: the score is `evaluate`'s): the scores of archs scored
            together. Each trial is told the score of its arch among every arch evaluated so
            far (`rank(earlier + [arch])[-1]`), and the final scores are `rank(all)`.
        generator: The run's architecture generator, for `searcher: generator` (None: none).
        latency: Latency table: predicts `latency_ms` of every arch (and checks its budget).
        worker: This process's index among the workers of a shared study (None: `request.worker`).
        show: Show the progress bar (`request.progress`) and `request.score_line` on stderr
            (False in spawned workers: their parent shows them).
    """
    searcher, costs, target, notes, log = _start(space, request, generator, latency, worker, show)
    new = rejected = duplicates = 0
    queued_min = False
    with _closing(searcher, log, request.out, costs, final=rank is None):
        if show and request.announce_score and request.score_line is not None:
            announce(request.score_line)
        if (request.worker if worker is None else worker) == 0:
            _queue_first(searcher, request.first, costs)
        while searcher.completed() < target:  # bounded: every pass evaluates or counts a rejection
            if rejected >= request.max_rejections:
                if not queued_min and _queue_min(searcher, costs, notes):
                    queued_min, rejected, duplicates = True, 0, 0
                    continue
                _stop(searcher, request, target, rejected, duplicates, notes)
                break
            arch = space.canonical(searcher.ask())
            key = arch_id(arch)
            arch_costs = costs(arch, key)
            reason = costs.violation(arch_costs)
            if reason is None and (earlier := searcher.duplicate(key)) is not None:
                reason, duplicates = f"duplicate of trial {earlier}", duplicates + 1
            if reason is not None:
                searcher.reject(arch, reason, arch_costs)
                rejected += 1
                continue
            if not searcher.claim(target):
                continue
            start = time.perf_counter()
            try:
                # a population score ranks before `evaluate`, which reports what ranking evaluated
                told = rank([*(r["arch"] for r in searcher.history()), arch])[-1] if rank is not None else None
                record = _record(evaluate(arch), told, request.score, searcher.trial_number(), arch, key, arch_costs,
                                 time.perf_counter() - start)
            except BaseException as e:
                searcher.abort(e)
                raise
            searcher.tell(arch, record)
            append_record(request.out / RESULTS, as_logged(record, rank is not None))
            new += 1
            log.step(record, searcher.best(), searcher.completed(), rejected)
            rejected = duplicates = 0
        history = _rescored(searcher.history(), rank)
        if history:
            log.figure("search/pareto", lambda: _figure(history, costs), len(history))
    return SearchRun(history, new, target, notes, searcher.resolved_options(), costs)


def _start(space: ArchSpace, request: SearchRequest, generator: Any, latency: LatencyTable | None,
           worker: int | None, show: bool) -> tuple[Searcher, SearchCosts, int, list[str], _Log]:
    """The searcher of `request` with its state (replayed or reloaded), the costs, the
    evaluations to reach, notes for the user and the progress log; the folder made and a local
    search's settings checked against search.json."""
    worker = request.worker if worker is None else worker
    entry = SEARCHERS.get(request.searcher)
    shared = entry.obj.shared
    options, costs = check_request(space, request, latency, worker)
    request.out.mkdir(parents=True, exist_ok=True)
    settings = {"searcher": request.searcher, "space": space.name, "space_fingerprint": space.fingerprint(),
                **costs.settings(), "score": request.score,
                **(request.source.settings() if request.source is not None else {})}
    if not shared:
        settings["seed"] = request.seed
    context = SearchContext(space, request.trials, request.seed + worker, worker, costs.names, costs.budgets,
                            request.out, request.storage, request.study, settings,
                            None if shared else _local_state(request.out, settings), _feasible(space, costs), generator,
                            _window(space, costs, request.window), costs)
    searcher = entry.obj(context, options)
    try:
        target, notes = _prepare(searcher, context)
        return searcher, costs, target, notes, _Log(request, target, searcher.completed(), show)
    except BaseException:
        searcher.close()
        raise


def _window(space: ArchSpace, costs: SearchCosts, lows: Mapping[str, float] | None) -> dict[str, tuple[float, float]]:
    """Cost name -> (low, budget): the costs near each budget (`SearchRequest.window`); a cost
    whose window would be empty (a budget at the min subnet's cost) has none."""
    cheapest = costs(space.min())
    window = {}
    for name, budget in costs.budgets.items():
        low = lows[name] if lows is not None and name in lows else budget - WINDOW_SHARE * (budget - cheapest[name])
        if low < budget:
            window[name] = (low, budget)
    return window


@contextlib.contextmanager
def _closing(searcher: Searcher, log: _Log, out_dir: Path, costs: SearchCosts, final: bool) -> Iterator[None]:
    """Close the log and the searcher when the loop ends; a loop that fails keeps the files of
    what it evaluated (its scores as told: `final` False for a population score)."""
    try:
        yield
    except BaseException:
        write_stopped(out_dir, searcher.history(), costs.names, costs.budgets, final)
        raise
    finally:
        log.close()
        searcher.close()


def _queue_first(searcher: Searcher, archs: tuple[Arch, ...], costs: SearchCosts) -> None:
    """Queue `archs` (the request's `first`) that meet the budgets and were not evaluated."""
    done = {r["arch_id"] for r in searcher.history()}
    queued = [a for a in archs if arch_id(a) not in done and costs.violation(costs(a, arch_id(a))) is None]
    if queued:
        searcher.enqueue(queued)


def _queue_min(searcher: Searcher, costs: SearchCosts, notes: list[str]) -> bool:
    """Queue the cheapest arch that meets every budget (`SearchCosts.cheapest_feasible`: the min
    subnet, or under a latency budget the latency floor's arch) unless it was evaluated; whether
    it was queued."""
    low = costs.cheapest_feasible()
    if low is None or any(r["arch_id"] == arch_id(low) for r in searcher.history()):
        return False
    searcher.enqueue([low])
    what = "the min subnet" if low == costs.space.canonical(costs.space.min()) else "the cheapest arch by latency"
    notes.append(f"queued {what} {arch_id(low)}: the budget admits few archs")
    return True


def _stop(searcher: Searcher, request: SearchRequest, target: int, rejected: int, duplicates: int,
          notes: list[str]) -> None:
    """End a loop whose proposals keep failing: an error when nothing was evaluated, else a note."""
    why = (f"{request.max_rejections} suggestions in a row were infeasible ({rejected - duplicates}) or already "
           f"evaluated ({duplicates})")
    if searcher.completed() == 0:
        raise SearchError(f"stopped after 0 of {target} evaluations: {why}; relax the budget")
    notes.append(f"stopped after {searcher.completed()} of {target} evaluations: {why}; the budget admits few "
                 "archs: the answer is the best of those evaluated")
    _log.warning(notes[-1])


def _figure(history: list[Record], costs: SearchCosts) -> Any:
    from nas.engine.searching.pareto_report import pareto_figure

    return pareto_figure(history, costs.names, costs.budgets)


def run_search(space: ArchSpace, evaluate: Evaluate, request: SearchRequest, *, rank: Rank | None = None,
               generator: Any = None, latency: LatencyTable | None = None,
               export: Callable[[Arch], Any] | None = None) -> SearchResult:
    """A whole search outside a run: the loop (`search_loop`), then its files, written once
    (`nas.engine.searching.outputs`); a local search's folder is locked for both. With
    `latency` and `export` (`arch -> static module`), the answer is measured on the table's
    device to report the table's error. Returns a `SearchResult`."""
    from nas.core.locks import folder_lock
    from nas.engine.searching.outputs import answer

    check_request(space, request, latency)     # before the lock makes the folder
    with contextlib.nullcontext() if request.shared else folder_lock(request.out, "search"):
        ran = search_loop(space, evaluate, request, rank=rank, generator=generator, latency=latency)
        return answer(request, ran, export)
