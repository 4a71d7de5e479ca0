"""The cheaper path where weight sharing does not pay: each member of a family trained alone from scratch.

Where fine-tuning a subnet from its inherited weights needs as long as training it alone (the
config's `export.finetune.length` is 100% or more of its training), the supernet is pure
overhead: every member costs a whole training anyway. Then a family searched on the untrained
config by a zero-cost score (`nas search CONFIG --max-macs A,B,C --out DIR`, which reads no trained
weight) and each member trained alone from the config's own recipe cost K trainings instead of a
supernet plus K trainings. `export_family_from_scratch` (`nas export CONFIG --family DIR`) does
the second half: each member is trained as `nas fidelity`'s standalone ground truth trains an arch
(the recipe's seed 0, the same initialisation), measured as every export is (BN recalibrated on
the evaluator's images, then val and test top-1), and exported like any other member
(`shipped: scratch`) into `DIR/export/<arch_id>`. Resumable as any family export: a finished
member is kept, a member killed inside its training resumes it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from nas.core.arch import arch_id
from nas.core.config import RunConfig, config_spelling
from nas.core.preprocessing import preprocessing_metadata
from nas.core.locks import folder_lock
from nas.engine.data.batches import steps_per_epoch
from nas.engine.data.datasets import training_images
from nas.engine.export import export_lock, save_export
from nas.engine.export.family import (
    FamilyExport,
    check_family,
    earlier_members,
    has_format,
    read_family_file,
    ship_members,
    write_family_export,
)
from nas.engine.export.shipped import write_shipped
from nas.engine.export.stopping import stopped_by_sigterm
from nas.engine.run import Run, resolve_arch, standalone_model
from nas.engine.untrained import untrained_run

SEED = 0    # the ground truth's first seed: a member is what `nas fidelity` trains for its arch


def scratch_recipe(run: Run) -> tuple[Any, dict[str, Any]]:
    """The config's recipe (`Recipe`) as the standalone ground truth reads it, and what records it
    (steps, seed, digest)."""
    from nas.engine.export.finetune import run_length     # the trainer loads timm: only when it trains
    from nas.engine.fidelity.recipe import load_recipe, with_effective_warmup

    steps, _ = run_length(run)
    recipe = with_effective_warmup(load_recipe(run.config), steps)
    return recipe, {"steps": steps, "seed": SEED, "recipe_digest": recipe.digest()}


def train_member(run: Run, arch: Mapping[str, Any], out_dir: Path, recipe: Any, wanted: Mapping[str, Any],
                 progress: bool = True, export_format: str = "pt2") -> dict[str, Any]:
    """Train `arch` alone from scratch with `recipe` (a `Recipe`, resumably), measure it and export
    it to `out_dir`; returns the export's metrics."""
    from nas.engine.export.finetune import measure, trained_model
    from nas.engine.fidelity.ground_truth import init_seed
    from nas.engine.fidelity.standalone import train_alone

    arch = run.space.canonical(arch)
    size = run.space.input_size(arch)
    seed = recipe.train.seed + SEED
    model = standalone_model(run.config, arch, init_seed(seed, arch))
    partial = out_dir.parent / f".{arch_id(arch)}-scratch-{wanted['recipe_digest']}.partial.pt"
    partial.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = run.config.train.checkpoint
    trained = train_alone(model, recipe, run.data, seed, resolution=size, partial=partial,
                          save_every_s=checkpoint.every_seconds, save_every_steps=checkpoint.every_steps,
                          progress=f"train {arch_id(arch)} alone" if progress else None)
    model = trained_model(model)
    val, test = measure(run, model, size)
    partial.unlink(missing_ok=True)
    metrics = {"val_top1": val.top1, "test_top1": test.top1, "val_top5": val.top5, "test_top5": test.top5,
               "shipped": "scratch", "inherited": None, "finetune": None,
               "scratch": {**wanted, "seconds": trained.seconds, "resumed_from": trained.resumed_from,
                           **trained.variant.to_dict()},
               "cheaper": [], "warning": None, "step": 0, "run": None}
    preprocessing = preprocessing_metadata(size, run.data.mean, run.data.std, run.space.interpolation)
    return save_export(run.strategy.model, arch, out_dir, metrics, preprocessing, export_format=export_format,
                       model=model)


def finished_scratch(out_dir: Path, member_id: str, wanted: Mapping[str, Any], export_format: str = "pt2"
                     ) -> dict[str, Any] | None:
    """The metrics.json of `out_dir` when it is `member_id` trained from scratch with the `wanted`
    recipe (steps, seed, digest) in `export_format`, else None."""
    if not has_format(out_dir, export_format):
        return None
    try:
        record = json.loads((out_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("arch_id") != member_id or record.get("shipped") != "scratch":
        return None
    trained = record.get("scratch")
    same = isinstance(trained, dict) and all(trained.get(key) == wanted[key] for key in wanted)
    return record if same else None


def export_family_from_scratch(config: RunConfig, folder: str | Path, export_format: str = "pt2",
                               device: str | None = None, progress: bool = True) -> FamilyExport:
    """Train every member of the family in `folder` alone from scratch with `config`'s recipe and
    export it into `folder/export/<arch_id>` (module docstring); then write family_export.json."""
    folder = Path(folder)
    family = read_family_file(folder)
    run = untrained_run(config, folder, device)
    recipe, wanted = scratch_recipe(run)
    planned = check_family(run, folder, family, export_format, dir_param="family")

    def export(arch_file: Path) -> dict[str, Any]:
        arch = resolve_arch(run.space, str(arch_file))
        out_dir = run.dir.export(arch_id(arch))
        with folder_lock(export_lock(out_dir), f"export folder {out_dir}", remove=True):    # as every export does
            record = train_member(run, arch, out_dir, recipe, wanted, progress, export_format)
        write_shipped(arch_file.parent, out_dir, record)
        return record

    with stopped_by_sigterm():      # a training stopped by SIGTERM: one line, and a rerun resumes it
        members = ship_members(planned, lambda out_dir, member_id: finished_scratch(out_dir, member_id, wanted,
                                                                                    export_format), export,
                               earlier_members(folder), progress)
    return write_family_export(FamilyExport(folder, None, 0, {"scratch": wanted}, members, None, None))


def finetune_share(config: RunConfig) -> float | None:
    """The config's export fine-tune as a share of its training (1.0: as long as training alone),
    a length in steps and a training in epochs (or the other way round) converted through the
    steps of an epoch of its data; None where that needs the data's files (an ImageFolder
    without `data.train_size`)."""
    length, train, data = str(config.export.finetune.length).strip(), config.train, config.data
    if length.endswith("%"):
        return float(length[:-1]) / 100
    if length.endswith("e") and train.steps is None:
        return float(length[:-1]) / train.epochs
    images = training_images(data.name, data.val_size, data.train_size)
    epoch = steps_per_epoch(images, train.batch_size) if images is not None and images >= train.batch_size else None
    finetune = float(length) if not length.endswith("e") else None if epoch is None else float(length[:-1]) * epoch
    run = train.steps if train.steps is not None else None if epoch is None else train.epochs * epoch
    return None if finetune is None or not run else finetune / run


def cheaper_path_note(config: RunConfig, config_file: str | Path) -> str | None:
    """One line when the supernet does not pay for `config` (its exports fine-tune for a whole
    training or more: each member costs what training it alone costs), naming the cheaper path;
    None otherwise."""
    share = finetune_share(config)
    if share is None or share < 1:
        return None
    config_file = config_spelling(config) or config_file      # a shipped config as NAME.yaml: never a run's name
    search = f"nas search {config_file} --max-macs 35%,50%,75% --out DIR"
    export = f"nas export {config_file} --family DIR"
    return (f"the supernet does not pay here: each export fine-tunes for {100 * share:.0f}% of a training "
            "(export.finetune.length), what training the arch alone from scratch costs (on cell201 that fine-tune was "
            f"no better than training from scratch: benchmarks/notes/19-ships-vs-alone.md); the cheaper path: {search} "
            f"(a zero-cost score, nothing trained), then {export} (each member trained alone)")


__all__ = ["cheaper_path_note", "export_family_from_scratch", "finetune_share", "finished_scratch", "scratch_recipe",
           "train_member"]
