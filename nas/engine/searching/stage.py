"""The search stage's entry: `search` (what `nas.search` is).

`search` is the stage in one place: the request is built once (`request.build_request`: every
argument checked, the score resolved), the folder locked for the whole command, the loop run
(`loop.search_loop`, in spawned worker processes first for a shared Optuna study, each given
the same request), then the finalists (`finalists.run_finalists`) and the answer's files,
written once (`outputs.answer`). SIGTERM stops it with one line (exit 143): what is kept, and
that the same command resumes it.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from nas.core.errors import Interrupted, NasError, SearchError
from nas.core.files import check_writable
from nas.core.locks import folder_lock
from nas.core.stopping import sigterm_raises
from nas.core.wording import announce, command
from nas.engine.devices import resolve_device
from nas.engine.latency.stage import latency_table
from nas.engine.run import Run, arch_generator, load_run
from nas.engine.searching.request import SearchRequest, build_request, resolve_budget

if TYPE_CHECKING:     # the search machinery (Optuna included) loads on first use
    from nas.engine.latency.table import LatencyTable
    from nas.engine.searching.results import SearchResult, SearchRun
    from nas.engine.searching.score import SearchScore

# resolve_budget: from `request`, as before
__all__ = ["check_search", "latency_table", "resolve_budget", "search", "search_request"]


def search(run: Run, searcher: str | None = None, *, max_macs: str | float | None = None,
           max_params: str | float | None = None, max_latency_ms: float | None = None,
           device: str | torch.device | None = None,
           batch: int = 1, trials: int | None = None, seed: int | None = None, storage: str | None = None,
           study: str | None = None, out: str | Path | None = None, options: Mapping[str, Any] | None = None,
           worker: int = 0, workers: int = 1, progress: bool = True, score: str | None = None,
           finalists: int | None = None, finalist_steps: int | None = None, latency_table: str | None = None,
           predict_missing: bool = False, ships: str | None = None) -> SearchResult:
    """Search the run's supernet for the most accurate subnet within the budgets (`nas search`).

    `searcher`, the budgets, `trials`, `seed`, `score` and `finalists` left None are the run
    config's `search:` section's (`nas.core.search_config`; a budget given replaces all of its
    budgets), else `evolution`, no budget, 50, 0, `auto` and 0. Budgets that ask a family (a
    list, or the section's `members`) are `search_family`'s.

    `max_macs`/`max_params` are amounts (`4M`, `150K`) or `P%` of the way from the min subnet's
    cost to the max subnet's (`0%`: the min subnet's cost). `workers > 1` starts that many local
    processes (one thread each) on one Optuna storage (a journal file in the search directory
    unless `storage` is given), then collects the shared study's result.
    `score` names what ranks the candidates: an estimator or fusion spec (`supernet`: BN
    recalibration + validation top-1, never the test split; `macs`, `naswot`, ...), or `auto`:
    the estimator with the best within-bin Kendall tau in the run's latest fidelity summary of
    its space (without one, the space's default chosen on held-out committed ground truth:
    `nas.engine.searching.score.DEFAULT_SCORES`), announced in one line on stderr; but when the
    export ships the inherited weights (`ships`, default from the run's `export.finetune`:
    `inherited` when it does not fine-tune), `auto` is `supernet`, whose measurement of an arch
    is exactly what that export ships.
    When the score is `supernet`, the supernet's anchors (the archs its strategy trains at every
    step: the sandwich rule's min and max) that meet the budgets are evaluated first, as the
    best-trained archs it holds (an inherited export must never ship below them); with any other
    score every arch competes alike. When the answer costs what the min subnet costs one line on
    stderr says so, with the runner-up.
    `finalists=K`: the K best archs by the score are then fine-tuned alone from the shared
    weights (`finalist_steps` steps each, default 100) and measured on validation; the best of
    them is the answer (`nas.engine.searching.finalists`), measured in `workers` processes (also
    with a searcher that searches in one process).
    A latency budget uses the run's lookup table for `device` (None: the run's device) and
    `batch` (built first if missing) and the answer is measured to report the table's error;
    or `latency_table`: a table file (measured, or fitted by `nas latency-fit`) or `CSV[:COLUMN]`
    of measured per-arch ms (`nas.engine.latency.sources`; an arch it lacks is an error
    unless `predict_missing`), whose device is not timed here.
    Every argument is checked before any work; the search folder records the run's checkpoint
    and step, and a folder searched on other weights (the run trained further) is refused.
    """
    settings = run.config.search.settings(run.config.source, searcher=searcher, max_macs=max_macs,
                                          max_params=max_params, max_latency_ms=max_latency_ms, trials=trials,
                                          seed=seed, score=score, finalists=finalists)
    given = {key: value for key, value in settings.values.items() if key != "members"}
    with settings.blamed():
        settings.check_one_budget()
        request = build_request(run, **given, device=device, batch=batch, storage=storage, study=study, out=out,
                                options=options, worker=worker, workers=workers, progress=progress,
                                finalist_steps=finalist_steps, latency_table=latency_table,
                                predict_missing=predict_missing, ships=ships)
        with sigterm_raises(_stopped(request.out)):
            return search_request(run, request)


def _stopped(out: Path) -> str:
    """What a SIGTERM during a one-budget search says after `SIGTERM: ` (a family's says its members)."""
    return (f"the search stopped; every arch evaluated is kept in {out}; run the same nas search again to resume "
            "it")


def check_search(run: Run, request: SearchRequest) -> tuple[SearchScore, LatencyTable | None]:
    """Check what `request` can check before any folder is made (the score's needs, the budgets
    against the cheapest subnet); returns its score and its latency source (a table built first
    if missing)."""
    from nas.engine.searching.loop import check_request
    from nas.engine.searching.score import search_score

    scorer = search_score(request.score, run)
    scorer.estimator.check(scorer.context)      # e.g. calibrated without a fitted model: before any folder
    table = _request_table(run, request)
    check_request(run.space, request, table)      # before the lock makes the folder
    return scorer, table


def search_request(run: Run, request: SearchRequest,
                   evaluate_with: Callable[[Callable[[Any], Any]], Callable[[Any], Any]] | None = None
                   ) -> SearchResult:
    """The search of a built request (`search` after `build_request`). `evaluate_with` wraps the
    score's `evaluate` of this process (a family's shared evaluations; None: as it is)."""
    from nas.engine.searching.loop import search_loop
    from nas.engine.searching.outputs import answer

    scorer, table = check_search(run, request)
    evaluate = scorer.metrics if evaluate_with is None else evaluate_with(scorer.metrics)
    notes = []
    if request.workers > 1 and not request.shared:
        notes.append(f"workers: {request.workers} given; {request.searcher} searches in one process; the finalists "
                     f"use {request.workers} workers")
    # one command at a time in a local search folder, finalists and files included; the processes
    # of a shared study search together (their storage coordinates them), then one at a time
    # measures the finalists
    with contextlib.nullcontext() if request.shared else folder_lock(request.out, "search"):
        made = _run_workers(request) if request.search_workers > 1 else 0
        ran = search_loop(run.space, evaluate, request, rank=scorer.rank, generator=arch_generator(run),
                          latency=table)
        ran = _with_new(ran, made)
        with folder_lock(request.out, "search") if request.shared and request.finalists else contextlib.nullcontext():
            stage = _finalists(run, request, ran) if request.finalists else None
            result = answer(request, ran, run.export_model if table is not None else None, stage, notes)
    _say_if_min(run, result)
    return result


def _with_new(ran: SearchRun, made: int) -> SearchRun:
    """`ran` counting the evaluations its spawned workers made."""
    import dataclasses

    return dataclasses.replace(ran, new=ran.new + made) if made else ran


def _finalists(run: Run, request: SearchRequest, ran: SearchRun) -> Any:
    from nas.engine.searching.finalists import Finetune, run_finalists

    settings = Finetune(request.finalist_steps, request.finalist_lr, request.seed)
    return run_finalists(run, ran.history, request.finalists, request.out, settings=settings,
                         workers=request.workers, progress=request.progress, source=request.source)


def _say_if_min(run: Run, result: SearchResult) -> None:
    """One line on stderr when the answer costs what the min subnet costs (the min subnet
    itself, or an arch as cheap: a cell of skips and `none`s), naming the runner-up."""
    from nas.core.amounts import format_amount
    from nas.core.arch import arch_id
    from nas.core.pareto import objective

    low = run.space.min()
    if (result.macs, result.params) != tuple(run.space.costs(low)):
        return
    if result.finalists is not None:
        ranked = sorted(result.finalists["finalists"], key=lambda r: (-r["finalist_top1"], r["rank"]))
        value, how = (lambda r: f"{r['finalist_top1']:.4f}"), "finalist val top-1"
    else:
        ranked = sorted(result.trials, key=lambda r: (-objective(r), r["macs"], r["trial"]))
        value, how = (lambda r: f"{objective(r):.6g}"), f"{result.score} score"
    others = [r for r in ranked if r["arch_id"] != result.arch_id]
    what = (f"the min subnet {result.arch_id}" if result.arch_id == arch_id(low) else
            f"{result.arch_id}, which costs what the min subnet {arch_id(low)} costs")
    line = f"the answer is {what} ({how} {value(ranked[0])}, MACs {format_amount(result.macs)})"
    if others:
        second = others[0]
        line += f"; runner-up {second['arch_id']}: {how} {value(second)}, MACs {format_amount(second['macs'])}"
    else:
        line += "; no runner-up (only one arch was measured)"
    print(line, file=sys.stderr)


def _request_table(run: Run, request: SearchRequest) -> Any:
    """The latency source of a search: the table the request names, else with a latency budget
    the run's table for the device (measured first if missing), else None."""
    if request.latency_table is not None:
        from nas.engine.latency.sources import load_latency_source
        return load_latency_source(request.latency_table, run.space, request.batch, request.predict_missing)
    if request.constraints.max_latency_ms is None:
        return None
    return _search_table(run, request)


def _search_table(run: Run, request: SearchRequest) -> LatencyTable:
    """The run's latency table for the request's device and batch, measured first if missing."""
    from nas.engine.latency.table import LatencyTable, table_filename

    device = resolve_device(request.device)
    path = run.dir.root / "latency" / table_filename(device, request.batch)
    if not path.is_file():
        announce(f"building the latency table {path} first "
                 f"({command('latency-table', run.dir.name, device=device, batch=request.batch)})")
        latency_table(run, device, request.batch, progress=request.progress)
    return LatencyTable.load(path)


def _run_workers(request: SearchRequest) -> int:
    """Run `request.workers` shares of one Optuna study in spawned processes of one thread each
    (each loads the run from the request's source) and wait for them all; returns the
    evaluations they made."""
    from nas.core.processes import stopped_on_interrupt, worker_pool

    request.out.mkdir(parents=True, exist_ok=True)
    errors, made = [], 0
    # on SIGTERM (`search`) the workers stop at once: what they evaluated is kept, a rerun resumes
    with worker_pool(request.workers) as pool, stopped_on_interrupt(pool):
        futures = [pool.submit(search_worker, request, k) for k in range(request.workers)]
        for k, future in enumerate(futures):
            try:
                made += future.result()
            except Interrupted:
                raise
            except Exception as e:     # a worker's error, raised again here with its index
                errors.append(f"worker {k}: {_first_line(e)}")
    if errors:
        raise SearchError("workers: " + "; ".join(errors))
    return made


def _first_line(error: Exception) -> str:
    """A worker's error in one line; a `NasError` before the front end words it (`workers: worker 1: out: ...`)."""
    if isinstance(error, NasError):
        return error.lines()[0].split("\n")[0]
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def search_worker(request: SearchRequest, worker: int) -> int:
    """One worker of a shared search (in its own process): loads the run of `request.source`,
    runs share `worker` of the study; returns the evaluations it made."""
    from nas.engine.searching.loop import search_loop
    from nas.engine.searching.score import search_score
    from nas.engine.searching.shared_evaluations import SharedEvaluations

    source = request.source
    run = load_run(source.run, checkpoint=source.checkpoint, device=request.device)
    if run.step != source.step:
        raise SearchError(f"{source.run}: the checkpoint {source.checkpoint} holds step {run.step}, the search "
                          f"started on step {source.step} (the run is being trained further); search again once "
                          "it stopped")
    check_writable(request.out, "out")
    scorer = search_score(request.score, run)
    table = _request_table(run, request)
    shared = SharedEvaluations(request.reused)      # a family's earlier evaluations: told again, not evaluated
    ran = search_loop(run.space, shared.wrap(scorer.metrics), request, rank=scorer.rank,
                      generator=arch_generator(run), latency=table, worker=worker, show=False)
    return ran.new - shared.reused
