"""The ground truth of fidelity measurements: standalone test top-1 of archs, cached per (arch, seed).

The standalone model of an arch is the export of a freshly initialised plain supernet of the
space (never a run's trained weights), seeded by (training seed, arch_id), then trained alone
with a recipe (`nas.engine.fidelity.standalone`). So a result depends only on the space, the arch, the
recipe and the seed, and every run on one space shares it:

    DIR/<space name>-<space fingerprint>/<recipe digest>-<e<epochs> | t<steps>>/
        recipe.json            the recipe and the space section its digest covers
        <arch_id>-s<k>.json    seed k: {"arch_id", "arch", "seed", "train_seed", "macs", "params",
                               "test_top1", "test_top5", "steps", "seconds", "memory_format",
                               "compiled", "precision", "threads", "torch"} (the variant fields
                               since `train.accelerate`; older records ran eager in their recipe's
                               precision, `nas.engine.fidelity.variant`)
        <arch_id>-s<k>.lock    while a process trains seed k: its claim (`nas.core.locks.Claims`);
                               one a killed process left beside a finished result is removed
                               once its holder is judged dead (the result wins either way)
        <arch_id>-s<k>.partial.pt  while it trains: its state every 5 minutes, to resume from
        compiled/              the same files of trainings that run compiled (`train.accelerate`,
                               `nas.engine.fidelity.variant`): `torch.compile`'s kernels move a
                               result by up to 0.5 points on short runs, so a compiled training
                               and an eager one are two measurements (the digest ignores
                               `accelerate`, so records trained eager before this split stay valid)
        bf16/, compiled/bf16/  the same of trainings under bf16 autocast, which only a recipe
                               saying `train.precision: bf16` asks for: `train.accelerate: auto`
                               keeps ground truths fp32 (reference records must read the same on
                               every machine, and `auto` picks bf16 only on CPUs with bf16
                               instructions; `nas.engine.fidelity.variant`); a bf16 training is
                               never reused as an fp32 one, nor the other way

Seed k trains with `recipe.train.seed + k` (batch order, augmentation, calibration images) and
initialises from `derive_seed(that seed, "standalone-init", arch_id)`. Each result is written
atomically by the process that trained it, so a killed measurement keeps what finished and
resumes what it was training from its last saved state (with the result of an uninterrupted run);
processes sharing the folder (several commands, several machines on a network file system)
claim each training before they start it, so they split the trainings instead of repeating them.
With `workers` > 1 the trainings run in that many spawned processes of one thread each; one
worker trains in this process, also on one thread, so both give the same numbers.

A record is used only when valid field by field (`nas.engine.fidelity.ground_truth_records`: every
field present, of its type and range, naming this file's arch and seeds with the arch's
analytic MACs and params and the recipe's optimiser steps). An invalid one (cut short, written
by another version, edited by hand) is retrained: the process that claims its training moves it to
`<arch_id>-s<k>.json.invalid` (kept for inspection), says so in one line naming the file, and
writes a fresh result. A shared cache thus heals itself without waiting for whoever may
delete the file, and no wrong number reaches a statistic; in a folder this user cannot
write, the record is refused with one line naming it.
"""
from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.core.arch import Arch, arch_id
from nas.core.config import DataConfig, RunConfig
from nas.core.errors import Interrupted, RunError
from nas.core.files import write_json
from nas.core.rng import derive_seed
from nas.core.schema import to_plain
from nas.engine.data.build import build_source
from nas.engine.data.sources import DataSource
from nas.core.locks import Claims
from nas.core.preprocessing import INTERPOLATION
from nas.core.processes import terminate_workers, worker_pool
from nas.engine.fidelity.ground_truth_records import Expected, record_problem
from nas.engine.fidelity.recipe import Recipe
from nas.engine.fidelity.standalone import total_steps, train_standalone
from nas.engine.fidelity.variant import Variant, choose_variant, may_compile
from search_spaces.base import ArchSpace

# (config, arch, init seed) -> the static model to train; picklable (a module-level function)
ModelFactory = Callable[[RunConfig, Arch, int], nn.Module]
_SOURCES: dict[DataConfig, DataSource] = {}   # per process: loaded once, shared by its trainings
_WRITING = threading.Lock()    # temporary file names hold the PID: threads of one process take turns


@dataclass(frozen=True)
class Task:
    """One standalone training: everything a worker process needs, picklable."""

    config: RunConfig
    recipe: Recipe
    arch: Arch
    seed: int
    resolution: int
    macs: int
    params: int
    steps: int
    variant: Variant
    path: Path
    make_model: ModelFactory
    interpolation: str = INTERPOLATION     # how images are resized to `resolution` (the space's)

    def expected(self) -> Expected:
        """What its cache record must say (`nas.engine.fidelity.ground_truth_records`)."""
        return Expected(self.arch, self.seed, self.recipe.train.seed + self.seed, self.macs, self.params,
                        self.steps, self.variant.compiled, "bf16" if self.variant.bf16 else "fp32",
                        self.recipe.train.precision)


# Space options added after ground truths were committed, left out of the digest at their
# default (so those trainings stay valid): cell201's way of counting costs and its affine BN,
# MobileNetV3's head bias, dropout and kernel transformation (Once-for-All's space).
_LATER_OPTIONS = {"costs": "macs", "bn_affine": True, "head_bias": True, "dropout": 0.0, "kernel_transform": False}


def space_section(config: RunConfig) -> dict:
    """The config's space section as a ground truth's digest covers it (`_LATER_OPTIONS` at their
    defaults left out)."""
    section = to_plain(config.space)
    options = section.get("options")
    if isinstance(options, dict):
        section["options"] = {k: v for k, v in options.items() if _LATER_OPTIONS.get(k, object()) != v}
    return section


class GroundTruth:
    """The cache folder of one (space, recipe) and the trainings that fill it."""

    def __init__(self, root: str | Path, space: ArchSpace, config: RunConfig, recipe: Recipe,
                 make_model: ModelFactory):
        self.space, self.config, self.recipe, self.make_model = space, config, recipe, make_model
        self.space_section = space_section(config)
        self.digest = recipe.digest(space=self.space_section)
        self.folder = Path(root) / f"{space.name}-{space.fingerprint()}" / f"{self.digest}-{recipe.length()}"
        self._variants: dict[str, Variant] = {}

    def path(self, arch: Arch, seed: int) -> Path:
        variant, folder = self.variant(arch), self.folder
        if variant.compiled:
            folder = folder / "compiled"
        if variant.bf16:
            folder = folder / "bf16"
        return folder / f"{arch_id(arch)}-s{seed}.json"

    def variant(self, arch: Arch) -> Variant:
        """How `arch` trains under the recipe (`choose_variant` of a ground truth on one thread, as
        every training runs: in the recipe's precision; the model is built only when the rule may
        compile it)."""
        if arch_id(arch) not in self._variants:
            train = self.recipe.train
            if may_compile(train, self.steps, 1):
                variant = choose_variant(self.make_model(self.config, arch, 0), train, self.steps, 1, ground_truth=True)
            else:
                variant = Variant(train.channels_last, train.accelerate == "compiled", train.precision == "bf16")
            self._variants[arch_id(arch)] = variant
        return self._variants[arch_id(arch)]

    def cached(self, arch: Arch, seed: int) -> dict[str, Any] | None:
        """The stored result of (arch, seed), or None (also for an unreadable or invalid file)."""
        return _read_result(self.task(arch, seed))

    @functools.cached_property
    def steps(self) -> int:
        """The optimiser steps of the recipe (its data source is loaded once per process)."""
        return total_steps(self.recipe, recipe_source(self.recipe.data))

    def task(self, arch: Arch, seed: int) -> Task:
        macs, params = self.space.costs(arch)
        return Task(self.config, self.recipe, arch, seed, self.space.input_size(arch), macs, params, self.steps,
                    self.variant(arch), self.path(arch, seed), self.make_model, self.space.interpolation)

    def collect(self, archs: Sequence[Arch], seeds: int, workers: int,
                on_arch: Callable[[Arch, list[dict[str, Any]]], None], progress: bool = False) -> int:
        """Call `on_arch(arch, results of seeds 0..seeds-1)` once per arch as soon as all its
        seeds are cached or trained (cached ones first); returns the trainings this process ran.

        Each training is claimed first (`<arch_id>-s<k>.lock`, `nas.core.locks.Claims`), so
        processes sharing the folder, on this machine or others, split the trainings: one that
        finds a training claimed moves on and later reads the other's result (or takes the
        claim over when its holder died).
        SIGTERM stops the trainings in progress (`Interrupted`); finished ones stay cached.
        `progress`: a tqdm bar of the trainings on stderr.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        with _WRITING:
            if not (self.folder / "recipe.json").is_file():
                write_json(self.folder / "recipe.json", {"space": self.space_section, **self.recipe.to_dict()})
        found = {arch_id(a): {k: r for k in range(seeds) if (r := self.cached(a, k)) is not None} for a in archs}
        tasks = []
        for arch in archs:
            if len(found[arch_id(arch)]) == seeds:
                on_arch(arch, [found[arch_id(arch)][k] for k in range(seeds)])
        # dearest first: the last trainings to finish are short ones (workers end together)
        for arch in sorted(archs, key=lambda a: (-self.space.macs(a), arch_id(a))):
            tasks += [self.task(arch, k) for k in range(seeds) if k not in found[arch_id(arch)]]
        for folder in {task.path.parent for task in tasks}:
            folder.mkdir(exist_ok=True)
        from tqdm import tqdm
        trained = 0
        with tqdm(total=len(tasks), desc=f"standalone {self.folder.name}", unit="training", file=sys.stderr,
                  disable=not progress or not tasks, dynamic_ncols=True) as bar, \
                stop_on_sigterm(self.folder), Claims() as claims, _Pool(workers, len(tasks)) as pool:
            for arch in archs:
                for seed in found[arch_id(arch)]:
                    drop_stale_claim(claims, self.path(arch, seed))
            for task, result, ours in _schedule(tasks, pool, claims):
                results = found[arch_id(task.arch)]
                results[task.seed] = result
                trained += ours
                bar.update(1)
                if len(results) == seeds:
                    on_arch(task.arch, [results[k] for k in range(seeds)])
        return trained


def recipe_source(data: DataConfig) -> DataSource:
    """The data source of a recipe's `data` section, loaded once per process."""
    if data not in _SOURCES:
        _SOURCES[data] = build_source(data)
    return _SOURCES[data]


def init_seed(train_seed: int, arch: Arch) -> int:
    """The seed that initialises `arch`'s standalone model when trained with `train_seed`."""
    return derive_seed(train_seed, "standalone-init", arch_id(arch))


def train_task(task: Task) -> dict[str, Any]:
    """Train one (arch, seed), write its cache file atomically, return its result."""
    # the variant its file stands for (the rule gives it anyway: this only makes it certain)
    recipe = replace(task.recipe, train=replace(task.recipe.train, accelerate="compiled" if task.variant.compiled
                                                else "eager", precision="bf16" if task.variant.bf16 else "fp32"))
    train_seed = recipe.train.seed + task.seed
    model = task.make_model(task.config, task.arch, init_seed(train_seed, task.arch))
    partial = partial_path(task.path)
    result = train_standalone(model, recipe, recipe_source(recipe.data), train_seed, resolution=task.resolution,
                              partial=partial, interpolation=task.interpolation)
    record = {"arch_id": arch_id(task.arch), "arch": task.arch, "seed": task.seed, "train_seed": train_seed,
              "macs": task.macs, "params": task.params, **result.to_dict(), "threads": torch.get_num_threads(),
              "torch": torch.__version__}
    write_json(task.path, record)
    partial.unlink(missing_ok=True)
    return record


def partial_path(result: Path) -> Path:
    """Where the training of the result file `result` keeps its state to resume from."""
    return result.with_name(f"{result.stem}.partial.pt")


def claim_path(result: Path) -> Path:
    """The claim file of the training of the result file `result`."""
    return result.with_suffix(".lock")


def drop_stale_claim(claims: Claims, result: Path) -> None:
    """Remove the claim (and saved state) that a process killed after writing the finished
    `result` left beside it, when its holder is judged dead; a live holder's claim is left to it."""
    claim = claim_path(result)
    if claim.exists() and claims.try_take(claim):
        partial_path(result).unlink(missing_ok=True)
        claims.release(claim)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _load_result(task: Task) -> tuple[dict[str, Any] | None, str | None]:
    """(the valid record of `task`, None), or (None, why its file is invalid), or (None, None)
    without a file."""
    try:
        record = json.loads(task.path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as e:
        return None, f"not readable as JSON: {e}"
    problem = record_problem(record, task.expected())
    return (None, problem) if problem is not None else (record, None)


def _read_result(task: Task) -> dict[str, Any] | None:
    return _load_result(task)[0]


def set_aside(path: Path, problem: str) -> Path:
    """Move the invalid record `path` to `<name>.invalid` (kept for whoever wrote it to look at),
    saying so in one line on stderr; the caller holds the training's claim and trains it again.

    Raises:
        RunError: naming the file, when it cannot be moved (a folder this user cannot write).
    """
    from tqdm import tqdm

    aside = path.with_name(f"{path.name}.invalid")
    try:
        path.replace(aside)
    except FileNotFoundError:
        return aside
    except OSError as e:
        raise RunError(f"{path}: invalid ground-truth record ({problem}) that cannot be moved aside "
                       f"({e.strerror}); remove it to train it again") from None
    tqdm.write(f"{path}: invalid ground-truth record ({problem}); moved to {aside.name}, training it again",
               file=sys.stderr)
    return aside


class _Pool:
    """Where trainings run: this process (one worker) or a pool of spawned ones.

    Leaving the block normally or on an error lets the running trainings finish (they keep
    their files); on `Interrupted` or KeyboardInterrupt it terminates them.
    """

    def __init__(self, workers: int, tasks: int):
        self.workers = max(1, min(workers, tasks))
        self.spawned = workers > 1
        self.executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> "_Pool":
        return self

    def submit(self, task: Task) -> Future:
        """The future result of training `task` (trained right away when in this process)."""
        if not self.spawned:
            future: Future = Future()
            with _one_thread():
                try:
                    future.set_result(train_task(task))
                except Exception as e:    # handed over like a worker's error
                    future.set_exception(e)
            return future
        with _starting():     # submit starts the worker processes it needs
            if self.executor is None:
                self.executor = worker_pool(self.workers)
            return self.executor.submit(train_task, task)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self.executor is None:
            return
        if kind is not None and issubclass(kind, (Interrupted, KeyboardInterrupt)):
            terminate_workers(self.executor)
        self.executor.shutdown(wait=True, cancel_futures=True)


def _schedule(tasks: Sequence[Task], pool: _Pool, claims: Claims, poll_s: float = 1.0
              ) -> Iterator[tuple[Task, dict[str, Any], bool]]:
    """(task, result, trained by this process) for every task, as results arrive.

    A task is trained here once claimed; one claimed by another process is read from the
    cache when that process has written it. With nothing to start and nothing running here,
    waits `poll_s` between looks.
    """
    waiting = list(tasks)
    running: dict[Future, Task] = {}

    def claim(task: Task) -> Path:
        return claim_path(task.path)

    while waiting or running:
        for task in list(waiting):
            if len(running) >= pool.workers:
                break
            result = _read_result(task)
            if result is None and claims.try_take(claim(task)):
                result, problem = _load_result(task)      # finished elsewhere between the look and the claim
                if result is None:
                    if problem is not None:
                        set_aside(task.path, problem)
                    waiting.remove(task)
                    running[pool.submit(task)] = task
                    continue
                claims.release(claim(task))
            if result is not None:
                drop_stale_claim(claims, task.path)      # its writer may have been killed before releasing
                waiting.remove(task)
                yield task, result, False
        if running:
            finished, _ = wait(running, timeout=None if not waiting else poll_s, return_when=FIRST_COMPLETED)
            for future in finished:
                task = running.pop(future)
                try:
                    result = future.result()
                finally:
                    claims.release(claim(task))
                yield task, result, True
        elif waiting:
            time.sleep(poll_s)      # every remaining training is claimed by another process


class _Starting:
    """While worker processes start, a SIGTERM waits (`pending`): raised in the middle of
    sending a spawned process its start-up data, it would leave that process to die with a
    traceback of its own."""

    depth = 0
    pending: Interrupted | None = None


@contextlib.contextmanager
def _starting() -> Iterator[None]:
    _Starting.depth += 1
    try:
        yield
    finally:
        _Starting.depth -= 1
    if not _Starting.depth and _Starting.pending is not None:
        error, _Starting.pending = _Starting.pending, None
        raise error


@contextlib.contextmanager
def stop_on_sigterm(folder: Path) -> Iterator[None]:
    """SIGTERM raises `Interrupted` (exit 143) in the main thread for the block: the caller's
    cleanup stops its trainings, instead of dying silently and orphaning them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        error = Interrupted(f"{signal.Signals(signum).name}: trainings in progress stopped, finished ones are "
                            f"kept in {folder}; run the same command to resume", signum)
        if _Starting.depth:
            _Starting.pending = error
            return
        raise error

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
