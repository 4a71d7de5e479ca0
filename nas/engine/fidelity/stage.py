"""The fidelity stage's entries: `ground_truth` and `fidelity` (what `nas.ground_truth` and
`nas.fidelity` are): the standalone ground truth of a space, and how well a trained run's
supernet (and each estimator) ranks subnets against it."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nas.core.arch import Arch, arch_id
from nas.core.config import RunConfig
from nas.core.errors import check_int
from nas.core.files import check_writable
from nas.engine.checkpoint import LAST
from nas.engine.fidelity.results import FidelityResult, GroundTruthResult
from nas.engine.run import Run, build_space, load_run, standalone_model
from nas.engine.run_dir import DEFAULT_RUNS_DIR

if TYPE_CHECKING:     # the measurement's machinery (trainer, timm) loads on first use
    from nas.engine.fidelity.recipe import Recipe


def ground_truth(config: RunConfig, ground_truth_dir: str | Path, *, archs: int = 16, epochs: int | None = None,
                 seeds: int = 1, recipe: str | Path | Recipe | None = None, workers: int = 1, selection_seed: int = 0,
                 progress: bool = True, extends: int | str | None = None) -> GroundTruthResult:
    """Train (or reuse from `ground_truth_dir`) the standalone ground truth of `nas fidelity` for
    the config's space, without any supernet: the `archs` MACs-stratified archs (a superset of
    the selection `extends` names when given: a size, meaning the selection of that size this
    ground truth measured, or a lineage like "48-ext24"), `seeds` times each.

    Returns a `GroundTruthResult`: `records` holds one `{"arch_id", "arch", "macs", "params",
    "standalone_test_top1", ...}` per arch sorted by MACs, `new` the trainings run by this call.
    """
    from nas.engine.fidelity.report import seed_agreement
    from nas.engine.fidelity.runner import check_arguments, plan, standalone_record

    check_arguments(archs, epochs, seeds, workers, extends)
    check_writable(ground_truth_dir, "ground_truth_dir")
    measured = plan(config, build_space(config), standalone_model, ground_truth_dir, archs=archs, epochs=epochs,
                    seeds=seeds, recipe=recipe, selection_seed=selection_seed, extends=extends)
    records: dict[str, dict[str, Any]] = {}

    def keep(arch: Arch, results: list[dict[str, Any]]) -> None:
        records[arch_id(arch)] = standalone_record(arch, results)

    new = measured.truth.collect(measured.archs, seeds, workers, keep, progress)
    ordered = [records[arch_id(a)] for a in measured.archs]
    return GroundTruthResult(measured.truth.folder, measured.recipe, measured.truth.digest, ordered,
                             **seed_agreement(ordered, seeds), new=new)


def fidelity(run: Run | str | Path, *, archs: int = 16, epochs: int | None = None, seeds: int = 1,
             recipe: str | Path | Recipe | None = None, workers: int = 1, ground_truth_dir: str | Path | None = None,
             selection_seed: int = 0, out: str | Path | None = None, runs_dir: str | Path = DEFAULT_RUNS_DIR,
             checkpoint: str = LAST, device: str | torch.device | None = None, progress: bool = True,
             estimators: str | list[str] | None = None, init_seeds: int = 3,
             extends: int | str | None = None) -> FidelityResult:
    """How well the run's supernet ranks its subnets (`nas fidelity`): supernet vs standalone test top-1.

    Selects `archs` archs stratified over the space's MACs (min and max included; with
    `extends`, a superset of the selection it names, as in `ground_truth`, so its trainings are
    reused), trains each alone `seeds` times with the recipe (a file of `train`/`data` overrides, a `Recipe`, or the
    run's own with `epochs`) in `workers` processes, caching every training in
    `ground_truth_dir` (default `runs/NAME/fidelity/ground_truth`), and reports Kendall tau-b,
    Spearman rho, top-k overlap and per-MACs-bin gaps. Writes `runs/NAME/fidelity/<id>/` (or
    `out`), where `<id>` follows from the arguments: the same call resumes. A run given by name
    or path is loaded on `device` (None: cuda when available), where the supernet is evaluated
    (through `Run.subnet`, whichever model of the strategy computes an arch); standalone
    training starts from `standalone_model` on the CPU. `estimators` (comma-separated names or
    a list; default `supernet`, every cheap registered estimator, the space's default score
    (what `auto` uses without a fidelity summary) and its fusion with `supernet`; `supernet`,
    `macs` and `params` always) are scored on the same archs, proxies averaged over `init_seeds`
    initialisations on 2 seeded batches of 64 training images, and reported beside the
    supernet with a verdict. Returns a `FidelityResult`. Workers are started with multiprocessing's spawn
    method: a script that calls this with `workers > 1` needs an `if __name__ == "__main__":` guard.
    """
    from estimators import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES, EstimatorContext
    from nas.engine.fidelity.estimators import build_estimators, needs_batches, parse_names, scoring
    from nas.engine.fidelity.runner import check_arguments, plan, run_fidelity
    from nas.engine.fidelity.table_truth import is_table, table_plan

    check_arguments(archs, epochs, seeds, workers, extends)     # before loading the run
    check_int("init_seeds", init_seeds, 1)
    names = parse_names(estimators)
    build_estimators(names)
    if not isinstance(run, Run):
        run = load_run(run, runs_dir, checkpoint, device)
    if estimators is None:      # the default reports the space's default score and its fusion too
        names = parse_names(None, run.space)
    # before any evaluation or folder: where it writes, then the data (the recipe's, the run's)
    table = is_table(str(ground_truth_dir))      # a table of measured accuracies: nothing to train
    if not table:
        root = Path(ground_truth_dir) if ground_truth_dir is not None else run.dir.fidelity("ground_truth")
        check_writable(root, "ground_truth_dir" if ground_truth_dir is not None else "RUN")
    check_writable(out if out is not None else run.dir.fidelity(""), "out" if out is not None else "RUN")
    if table:
        measured = table_plan(str(ground_truth_dir), run.space, archs=archs, epochs=epochs, seeds=seeds,
                              recipe=recipe, selection_seed=selection_seed, init_seeds=init_seeds, extends=extends)
    else:
        measured = plan(run.config, run.space, standalone_model, root, archs=archs, epochs=epochs, seeds=seeds,
                        recipe=recipe, selection_seed=selection_seed, init_seeds=init_seeds, extends=extends)
    _ = run.data     # loads (and so checks) the run's data before any evaluation or folder
    ident = measured.ident() + ("" if run.checkpoint.name == LAST else f"-{run.checkpoint.stem}")
    settings = {"run": str(run.dir.root), "checkpoint": run.checkpoint.name, "step": run.step,
                "space": run.space.name, "space_fingerprint": run.space.fingerprint(),
                "arch_ids": [arch_id(a) for a in measured.archs], "selection_seed": selection_seed,
                "extends": measured.extends, "seeds": seeds,
                "recipe_digest": measured.truth.digest, "recipe": measured.recipe.to_dict(),
                "ground_truth": str(measured.truth.folder),
                # what the proxies' scores depend on besides the run (seeded by selection_seed)
                "init_seeds": init_seeds, "estimator_batches": ESTIMATOR_BATCHES,
                "estimator_batch_size": ESTIMATOR_BATCH_SIZE}
    chosen = scoring(names, EstimatorContext(run.space, init_seeds=init_seeds, seed=selection_seed,
                                             run_dir=run.dir.root))
    if needs_batches(chosen.estimators):
        chosen.context.batches = run.data.sample_batches("train", ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE,
                                                         selection_seed)
    return run_fidelity(measured.archs, measured.truth, seeds, lambda arch: run.evaluator.evaluate(arch, "test").top1,
                        Path(out) if out is not None else run.dir.fidelity(ident), settings, workers, progress,
                        chosen)
