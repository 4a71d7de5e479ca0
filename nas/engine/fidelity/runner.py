"""`nas fidelity`: how well a trained supernet ranks archs, measured against standalone training.

For each selected arch (`nas.engine.fidelity.arch_selection`) the supernet's test top-1 (BN
recalibrated, through the caller's `supernet_top1`) is compared with the mean test top-1 of
`seeds` standalone trainings (`nas.engine.fidelity.ground_truth`). Files in the output directory,
whose name the caller derives from the arguments so that the same command resumes:

- `fidelity.json`: the settings (selected arch ids, recipe digest, seeds, checkpoint step,
  selection seed, the proxies' init seeds and batches: whatever changes a number of the
  folder), checked on resume: another value is refused, never mixed with the stored numbers
  (the caller names folders so that a command with another value gets its own);
- `results.jsonl`: one line per arch, appended (and fsynced, under a lock, unless another
  process measuring the same archs appended it first) as soon as all its seeds are done:
  `{"arch_id", "arch", "macs", "params", "supernet_test_top1", "standalone_test_top1" (mean
  over seeds), "standalone_test_top1_seeds", "standalone_seconds", "gap_points" (standalone
  minus supernet, in points), "estimators" ({name: score}, see
  `nas.engine.fidelity.estimators`)}`. A killed run resumes arch by arch: archs in this file
  are not measured again, trainings already in the ground truth are reused;
- `summary.json`, `scatter.png`, `scatter-<estimator>.png` and TensorBoard scalars in `tb/`
  once every arch is done (`nas.engine.fidelity.report`). The summary (what `nas search
  --score auto` reads) covers every estimator results.jsonl holds a score of, the ones this
  command named first, then those of earlier commands on the same folder.
"""
from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nas.core.arch import Arch, arch_id
from nas.core.config import RunConfig
from nas.core.errors import RunError, check_int
from nas.core.files import record_lock, write_json, write_text
from nas.engine.fidelity.arch_selection import check_extends, select_archs
from nas.engine.fidelity.estimators import CALIBRATED, Scoring, calibrated_scores, score_archs
from nas.engine.fidelity.report import estimator_summary, summarize, write_report
from nas.engine.fidelity.ground_truth import GroundTruth, ModelFactory, recipe_source, stop_on_sigterm
from nas.core.jsonl import append_record, read_records
from nas.engine.fidelity.recipe import Recipe, load_recipe, with_effective_warmup
from nas.engine.fidelity.standalone import total_steps
from nas.engine.fidelity.results import FidelityResult
from nas.engine.fidelity.selections import grown_name, resolve_extends
from nas.engine.fidelity.selections import record as record_selection
from search_spaces.base import ArchSpace

SETTINGS_FILE = "fidelity.json"
# what changes the numbers of a measurement folder: another value is another measurement
_CHECKED = ("space_fingerprint", "arch_ids", "recipe_digest", "seeds", "checkpoint", "step", "selection_seed",
            "init_seeds", "estimator_batches", "estimator_batch_size")
INIT_SEEDS = 3      # proxies' initialisations by default (a folder measured with another says so in its name)


def standalone_record(arch: Arch, seeds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An arch's standalone results: the mean test top-1 over its seeds, and each seed's."""
    alone = [float(s["test_top1"]) for s in seeds]
    return {"arch_id": arch_id(arch), "arch": arch, "macs": seeds[0]["macs"], "params": seeds[0]["params"],
            "standalone_test_top1": statistics.fmean(alone), "standalone_test_top1_seeds": alone,
            "standalone_seconds": [s["seconds"] for s in seeds]}


def arch_record(arch: Arch, supernet_top1: float, seeds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The results.jsonl line of an arch from its supernet accuracy and its standalone seeds."""
    record = standalone_record(arch, seeds)
    gap = round(100.0 * (record["standalone_test_top1"] - supernet_top1), 4)
    return {**record, "supernet_test_top1": supernet_top1, "gap_points": gap}


@dataclass(frozen=True)
class Plan:
    """What a ground truth measures: the selected archs and the cache that holds their trainings."""

    archs: list[Arch]
    recipe: Recipe
    truth: GroundTruth
    seeds: int
    selection_seed: int = 0
    init_seeds: int = INIT_SEEDS
    extends: str | None = None

    @property
    def selection(self) -> str:
        """The lineage of the selection measured (`arch_selection.lineage`): "48", "48-ext24"."""
        return grown_name(len(self.archs), self.extends)

    def ident(self) -> str:
        """The folder name of a measurement: archs, length, seeds, recipe digest (and the selection
        seed, the selection it extends, e.g. `-ext24` or `-ext48-ext24`, and the proxies' init
        seeds, where not the defaults)."""
        ident = f"n{len(self.archs)}-{self.recipe.length()}-k{self.seeds}-{self.truth.digest}"
        ident += f"-sel{self.selection_seed}" if self.selection_seed else ""
        ident += self.selection[len(str(len(self.archs))):]
        return ident + (f"-i{self.init_seeds}" if self.init_seeds != INIT_SEEDS else "")


def check_arguments(archs: int, epochs: int | None, seeds: int, workers: int, extends: int | str | None = None
                    ) -> None:
    """Raise `ConfigError` naming the flag of the first bad count."""
    check_int("archs", archs, 2, " (the min and max subnets are always measured)")
    check_extends(archs, extends)
    if epochs is not None:
        check_int("epochs", epochs, 1)
    check_int("seeds", seeds, 1)
    check_int("workers", workers, 1)


def plan(config: RunConfig, space: ArchSpace, make_model: ModelFactory, root: str | Path, *, archs: int,
         epochs: int | None, seeds: int, recipe: str | Path | Recipe | None, selection_seed: int = 0,
         init_seeds: int = INIT_SEEDS, extends: int | str | None = None) -> Plan:
    """Select the archs (a superset of the selection `extends` names when given: a lineage, or a
    size that means the selection of that size the ground truth measured, `selections`) and
    build the recipe (see `check_arguments` for the counts); the selection is recorded in the
    ground truth's folder. `init_seeds` (the proxies' initialisations) only names the
    measurement's folder.

    `recipe` is a recipe file, a `Recipe` (its length replaced by `epochs` when given), or None
    (the config's own, see `nas.engine.fidelity.recipe`).
    """
    truth = recipe_ground_truth(config, space, make_model, root, recipe, epochs)
    base = resolve_extends(truth.folder, extends, selection_seed)
    measured = Plan(select_archs(space, archs, selection_seed, base), truth.recipe, truth, seeds, selection_seed,
                    init_seeds, base)
    record_selection(truth.folder, measured.selection, selection_seed, [arch_id(a) for a in measured.archs])
    return measured


def recipe_ground_truth(config: RunConfig, space: ArchSpace, make_model: ModelFactory, root: str | Path,
                        recipe: str | Path | Recipe | None, epochs: int | None) -> GroundTruth:
    """The standalone cache under `root` of the recipe `plan` describes, its warm-up as cut by
    the schedule (so a run whose config recorded the cut and the uncut YAML share trainings)."""
    if isinstance(recipe, Recipe):
        if epochs is not None:
            recipe = replace(recipe, train=replace(recipe.train, epochs=epochs, steps=None))
    else:
        recipe = load_recipe(config, recipe, epochs)
    recipe = with_effective_warmup(recipe, total_steps(recipe, recipe_source(recipe.data)))
    return GroundTruth(root, space, config, recipe, make_model)


def _check_settings(out_dir: Path, settings: Mapping[str, Any]) -> None:
    path = out_dir / SETTINGS_FILE
    if path.is_file():
        stored = json.loads(path.read_text())
        differ = [key for key in _CHECKED if key in stored and stored[key] != settings.get(key)]
        missing = [key for key in _CHECKED if key not in stored]     # written by an older version
        reasons = ([f"{', '.join(differ)} differ"] if differ else []) + (
            [f"{', '.join(missing)} not recorded"] if missing else [])
        if reasons:
            raise RunError(f"{out_dir}: measured with other settings ({'; '.join(reasons)}, e.g. the run was "
                           f"trained further); remove the folder to measure again")
    else:
        write_json(path, dict(settings))


_LOCAL = threading.Lock()      # POSIX record locks exclude processes, not threads


@contextmanager
def results_lock(path: Path) -> Iterator[None]:
    """Hold `path` exclusively for the block: a POSIX record lock (`lockf`, which NFS clients
    share through the server) on `.NAME.lock` beside it, and a thread lock within this process.
    (A lock on `path` itself would not survive an atomic rewrite, which replaces its inode.)"""
    with _LOCAL, record_lock(path.with_name(f".{path.name}.lock")):
        yield


def append_once(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Append `record` to `path` unless a line of its arch is there already (another process
    measuring the same archs wrote it); returns the stored record."""
    with results_lock(path):
        stored = next((r for r in read_records(path, RunError) if r["arch_id"] == record["arch_id"]), None)
        if stored is not None:
            return stored
        append_record(path, record)
        return record


def store_scores(path: Path, scores: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Give every line of `path` the estimator scores of its arch in `scores` (rewriting the
    file atomically, under the lock, only when a line lacks or differs in some); returns the
    records."""
    with results_lock(path):
        records = read_records(path, RunError)
        merged = [{**r, "estimators": {**r.get("estimators", {}), **scores.get(r["arch_id"], {})}} for r in records]
        if merged != records:
            write_text(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in merged))
        return merged


def measured_names(records: Sequence[Mapping[str, Any]], named: Sequence[str]) -> list[str]:
    """`named`, then every other estimator some record has a score of (in the order found)."""
    found = [name for r in records for name in r.get("estimators", {})]
    return list(dict.fromkeys([*named, *found]))


def run_fidelity(archs: Sequence[Arch], truth: GroundTruth, seeds: int, supernet_top1: Callable[[Arch], float],
                 out_dir: str | Path, settings: Mapping[str, Any], workers: int = 1,
                 progress: bool = True, scoring: Scoring | None = None) -> FidelityResult:
    """Measure every arch of `archs` (see the module docstring); `settings` go to fidelity.json
    and summary.json; `scoring`: the estimators reported beside the supernet. SIGTERM stops
    it with `Interrupted` (its trainings too)."""
    with stop_on_sigterm(truth.folder):
        return _measure(archs, truth, seeds, supernet_top1, Path(out_dir), settings, workers, progress, scoring)


def _measure(archs: Sequence[Arch], truth: GroundTruth, seeds: int, supernet_top1: Callable[[Arch], float],
             out_dir: Path, settings: Mapping[str, Any], workers: int, progress: bool,
             scoring: Scoring | None) -> FidelityResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.jsonl"
    with results_lock(results):       # another measurement of the same archs may be writing it too
        _check_settings(out_dir, settings)
    done = {r["arch_id"]: r for r in read_records(results, RunError)}
    todo = [a for a in archs if arch_id(a) not in done]
    shared = {arch_id(a): supernet_top1(a) for a in todo}     # in this process, before any worker starts
    shared.update({i: r["supernet_test_top1"] for i, r in done.items()})
    scores: dict[str, dict[str, Any]] = {arch_id(a): {} for a in archs}
    if scoring is not None:       # before any training: an estimator that fails costs no training
        scoring.context.supernet_top1 = lambda arch: shared[arch_id(arch)]
        stored = {i: r.get("estimators", {}) for i, r in done.items()}
        scores = score_archs(scoring.estimators, archs, scoring.context, stored)

    def finish(arch: Arch, seed_results: list[dict[str, Any]]) -> None:
        record = arch_record(arch, shared[arch_id(arch)], seed_results)
        record = append_once(results, {**record, "estimators": scores[arch_id(arch)]})
        done[record["arch_id"]] = record

    new = truth.collect(todo, seeds, workers, finish, progress)
    if scoring is not None and CALIBRATED in scoring.names and any(CALIBRATED not in scores[i] for i in scores):
        targets = [done[arch_id(a)]["standalone_test_top1"] for a in archs]
        ident = f"{truth.digest}:{','.join(arch_id(a) for a in archs)}"
        for arch, value in zip(archs, calibrated_scores(archs, targets, scores, scoring.context, ident)):
            scores[arch_id(arch)][CALIBRATED] = value
    by_id = {r["arch_id"]: r for r in store_scores(results, scores)}
    records = [by_id[arch_id(a)] for a in archs]
    summary = {**settings, **summarize(records, seeds)}
    names = measured_names(records, scoring.names if scoring is not None else [])
    if names:
        seed = scoring.context.seed if scoring is not None else 0
        summary.update(estimator_summary(records, names, seed))
    with results_lock(results):      # another measurement of the same archs may be writing it too
        write_report(out_dir, summary, records)
    return FidelityResult(out_dir, summary, records, new)
