"""The Python API: each function is one stage of YAML -> supernet -> train -> search -> export.

It wires the stages together; the CLI is a thin layer over it. A run and its builders (`Run`,
`load_run`, `build_space`, `build_strategy`...) live in `nas.engine.run` and the search stages
in `nas.search_api`; both are re-exported here.
"""
from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import torch

from nas.core.amounts import format_amount
from nas.core.arch import Arch, arch_id
from nas.core.config import RunConfig, load_config, parse_overrides
from nas.core.errors import ConfigError, RunError, check_int
from nas.core.files import check_writable
from nas.engine.checkpoint import LAST
from nas.engine.data.sources import DataSource
from nas.engine.distributed import barrier, detect, init_process_group
from nas.engine.evaluator import SPLITS, Evaluator
from nas.engine.exporter import FORMATS as EXPORT_FORMATS
from nas.engine.fidelity_report import format_summary as format_fidelity_summary
from nas.engine.results import (
    EvalResult,
    ExportResult,
    GenerateResult,
    GroundTruthResult,
    TrainSummary,
    train_summary,
)
from nas.engine.run import (
    Run,
    arch_generator,
    build_space,
    build_strategy,
    build_supernet,
    load_run,
    load_source,
    load_splits,
    load_weights,
    resolve_arch,
    standalone_model,
)
from nas.engine.run_dir import DEFAULT_RUNS_DIR, RunDir, check_name, check_resume, open_run
from nas.search_api import format_search_summary, latency_table, resolve_budget, search, search_summary

if TYPE_CHECKING:
    from nas.engine.results import FidelityResult
    from nas.engine.recipe import Recipe

__all__ = ["EXPORT_FORMATS", "SPLITS", "EvalResult", "ExportResult", "GenerateResult", "GroundTruthResult", "Run",
           "TrainSummary", "arch_generator", "build_space", "build_strategy", "build_supernet", "evaluate",
           "export_subnet", "fidelity", "format_fidelity_summary", "format_search_summary", "format_space_summary",
           "generate",
           "ground_truth", "latency_table", "load_config", "load_run", "load_source", "load_splits", "load_weights",
           "resolve_arch", "resume_config", "run_name", "run_space_summary", "search", "search_summary",
           "space_summary",
           "standalone_model", "train", "train_summary"]


def space_summary(config: RunConfig) -> dict[str, Any]:
    """Size, choices and min/max costs of a config's space (what `nas space` prints)."""
    space = build_space(config)
    low, high = space.min(), space.max()
    return {"space": config.space.name, "size": space.size(), "raw_size": space.raw_size(),
            "macs": {"min": space.macs(low), "max": space.macs(high)},
            "params": {"min": space.params(low), "max": space.params(high)},
            "choices": {k: list(v) for k, v in space.choices().items()}}


def run_space_summary(run: "Run") -> dict[str, Any]:
    """`space_summary` of a trained run's config plus its sub-supernets (one for a one-shot
    run): each one's split values, its choices that differ from the full space's, and its size."""
    summary = space_summary(run.config)
    full = run.space.choices()
    summary["sub_supernets"] = [
        {"split": {key: list(values) for key, values in route.items()},
         "restricted": {key: list(values) for key, values in space.choices().items() if values != full[key]},
         "size": space.size()} for route, space in run.strategy.sub_spaces()]
    return summary


def format_space_summary(summary: dict[str, Any]) -> str:
    """Human-readable rendering of `space_summary` (and of `run_space_summary`)."""
    lines = [f"space {summary['space']}: {summary['size']:,} distinct architectures "
             f"({summary['raw_size']:,} raw choice combinations)",
             f"MACs   min {format_amount(summary['macs']['min'])}  max {format_amount(summary['macs']['max'])}",
             f"params min {format_amount(summary['params']['min'])}  max {format_amount(summary['params']['max'])}",
             f"{len(summary['choices'])} choices:"]
    lines += [f"  {key}: {values}" for key, values in summary["choices"].items()]
    parts = summary.get("sub_supernets", [])
    if parts:
        lines.append(f"{len(parts)} sub-supernet{'s' if len(parts) > 1 else ''}:")
        for index, part in enumerate(parts):
            restricted = ", ".join(f"{k}: {v}" for k, v in part["restricted"].items()) or "the full space"
            lines.append(f"  [{index}] {part['size']:,} architectures; {restricted}")
    return "\n".join(lines)


# -- training -------------------------------------------------------------------------------
def run_name(config: RunConfig) -> str:
    """The name `train` gives a run when none is given: the config file's stem (else `run`)."""
    source = Path(config.source)
    return source.stem if source.suffix in (".yaml", ".yml") else "run"


def resume_config(name: str, overrides: tuple[str, ...] | list[str] = (), runs_dir: str | Path = DEFAULT_RUNS_DIR,
                  checkpoint: str = LAST) -> RunConfig:
    """The config `runs_dir/name` resumes with (`train(..., resume=True)`): the run's own, after
    checking it can resume from `checkpoints/<checkpoint>`; a `--set` that would change it is an
    error naming the keys."""
    run = RunDir(Path(runs_dir) / check_name(name))
    check_resume(run, True, checkpoint)
    saved = load_config(run.config)
    if not overrides:
        return saved
    changed = load_config(run.config, overrides)
    if changed != saved:
        keys = [key for key, _ in parse_overrides(overrides)]
        raise ConfigError(f"--set {', '.join(keys)}: contradicts {run.config}, which is authoritative on "
                          f"--resume; start a new run with --name instead")
    return saved


def train(config: RunConfig, name: str | None = None, resume: bool = False,
          runs_dir: str | Path = DEFAULT_RUNS_DIR, progress: bool = True, checkpoint: str = LAST,
          device: str | torch.device | None = None) -> TrainSummary:
    """Train a supernet; returns where it stands (`TrainSummary`: its folder, last step and the
    last epoch's validation top-1 of the monitored archs; `.dir` is the `RunDir`). `resume`
    continues `runs_dir/name` from `checkpoints/<checkpoint>`.

    `device`: cpu, cuda or cuda:N (None: cuda when available, else cpu); under torchrun each
    rank uses cuda:LOCAL_RANK. Nothing is created before the name, the data and the config
    have been checked; the run folder is locked while training (rank 0 holds the lock under
    torchrun).

    Raises:
        Interrupted: SIGINT or SIGTERM stopped training (after writing its checkpoint).
    """
    from nas.engine.trainer import Trainer

    env = detect(device)
    init_process_group(env)
    if config.train.threads is not None:
        torch.set_num_threads(config.train.threads)
    run = RunDir(Path(runs_dir) / check_name(name if name is not None else run_name(config)))
    start = check_resume(run, resume, checkpoint)
    source = load_source(config, torch.device(env.device))
    config = _with_capped_warmup(config, source, env.is_main and not resume)
    strategy = build_strategy(config)
    barrier()     # every rank has checked before rank 0 creates anything
    with ExitStack() as stack:
        if env.is_main:
            stack.enter_context(open_run(run, config, resume, strategy.model_state_dict()))
        strategy.set_cache_dir(run.root)

        def make_evaluator(step: int) -> Evaluator:
            return Evaluator(strategy.subnet_for, strategy.space.canonical, source, config.eval,
                             config.train.seed, step, config.train.channels_last)

        barrier()
        trainer = Trainer(config, strategy, source, run, env, progress, make_evaluator)
        if start is not None:
            trainer.resume(start)
        trainer.fit()
        barrier()
    return train_summary(run)


def _with_capped_warmup(config: RunConfig, source: DataSource, announce: bool) -> RunConfig:
    """The config with a warm-up longer than a tenth of the run cut to a tenth (see
    `nas.engine.schedule`), saying so on stderr when `announce`."""
    from dataclasses import replace

    from nas.engine.data.batches import steps_per_epoch
    from nas.engine.schedule import capped_warmup

    t = config.train
    total = t.steps if t.steps is not None else t.epochs * steps_per_epoch(source.num_train, t.batch_size)
    train_config, message = capped_warmup(t, total)
    if message is not None and announce:
        print(message, file=sys.stderr)
    return replace(config, train=train_config)


# -- evaluating and exporting a trained run ---------------------------------------------------
def evaluate(run: Run, arch: str | Mapping[str, Any], split: str = "val") -> EvalResult:
    """BN-recalibrated top-1/top-5 of `arch` on `split`, with its costs."""
    arch = resolve_arch(run.space, arch)
    result = run.evaluator.evaluate(arch, split)
    macs, params = run.space.costs(arch)
    return EvalResult(arch, arch_id(arch), split, result.top1, result.top5, result.n_images, macs, params, run.step)


def export_subnet(run: Run, arch: str | Mapping[str, Any], out: str | Path | None = None,
                  export_format: str = "pt2") -> ExportResult:
    """Recalibrate BN, evaluate, and export `arch` to `out` (default `runs/NAME/export/<arch_id>`);
    `export_format="onnx"` also writes `model.onnx` (the `onnx` extra)."""
    from nas.engine.exporter import check_export_dir, check_format, save_export

    check_format(export_format)     # a missing package fails before the evaluations
    arch = resolve_arch(run.space, arch)
    out_dir = Path(out) if out is not None else run.dir.export(arch_id(arch))
    check_export_dir(out_dir, "--out" if out is not None else "RUN", run.space.params(arch))
    val = run.evaluator.evaluate(arch, "val")
    test = run.evaluator.evaluate(arch, "test")
    preprocessing = {"resolution": run.space.input_size(arch), "interpolation": "bilinear", "antialias": False,
                     "mean": list(run.data.mean), "std": list(run.data.std)}
    metrics = {"val_top1": val.top1, "test_top1": test.top1, "val_top5": val.top5, "test_top5": test.top5,
               "step": run.step, "run": str(run.dir.root)}
    with run.evaluator.prepared(arch) as supernet:     # recalibrated statistics are what gets exported
        record = save_export(supernet.to(memory_format=torch.contiguous_format), arch, out_dir, metrics,
                             preprocessing, export_format=export_format)
    return ExportResult(record["arch_id"], record["macs"], record["flops"], record["params"], record["val_top1"],
                        record["test_top1"], out_dir, record)


# -- architecture generator -----------------------------------------------------------------
def generate(run: Run, max_macs: str | float, seed: int = 0, out: str | Path | None = None) -> GenerateResult:
    """An arch within `max_macs` (an amount or `P%`) from the run's generator, without a search
    (`nas generate`); written as an arch file to `out` (default `runs/NAME/generate/<arch_id>.yaml`)."""
    from nas.core.arch import write_arch_file
    from nas.core.files import check_writable

    trainer = arch_generator(run)
    if trainer is None:
        raise RunError(f"RUN: {run.dir.root} has no architecture generator (train it with "
                       f"strategy.sampler: {{name: shiftnas, generator: true}})")
    low, high = run.space.macs(run.space.min()), run.space.macs(run.space.max())
    budget = resolve_budget(max_macs, low, high, "--max-macs")
    if budget < low:
        raise ConfigError(f"--max-macs: {format_amount(budget)} is below the smallest subnet's MACs "
                          f"({format_amount(low)})")
    if out is not None:
        check_writable(Path(out).parent, "--out")
    arch, attempts, shrunk = trainer.generate(budget, seed)
    macs, params = run.space.costs(arch)
    path = Path(out) if out is not None else run.dir.root / "generate" / f"{arch_id(arch)}.yaml"
    if out is None:
        check_writable(path.parent, "RUN")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_arch_file(arch, path)
    return GenerateResult(arch, arch_id(arch), macs, params, budget, attempts, shrunk, path)


# -- fidelity -------------------------------------------------------------------------------
ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE = 2, 64     # seeded training images the proxies read


def ground_truth(config: RunConfig, ground_truth_dir: str | Path, *, archs: int = 16, epochs: int | None = None,
                 seeds: int = 1, recipe: str | Path | Recipe | None = None, workers: int = 1, selection_seed: int = 0,
                 progress: bool = True) -> GroundTruthResult:
    """Train (or reuse from `ground_truth_dir`) the standalone ground truth of `nas fidelity` for
    the config's space, without any supernet: the `archs` MACs-stratified archs, `seeds` times each.

    Returns a `GroundTruthResult`: `records` holds one `{"arch_id", "arch", "macs", "params",
    "standalone_test_top1", ...}` per arch sorted by MACs, `new` the trainings run by this call.
    """
    from nas.engine.fidelity import check_arguments, plan, standalone_record
    from nas.engine.fidelity_report import seed_agreement

    check_arguments(archs, epochs, seeds, workers)
    check_writable(ground_truth_dir, "--ground-truth")
    measured = plan(config, build_space(config), standalone_model, ground_truth_dir, archs=archs, epochs=epochs,
                    seeds=seeds, recipe=recipe, selection_seed=selection_seed)
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
             estimators: str | list[str] | None = None, init_seeds: int = 3) -> FidelityResult:
    """How well the run's supernet ranks its subnets (`nas fidelity`): supernet vs standalone test top-1.

    Selects `archs` archs stratified over the space's MACs (min and max included), trains each
    alone `seeds` times with the recipe (a file of `train`/`data` overrides, a `Recipe`, or the
    run's own with `epochs`) in `workers` processes, caching every training in
    `ground_truth_dir` (default `runs/NAME/fidelity/ground_truth`), and reports Kendall tau-b,
    Spearman rho, top-k overlap and per-MACs-bin gaps. Writes `runs/NAME/fidelity/<id>/` (or
    `out`), where `<id>` follows from the arguments: the same call resumes. A run given by name
    or path is loaded on `device` (None: cuda when available), where the supernet is evaluated
    (through `Run.subnet`, whichever model of the strategy computes an arch); standalone
    training starts from `standalone_model` on the CPU. `estimators` (comma-separated names or
    a list; default `supernet` and every cheap registered estimator; `supernet`, `macs` and
    `params` always) are scored on the same archs, proxies averaged over `init_seeds`
    initialisations on 2 seeded batches of 64 training images, and reported beside the
    supernet with a verdict. Returns a `nas.engine.results.FidelityResult`. Workers are started with multiprocessing's spawn
    method: a script that calls this with `workers > 1` needs an `if __name__ == "__main__":` guard.
    """
    from nas.engine.fidelity import check_arguments, plan, run_fidelity
    from estimators import EstimatorContext
    from nas.engine.fidelity_estimators import build_estimators, needs_batches, parse_names, scoring

    check_arguments(archs, epochs, seeds, workers)     # before loading the run
    check_int("--init-seeds", init_seeds, 1)
    names = parse_names(estimators)
    build_estimators(names)
    if not isinstance(run, Run):
        run = load_run(run, runs_dir, checkpoint, device)
    # before any evaluation or folder: where it writes, then the data (the recipe's, the run's)
    root = Path(ground_truth_dir) if ground_truth_dir is not None else run.dir.fidelity("ground_truth")
    check_writable(root, "--ground-truth" if ground_truth_dir is not None else "RUN")
    check_writable(out if out is not None else run.dir.fidelity(""), "--out" if out is not None else "RUN")
    measured = plan(run.config, run.space, standalone_model, root, archs=archs, epochs=epochs, seeds=seeds,
                    recipe=recipe, selection_seed=selection_seed)
    _ = run.data     # loads (and so checks) the run's data before any evaluation or folder
    ident = measured.ident() + ("" if run.checkpoint.name == LAST else f"-{run.checkpoint.stem}")
    settings = {"run": str(run.dir.root), "checkpoint": run.checkpoint.name, "step": run.step,
                "space": run.space.name, "space_fingerprint": run.space.fingerprint(),
                "arch_ids": [arch_id(a) for a in measured.archs], "selection_seed": selection_seed, "seeds": seeds,
                "recipe_digest": measured.truth.digest, "recipe": measured.recipe.to_dict(),
                "ground_truth": str(measured.truth.folder)}
    chosen = scoring(names, EstimatorContext(run.space, init_seeds=init_seeds, seed=selection_seed,
                                             run_dir=run.dir.root))
    if needs_batches(chosen.estimators):
        chosen.context.batches = run.data.sample_batches("train", ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE,
                                                         selection_seed)
    return run_fidelity(measured.archs, measured.truth, seeds, lambda arch: evaluate(run, arch, "test")["top1"],
                        Path(out) if out is not None else run.dir.fidelity(ident), settings, workers, progress,
                        chosen)
