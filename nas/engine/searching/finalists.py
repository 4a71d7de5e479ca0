"""Finalists (`nas search --finalists K`): the K best candidates by the search's score, measured
again by a short fine-tune of each alone, and the best of them by that measure is the answer.

The measure: the finalist's subnet is exported with the supernet's shared weights (a copy: the
run is never changed), trained alone for `steps` optimiser steps (the run's optimiser with
`lr`, cosine-decayed to 0, the run's gradient clipping, label-smoothed cross-entropy), then its
BN statistics are recalibrated as the evaluator does and validation top-1 is measured (never
the test split). Under `train.accelerate: auto` the fine-tune runs bf16 autocast where
`nas.engine.precision` says it is faster (a batch-normed CNN with dense convolutions, on a CPU
with bf16 instructions; `train.precision: bf16` asks for it anywhere), and each record says
which (`finalist_precision`). Every finalist sees the same seeded batches, so the measure
compares archs, not batch orders, and is a pure function of (run, arch, settings) on one machine:
the answer does not depend on which worker measured what, nor on a kill and a resume.

Files in the search folder: `finalists.jsonl` (one record per measured finalist, appended and
fsynced as each finishes, with the checkpoint and step of the weights it was measured on; a
resumed stage measures only the finalists not found there with the same settings) and
`finalists.json` (every finalist with both measures, the winner and the score's own best).
Every record read back is checked field by field (a record edited by hand, cut short or of
other weights, the run trained further, is refused in one line naming it).
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from nas.core.arch import Arch
from nas.core.errors import SearchError, check_int, clip
from nas.core.files import write_json
from nas.core.rng import derive_seed
from nas.engine.bn import recalibrate_bn
from nas.core.preprocessing import resize
from nas.engine.evaluator import accuracy
from nas.engine.precision import bf16_autocast, trains_in_bf16
from nas.core.jsonl import append_record, read_records
from nas.engine.searching.request import FINETUNE_LR, FINETUNE_STEPS, Source
from nas.engine.training.trainer import build_optimizer, clip_gradients
from searchers.base import rank_key

RECORDS, SUMMARY = "finalists.jsonl", "finalists.json"
LABEL_SMOOTHING = 0.1
Record = dict[str, Any]


@dataclass(frozen=True)
class Finetune:
    """The finalists' measure: `steps` optimiser steps of the arch alone from the shared weights,
    peak learning rate `lr` (cosine to 0), batches seeded by `seed`; then validation top-1."""

    steps: int = FINETUNE_STEPS
    lr: float = FINETUNE_LR
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": "finetune", "steps": self.steps, "lr": self.lr, "seed": self.seed}

    def describe(self) -> str:
        return f"fine-tuned alone {self.steps} steps from the shared weights, then validation top-1"


Measure = Callable[[Any, Arch, Finetune], Mapping[str, float]]


def finetune_top1(run: Any, arch: Arch, settings: Finetune) -> dict[str, float | str]:
    """`{"finalist_top1", "finalist_top5", "finalist_precision"}` of `arch` after `settings.steps`
    steps of training alone from the run's shared weights (a copy), BN recalibration and
    validation (see the module docstring). `run` is a `nas.engine.run.Run`."""
    cfg = run.config.train
    size = run.space.input_size(arch)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = run.export_model(arch)
    bf16 = trains_in_bf16(model, cfg)
    model = model.to(memory_format=memory_format).train()
    optimizer = build_optimizer(model, replace(cfg, optimizer=replace(cfg.optimizer, lr=settings.lr)))
    seed = derive_seed(settings.seed, "finalists")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for step, (images, labels) in enumerate(_train_batches(run.data, cfg.batch_size, seed, settings.steps)):
            for group in optimizer.param_groups:
                group["lr"] = settings.lr * 0.5 * (1 + math.cos(math.pi * step / settings.steps))
            optimizer.zero_grad(set_to_none=True)
            with bf16_autocast(bf16, images.device.type):
                logits = model(resize(images, size, run.space.interpolation).contiguous(memory_format=memory_format))
            loss = F.cross_entropy(logits.float(), labels, label_smoothing=LABEL_SMOOTHING)
            if not torch.isfinite(loss):
                raise SearchError(f"finalists: non-finite loss fine-tuning a finalist at step {step}")
            loss.backward()
            clip_gradients(model, cfg.grad_clip)
            optimizer.step()
    evaluator = run.evaluator
    with torch.no_grad():
        recalibrate_bn(model, [resize(x, size, run.space.interpolation) for x in evaluator.calibration_inputs()])
    model.eval()
    result = accuracy(model, ((resize(x, size, run.space.interpolation), y) for x, y in evaluator.batches("val")))
    return {"finalist_top1": result.top1, "finalist_top5": result.top5,
            "finalist_precision": "bf16" if bf16 else "fp32"}


def _train_batches(data: Any, batch_size: int, seed: int, steps: int):
    """`steps` training batches in the seeded order of epochs 0, 1, ..."""
    done, epoch = 0, 0
    while done < steps:
        for batch in data.train_batches(batch_size, seed, epoch):
            yield batch
            done += 1
            if done == steps:
                return
        epoch += 1


def pick_finalists(records: Sequence[Record], k: int) -> list[Record]:
    """The `k` best records by `score_value` (ties as the search's best: fewer MACs, then the
    earlier trial), one per arch."""
    seen: dict[str, Record] = {}
    for record in sorted(records, key=rank_key):
        seen.setdefault(record["arch_id"], record)
    return list(seen.values())[:k]


@dataclass(frozen=True)
class FinalistsResult:
    """The finalists stage: each finalist's search record with its rank by the score (`rank`,
    1 = the score's best) and the measure's `finalist_top1`; `winner` and `search_best` are
    records of it; `new` the finalists measured by this call."""

    finalists: list[Record]
    winner: Record
    search_best: Record
    measure: dict[str, Any]
    new: int

    def to_json(self) -> dict[str, Any]:
        return {"measure": self.measure, "winner": self.winner["arch_id"],
                "search_best": self.search_best["arch_id"], "changed": self.winner is not self.search_best,
                "finalists": self.finalists}


def run_finalists(run: Any, records: Sequence[Record], k: int, out_dir: Path, *, settings: Finetune = Finetune(),
                  workers: int = 1, progress: bool = True, measure: Measure | None = None,
                  source: Source | None = None) -> FinalistsResult:
    """Measure the `k` best of a search's `records` with `measure` (None: `finetune_top1`) and
    choose the best of them (ties: the better rank by the score).

    `workers > 1` measures them in that many spawned processes of one thread each, each loading
    the run of `source` (its folder, checkpoint and step) and measuring with `finetune_top1`
    (without `source`, or with a `measure` given, they are measured here, one after the other).
    Finished finalists are read back from `out_dir/finalists.jsonl` and not measured again;
    each record names the checkpoint and step of `source`, and one measured on other weights
    is refused.
    """
    check_int("finalists", k, 1)
    check_int("workers", workers, 1)
    finalists = [{**{key: value for key, value in r.items() if key != "eval_seconds"}, "rank": rank}
                 for rank, r in enumerate(pick_finalists(records, k), 1)]
    if not finalists:
        raise SearchError("finalists: the search evaluated no arch")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RECORDS
    path.touch()      # the stage has begun: `nas summary` tells a summary.json older than this unfinished
    wanted = {r["arch_id"]: r for r in finalists}
    done: dict[str, Record] = {}
    weights = source.settings() if source is not None else {}
    for number, stored in enumerate(read_records(path, SearchError), 1):
        problem = _record_problem(stored, weights)
        if problem is not None:
            raise SearchError(f"{path}:{number}: {problem}; repair or remove the line (or the file, to measure "
                              "the finalists again)")
        if stored["measure"] == settings.to_dict() and stored["arch_id"] in wanted:
            done.setdefault(stored["arch_id"], stored)
    todo = [r for r in finalists if r["arch_id"] not in done]
    from tqdm.auto import tqdm
    bar = tqdm(total=len(finalists), initial=len(finalists) - len(todo), desc="finalists", unit="arch",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)
    try:
        for record in _measured(run, todo, settings, workers, measure, source):
            append_record(path, {**record, **weights})
            done[record["arch_id"]] = record
            bar.update(1)
    finally:
        bar.close()
    measured = [{**r, **_measures(done[r["arch_id"]])} for r in finalists]
    winner = max(measured, key=lambda r: (r["finalist_top1"], -r["rank"]))
    result = FinalistsResult(measured, winner, measured[0], settings.to_dict(), len(todo))
    write_json(out_dir / SUMMARY, result.to_json())
    return result


def _record_problem(record: Any, weights: Mapping[str, Any]) -> str | None:
    """Why a finalists.jsonl line cannot be trusted, or None: a field missing, of another type
    or out of range, or measured on other weights than `weights` (checkpoint and step)."""
    from nas.core.arch import arch_id

    if not isinstance(record, dict):
        return f"not a finalist record (a JSON {type(record).__name__})"
    checks = {"arch_id": (isinstance(record.get("arch_id"), str), "a string"),
              "arch": (isinstance(record.get("arch"), dict), "an arch mapping"),
              "measure": (isinstance(record.get("measure"), dict), "the measure's settings"),
              "score_value": (_real(record.get("score_value")), "a finite number"),
              "finalist_top1": (_fraction(record.get("finalist_top1")), "a fraction in [0, 1]")}
    if "finalist_top5" in record:
        checks["finalist_top5"] = (_fraction(record["finalist_top5"]), "a fraction in [0, 1]")
    for key, (ok, want) in checks.items():
        if key not in record:
            return f"no '{key}'"
        if not ok:
            return f"'{key}' must be {want}, got {json_text(record[key])}"
    if arch_id(record["arch"]) != record["arch_id"]:
        return f"'arch' is another arch ({arch_id(record['arch'])}) than its 'arch_id' {record['arch_id']}"
    theirs = {key: record.get(key) for key in weights}
    if theirs != dict(weights):
        shown = ", ".join(f"{key} {clip(value, 40)}" for key, value in theirs.items())
        mine = ", ".join(f"{key} {value}" for key, value in weights.items())
        return (f"measured on other weights ({shown}; this search's: {mine}): the run was trained further, or "
                "another checkpoint is searched")
    return None


def json_text(value: Any) -> str:
    """A JSON value, short, for a one-line message."""
    import json

    return clip(json.dumps(value, default=repr), 40)


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fraction(value: Any) -> bool:
    return _real(value) and 0 <= value <= 1


def _measures(stored: Record) -> Record:
    return {key: stored[key] for key in ("finalist_top1", "finalist_top5", "finalist_precision", "finalist_seconds",
                                         "measure") if key in stored}


def _one(run: Any, record: Record, settings: Finetune, measure: Measure) -> Record:
    start = time.perf_counter()
    values = measure(run, record["arch"], settings)
    top1 = values.get("finalist_top1")
    if isinstance(top1, bool) or not isinstance(top1, (int, float)) or not 0 <= top1 <= 1:
        raise SearchError(f"finalists: the measure returned finalist_top1={top1!r} for {record['arch_id']}; "
                          "expected a fraction in [0, 1]")
    return {"arch_id": record["arch_id"], "arch": record["arch"], "rank": record["rank"],
            "score": record.get("score"), "score_value": record["score_value"],
            **{key: v if isinstance(v, str) else float(v) for key, v in values.items()}, "measure": settings.to_dict(),
            "finalist_seconds": round(time.perf_counter() - start, 3)}


def _measured(run: Any, todo: list[Record], settings: Finetune, workers: int, measure: Measure | None,
              source: Source | None):
    """The records of `todo` measured, as each finishes (in spawned workers when asked)."""
    if workers == 1 or len(todo) <= 1 or source is None or measure is not None:
        for record in todo:
            yield _one(run, record, settings, measure or finetune_top1)
        return
    from concurrent.futures import as_completed

    from nas.core.processes import stopped_on_interrupt, worker_pool

    with worker_pool(min(workers, len(todo)), _start_worker, (source, str(run.device))) as pool, \
            stopped_on_interrupt(pool):      # SIGTERM stops the fine-tunes at once; measured ones are kept
        futures = [pool.submit(_worker_measure, record, settings) for record in todo]
        for future in as_completed(futures):
            yield future.result()


_WORKER_RUN: Any = None


def _start_worker(source: Source, device: str) -> None:
    """A finalists worker (`worker_pool`): the run loaded once from its folder."""
    global _WORKER_RUN
    from nas.engine.run import load_run

    _WORKER_RUN = load_run(source.run, checkpoint=source.checkpoint, device=device), source.step


def _worker_measure(record: Record, settings: Finetune) -> Record:
    run, step = _WORKER_RUN
    if run.step != step:
        raise SearchError(f"finalists: the checkpoint {run.checkpoint} holds step {run.step}, the search measured "
                          f"step {step} (the run is being trained further); search again once it stopped")
    return _one(run, record, settings, finetune_top1)
