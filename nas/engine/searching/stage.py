"""The search stage's entries: `search` (what `nas.search` is), `latency_table` and the budgets
they read (amounts or percentages), with the spawned workers of a shared Optuna study.
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import torch

from nas.core.errors import ConfigError, SearchError, check_int
from nas.core.files import check_writable
from nas.core.registry import SEARCHERS, SUPERNET_SCORE
from nas.engine.devices import resolve_device
from nas.engine.run import Run, arch_generator, build_supernet, load_run
from nas.engine.run_dir import check_name

if TYPE_CHECKING:     # the search machinery (Optuna included) loads on first use
    from nas.engine.searching.costs import Constraints
    from nas.engine.searching.latency import LatencyTable
    from nas.engine.searching.results import SearchResult
    from nas.engine.searching.runner import SharedStudy
    from nas.engine.searching.score import SearchScore


SCORE_PART_MAX = 64     # characters of a score spec in a folder name; a longer one is cut and hashed


def _search_id(searcher: str, constraints: Any, seed: int, study: str | None, score: str = SUPERNET_SCORE) -> str:
    """Default search directory name: the study, or searcher + budgets + score (unless
    `supernet`; its canonical spelling, cut and hashed when long) + seed (so re-running the same
    command continues the same search, and searches ranked by different scores never resume
    each other)."""
    if study is not None:
        return study
    from nas.core.costs import BY_NAME

    parts = [searcher, *(BY_NAME[cost].folder_part(budget) for cost, budget in constraints.budgets().items())]
    if score != SUPERNET_SCORE:
        parts.append("score-" + _score_part(score))
    return "-".join(parts + [f"s{seed}"])


def _score_part(score: str) -> str:
    """A score spec as one folder-name part: its characters outside `[A-Za-z0-9._+]` as `_`, and
    past `SCORE_PART_MAX` characters its head and a hash of the whole spec (a name stays within
    the filesystem's 255 bytes, and distinct long specs stay distinct)."""
    part = re.sub(r"[^A-Za-z0-9._+]", "_", score)
    if len(part) <= SCORE_PART_MAX:
        return part
    digest = hashlib.sha256(score.encode()).hexdigest()[:12]
    return f"{part[:SCORE_PART_MAX - len(digest) - 1]}-{digest}"


def resolve_budget(value: str | float | None, low: float, high: float, flag: str) -> float | None:
    """A budget as an amount (`4M`, `150K`, `3`) or as `P%` of the way from the min to the max subnet;
    always finite (`1e400` is an error naming `flag`, never "no budget")."""
    from nas.core.amounts import parse_amount

    if value is None:
        return None
    if not isinstance(value, str):
        return parse_amount(value, flag)     # a number from the Python API: finite, checked there
    text = value.strip()
    if text.endswith("%"):
        try:
            fraction = float(text[:-1]) / 100
        except ValueError:
            fraction = -1.0
        if not 0 <= fraction <= 1:
            raise ConfigError(f"{flag}: {text!r}: a percentage must be between 0% (min subnet) and 100% (max subnet)")
        return low + fraction * (high - low)
    return parse_amount(text, flag)


def latency_table(run: Run, device: str | torch.device | None = None, batch: int = 1, threads: int | None = None,
                  progress: bool = True) -> Path:
    """Measure every distinct layer configuration of the run's space on `device` (None: the
    run's device) (`nas latency-table`)."""
    from nas.engine.searching.latency import write_latency_table

    device = resolve_device(device) if device is not None else run.device
    check_int("batch", batch, 1)
    if threads is not None:
        check_int("threads", threads, 1)
    check_writable(run.dir.root / "latency", "RUN")      # before minutes of measuring
    supernet = build_supernet(run.config)     # latency depends on the architecture, not the weights
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(desc=f"latency {device} b{batch}", unit="layer", file=sys.stderr)

    def report(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        path, _ = write_latency_table(supernet, run.dir.root / "latency", device, batch, threads=threads,
                                      seed=run.config.train.seed, progress=report)
    finally:
        if bar is not None:
            bar.close()
    return path


def search(run: Run, searcher: str = "evolution", *, max_macs: str | float | None = None,
           max_params: str | float | None = None, max_latency_ms: float | None = None,
           device: str | torch.device | None = None,
           batch: int = 1, trials: int = 50, seed: int = 0, storage: str | None = None, study: str | None = None,
           out: str | Path | None = None, options: Mapping[str, Any] | None = None, worker: int = 0,
           workers: int = 1, progress: bool = True, score: str = "auto", finalists: int = 0,
           finalist_steps: int | None = None, latency_table: str | None = None,
           predict_missing: bool = False) -> SearchResult:
    """Search the run's supernet for the most accurate subnet within the budgets (`nas search`).

    `max_macs`/`max_params` are amounts (`4M`, `150K`) or `P%` of the way from the min subnet's
    cost to the max subnet's. `workers > 1` starts that many local processes (one thread each)
    on one Optuna storage (a journal file in the search directory unless `storage` is given),
    then collects the shared study's result.
    `score` names what ranks the candidates: an estimator or fusion spec (`supernet`: BN
    recalibration + validation top-1, never the test split; `macs`, `naswot`, ...), or `auto`:
    the estimator with the best within-bin Kendall tau in the run's latest fidelity summary of
    its space (without one, the space's default chosen on held-out committed ground truth:
    `nas.engine.searching.score.DEFAULT_SCORES`), announced in one line on stderr.
    Every arch competes alike: the min and max subnets are evaluated only when the searcher
    proposes them, and when the answer is the min subnet one line on stderr says so, with the
    runner-up.
    `finalists=K`: the K best archs by the score are then fine-tuned alone from the shared
    weights (`finalist_steps` steps each, default `nas.engine.searching.finalists.Finetune.steps`) and
    measured on validation; the best of them is the answer (`nas.engine.searching.finalists`), measured
    in `workers` processes (also with a searcher that searches in one process).
    A latency budget uses the run's lookup table for `device` (None: the run's device) and
    `batch` (built first if missing) and the winner is measured to report the table's error;
    or `latency_table`: a table file (measured, or fitted by `nas latency-fit`) or `CSV[:COLUMN]`
    of measured per-arch ms (`nas.engine.searching.latency_archs`; an arch it lacks is an error
    unless `predict_missing`), whose device is not timed here.
    """
    check_int("finalists", finalists, 0)
    check_int("workers", workers, 1)
    # a searcher that keeps its state in one process searches alone; the finalists still use the workers
    local = finalists > 0 and workers > 1 and not getattr(SEARCHERS.get(searcher).obj, "shared", False)
    result, reason = _search(run, searcher, max_macs=max_macs, max_params=max_params, max_latency_ms=max_latency_ms,
                             device=device, batch=batch, trials=trials, seed=seed, storage=storage, study=study,
                             out=out, options=options, worker=worker, workers=1 if local else workers,
                             progress=progress, score=score, latency_table=latency_table,
                             predict_missing=predict_missing)
    if local:
        result.notes.append(f"workers: {workers} given; {searcher} searches in one process; the finalists use "
                            f"{workers} workers")
    if finalists:
        from nas.engine.searching.finalists import Finetune, run_finalists

        settings = Finetune(seed=seed) if finalist_steps is None else Finetune(finalist_steps, seed=seed)
        check_int("finalist_steps", settings.steps, 1)
        stage = run_finalists(run, result.trials, finalists, result.dir, settings=settings, workers=workers,
                              progress=progress, where=(str(run.dir.root.resolve()), run.checkpoint.name))
        result = _finalists_answer(result, stage)
    _record_choice(result, reason)
    _say_if_min(run, result)
    return result


def _search(run: Run, searcher: str, *, max_macs: str | float | None = None, max_params: str | float | None = None,
            max_latency_ms: float | None = None, device: str | torch.device | None = None, batch: int = 1,
            trials: int = 50, seed: int = 0, storage: str | None = None, study: str | None = None,
            out: str | Path | None = None, options: Mapping[str, Any] | None = None, worker: int = 0,
            workers: int = 1, progress: bool = True, score: str = "auto", latency_table: str | None = None,
            predict_missing: bool = False) -> tuple[SearchResult, str | None]:
    """The search itself (what every worker runs); also the line saying why `auto` chose its score."""
    from nas.engine.searching.costs import Constraints
    from nas.engine.searching.runner import SharedStudy
    from nas.engine.searching.score import choose_score, search_score

    device = _check_search_arguments(run, device, batch, workers)
    if predict_missing and latency_table is None:
        raise ConfigError("predict_missing: applies to a CSV latency table; give --latency-table CSV[:COLUMN]")
    chosen = choose_score(score, run.dir.root, run.space)
    scorer = search_score(chosen.name, run)       # an unknown name fails here, with a did-you-mean
    low, high = run.space.costs(run.space.min()), run.space.costs(run.space.max())
    constraints = Constraints(resolve_budget(max_macs, low[0], high[0], "max_macs"),
                              resolve_budget(max_params, low[1], high[1], "max_params"), max_latency_ms)
    if out is None and study is not None:
        check_name(study, "study")      # the search folder's name
    out_dir = Path(out) if out is not None else run.dir.search(
        _search_id(searcher, constraints, seed, study, scorer.name))
    check_writable(out_dir, "out" if out is not None else "RUN")
    task = SearchTask(searcher, options, trials, seed, scorer.name, constraints, str(device), batch, out_dir,
                      latency_table, predict_missing)
    table = _task_table(run, task, progress)
    if workers > 1:
        storage, study = _run_workers(run, workers, task, storage, study)
    return (_run_share(run, task, scorer, table, SharedStudy(storage, study, worker), progress, chosen.reason),
            chosen.reason)


@dataclass(frozen=True)
class SearchTask:
    """One search's settings, resolved once (the score by name, budgets as counts): what the
    collecting search and each of its worker processes run with."""

    searcher: str
    options: Mapping[str, Any] | None
    trials: int
    seed: int
    score: str
    constraints: Constraints
    device: str
    batch: int
    out: Path
    latency_table: str | None = None
    predict_missing: bool = False


def _run_share(run: Run, task: SearchTask, scorer: SearchScore, table: LatencyTable | None, study: SharedStudy,
               progress: bool, announce: str | None = None) -> SearchResult:
    """Run the search (`study.worker`'s share of it in a shared study) and return its result."""
    from nas.engine.searching.runner import SearchOutput, SearchPlan, run_search

    plan = SearchPlan(task.searcher, task.options, task.trials, task.seed, generator=arch_generator(run),
                      score=task.score, rank=scorer.rank)
    output = SearchOutput(task.out, progress, announce=announce)
    return run_search(run.space, scorer.metrics, plan, output, constraints=task.constraints,
                      latency=table, export=run.export_model if table is not None else None, study=study)


def _finalists_answer(result: SearchResult, stage: Any) -> SearchResult:
    """`result` with the finalists' winner as its answer (best.yaml rewritten) and the stage recorded."""
    import dataclasses

    from nas.core.arch import write_arch_file
    from nas.core.costs import LATENCY

    record = next(r for r in result.trials if r["arch_id"] == stage.winner["arch_id"])
    changed = record["arch_id"] != result.arch_id
    write_arch_file(record["arch"], result.dir / "best.yaml")
    return dataclasses.replace(
        result, best=record["arch"], arch_id=record["arch_id"], val_top1=record.get("val_top1"),
        macs=record["macs"], params=record["params"], latency_ms=record.get(LATENCY.name), record=record,
        latency_check=None if changed else result.latency_check, score_value=record["score_value"],
        finalists=stage.to_json())


def _record_choice(result: SearchResult, reason: str | None) -> None:
    """summary.json of the search with its final answer, why `auto` chose its score and the finalists."""
    import json

    from nas.core.files import write_json

    path = result.dir / "summary.json"
    summary = {key: value for key, value in json.loads(path.read_text()).items()
               if key not in ("val_top1", "latency_ms", "latency_check", "finalists")}    # the search's best's
    write_json(path, {**summary, **result.to_json(), "record": result.record, "score_reason": reason})


def _say_if_min(run: Run, result: SearchResult) -> None:
    """One line on stderr when the answer is the min subnet, naming the runner-up."""
    from nas.core.amounts import format_amount
    from nas.core.arch import arch_id

    if result.arch_id != arch_id(run.space.min()):
        return
    if result.finalists is not None:
        ranked = sorted(result.finalists["finalists"], key=lambda r: (-r["finalist_top1"], r["rank"]))
        value, how = (lambda r: f"{r['finalist_top1']:.4f}"), "finalist val top-1"
    else:
        ranked = sorted(result.trials, key=lambda r: (-r["score_value"], r["macs"], r["trial"]))
        value, how = (lambda r: f"{r['score_value']:.6g}"), f"{result.score} score"
    others = [r for r in ranked if r["arch_id"] != result.arch_id]
    line = f"the answer is the min subnet {result.arch_id} ({how} {value(ranked[0])}, MACs {format_amount(result.macs)})"
    if others:
        second = others[0]
        line += f"; runner-up {second['arch_id']}: {how} {value(second)}, MACs {format_amount(second['macs'])}"
    else:
        line += "; no runner-up (only one arch was measured)"
    print(line, file=sys.stderr)


def _check_search_arguments(run: Run, device: str | torch.device | None, batch: int, workers: int) -> torch.device:
    """The device to search on (None: the run's device), after checking the process-level flags."""
    check_int("workers", workers, 1)
    check_int("batch", batch, 1)
    return resolve_device(device) if device is not None else run.device


def _task_table(run: Run, task: SearchTask, progress: bool) -> Any:
    """The latency source of a search: `task.latency_table` when named, else with a latency
    budget the run's table for the device (measured first if missing), else None."""
    if task.latency_table is not None:
        from nas.engine.searching.latency_archs import load_latency_source
        return load_latency_source(task.latency_table, run.space, task.batch, task.predict_missing)
    if task.constraints.max_latency_ms is None:
        return None
    return _search_table(run, resolve_device(task.device), task.batch, progress)


def _search_table(run: Run, device: torch.device, batch: int, progress: bool) -> LatencyTable:
    """The run's latency table for `device`/`batch`, measured first if missing."""
    from nas.engine.searching.latency import LatencyTable, table_filename

    path = run.dir.root / "latency" / table_filename(device, batch)
    if not path.is_file():
        print(f"building the latency table {path} first (nas latency-table {run.dir.name} --device {device} "
              f"--batch {batch})", file=sys.stderr)
        latency_table(run, device, batch, progress=progress)
    return LatencyTable.load(path)


def _run_workers(run: Run, workers: int, task: SearchTask, storage: str | None,
                 study: str | None) -> tuple[str, str]:
    """Run `workers` searches of one Optuna study in spawned processes of one thread each (each
    loads the run from its folder) and wait for them all; returns the study's storage and name."""
    from nas.core.processes import worker_pool
    from nas.engine.searching.runner import SharedStudy

    if not getattr(SEARCHERS.get(task.searcher).obj, "shared", False):
        raise ConfigError(f"workers: searcher '{task.searcher}' keeps its state in one process; use optuna-tpe or "
                          f"optuna-nsga2 to share a study between workers")
    task.out.mkdir(parents=True, exist_ok=True)
    storage = storage if storage is not None else f"journal:///{(task.out / 'optuna.journal').resolve()}"
    study = study if study is not None else task.out.name
    where = (str(run.dir.root.resolve()), run.checkpoint.name)
    errors = []
    with worker_pool(workers) as pool:
        futures = [pool.submit(search_worker, where, task, SharedStudy(storage, study, k)) for k in range(workers)]
        for k, future in enumerate(futures):
            try:
                future.result()
            except Exception as e:     # a worker's error, raised again here with its index
                errors.append(f"worker {k}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if errors:
        raise SearchError("workers: " + "; ".join(errors))
    return storage, study


def search_worker(where: tuple[str, str], task: SearchTask, study: SharedStudy) -> int:
    """One worker of a shared search (in its own process): loads the run from its folder and
    checkpoint (`where`), runs its share of `study`; returns the evaluations it made."""
    from nas.engine.searching.score import search_score

    run = load_run(where[0], checkpoint=where[1], device=task.device)
    check_writable(task.out, "out")
    table = _task_table(run, task, False)
    return _run_share(run, task, search_score(task.score, run), table, study, progress=False).new
