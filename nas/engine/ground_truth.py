"""The ground truth of fidelity measurements: standalone test top-1 of archs, cached per (arch, seed).

The standalone model of an arch is the export of a freshly initialised plain supernet of the
space (never a run's trained weights), seeded by (training seed, arch_id), then trained alone
with a recipe (`nas.engine.standalone`). So a result depends only on the space, the arch, the
recipe and the seed, and every run on one space shares it:

    DIR/<space name>-<space fingerprint>/<recipe digest>-<e<epochs> | t<steps>>/
        recipe.json            the recipe and the space section its digest covers
        <arch_id>-s<k>.json    seed k: {"arch_id", "arch", "seed", "train_seed", "macs", "params",
                               "test_top1", "test_top5", "steps", "seconds", "threads", "torch"}

Seed k trains with `recipe.train.seed + k` (batch order, augmentation, calibration images) and
initialises from `derive_seed(that seed, "standalone-init", arch_id)`. Each result is written
atomically by the process that trained it, so a killed measurement keeps what finished.
With `workers` > 1 the trainings run in that many spawned processes of one thread each; one
worker trains in this process, also on one thread, so both give the same numbers.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.core.arch import Arch, arch_id
from nas.core.config import DataConfig, RunConfig
from nas.core.files import write_json
from nas.core.rng import derive_seed
from nas.core.schema import to_plain
from nas.engine.data.build import build_source
from nas.engine.data.sources import DataSource
from nas.engine.recipe import Recipe
from nas.engine.standalone import train_standalone
from search_spaces.base import ArchSpace

# (config, arch, init seed) -> the static model to train; picklable (a module-level function)
ModelFactory = Callable[[RunConfig, Arch, int], nn.Module]
_SOURCES: dict[DataConfig, DataSource] = {}   # per process: loaded once, shared by its trainings


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
    path: Path
    make_model: ModelFactory


class GroundTruth:
    """The cache folder of one (space, recipe) and the trainings that fill it."""

    def __init__(self, root: str | Path, space: ArchSpace, config: RunConfig, recipe: Recipe,
                 make_model: ModelFactory):
        self.space, self.config, self.recipe, self.make_model = space, config, recipe, make_model
        self.space_section = to_plain(config.space)
        self.digest = recipe.digest(space=self.space_section)
        self.folder = Path(root) / f"{space.name}-{space.fingerprint()}" / f"{self.digest}-{recipe.length()}"

    def path(self, arch: Arch, seed: int) -> Path:
        return self.folder / f"{arch_id(arch)}-s{seed}.json"

    def cached(self, arch: Arch, seed: int) -> dict[str, Any] | None:
        """The stored result of (arch, seed), or None (also for an unreadable file)."""
        try:
            return json.loads(self.path(arch, seed).read_text())
        except (OSError, ValueError):
            return None

    def task(self, arch: Arch, seed: int) -> Task:
        macs, params = self.space.costs(arch)
        return Task(self.config, self.recipe, arch, seed, self.space.input_size(arch), macs, params,
                    self.path(arch, seed), self.make_model)

    def collect(self, archs: Sequence[Arch], seeds: int, workers: int,
                on_arch: Callable[[Arch, list[dict[str, Any]]], None], progress: bool = False) -> int:
        """Call `on_arch(arch, results of seeds 0..seeds-1)` once per arch as soon as all its
        seeds are cached or trained (cached ones first); returns the trainings run. `progress`:
        a tqdm bar of the trainings on stderr."""
        self.folder.mkdir(parents=True, exist_ok=True)
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
        from tqdm import tqdm
        with tqdm(total=len(tasks), desc=f"standalone {self.folder.name}", unit="training", file=sys.stderr,
                  disable=not progress or not tasks, dynamic_ncols=True) as bar:
            for task, result in _run(tasks, workers):
                results = found[arch_id(task.arch)]
                results[task.seed] = result
                bar.update(1)
                if len(results) == seeds:
                    on_arch(task.arch, [results[k] for k in range(seeds)])
        return len(tasks)


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
    recipe = task.recipe
    train_seed = recipe.train.seed + task.seed
    model = task.make_model(task.config, task.arch, init_seed(train_seed, task.arch))
    result = train_standalone(model, recipe, recipe_source(recipe.data), train_seed, resolution=task.resolution)
    record = {"arch_id": arch_id(task.arch), "arch": task.arch, "seed": task.seed, "train_seed": train_seed,
              "macs": task.macs, "params": task.params, **result.to_dict(), "threads": torch.get_num_threads(),
              "torch": torch.__version__}
    write_json(task.path, record)
    return record


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _init_worker() -> None:
    torch.set_num_threads(1)


def _run(tasks: Sequence[Task], workers: int) -> Iterator[tuple[Task, dict[str, Any]]]:
    """(task, result) pairs in the order the trainings finish."""
    if not tasks:
        return
    if workers == 1:
        with _one_thread():
            for task in tasks:
                yield task, train_task(task)
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(min(workers, len(tasks)), mp_context=context, initializer=_init_worker)
    try:
        pending: dict[Future, Task] = {pool.submit(train_task, task): task for task in tasks}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield pending.pop(future), future.result()
    finally:   # on an error: no new trainings; running ones finish (and keep their files)
        pool.shutdown(wait=True, cancel_futures=True)
