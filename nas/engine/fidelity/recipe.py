"""The recipe of standalone training: how an arch is trained alone to measure the supernet.

A recipe is the `data`, `train` and `eval` sections of a run config plus the label smoothing
of label-trained subnets. By default it is the run's own, with two changes: `train.seed` is 0
(the seeds of a ground truth are 0..K-1 added to it, whichever run asks for it) and `--epochs`
replaces the length. A recipe file overrides keys of `train:` and/or `data:`, validated like a
run config, e.g.::

    train: {epochs: 3, optimizer: {lr: 0.05}}
    data: {train_size: 20000}

`digest` names a recipe in ground-truth caches: settings that cannot change the trained weights
(`train.threads`, `train.checkpoint`, `train.log_every`, and how batches are read:
`data.in_memory`, `data.workers`; `data.sampling` and `data.pada` too, as standalone training always reads its
epochs in plain seeded order) are left out of it, and so are the augmentation options
beyond crop and flip (timm per-image transforms, mixup/cutmix) while they keep their defaults,
so ground truths cached before those options existed remain valid.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nas.core import yaml_io
from nas.core.config import AugmentConfig, DataConfig, EvalConfig, RunConfig, TrainConfig, build_config
from nas.core.errors import ConfigError, check_int
from nas.core.registry import did_you_mean
from nas.core.schema import to_plain
from nas.engine.training.schedule import capped_warmup

SECTIONS = ("train", "data")
DEFAULT_LABEL_SMOOTHING = 0.1
_NOT_HASHED = ("threads", "checkpoint", "log_every", "accelerate")
_DATA_NOT_HASHED = ("in_memory", "workers", "sampling", "pada")
_ALWAYS_HASHED_AUGMENT = ("crop_padding", "hflip")
_LENGTH = ("epochs", "steps")
# How `nas.engine.training.schedule` shapes the rate; part of the digest, so trainings made under an
# earlier schedule (a warm-up that was not a prefix of the cosine) are not reused.
SCHEDULE = "warmup-prefix"


@dataclass(frozen=True)
class Recipe:
    """How one standalone model is trained and evaluated."""

    data: DataConfig
    train: TrainConfig
    eval: EvalConfig
    label_smoothing: float = DEFAULT_LABEL_SMOOTHING

    def length(self) -> str:
        """`e<epochs>` or `t<steps>`: the training length, for folder names."""
        return f"e{self.train.epochs}" if self.train.epochs is not None else f"t{self.train.steps}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data of everything that shapes the trained weights."""
        train = {k: v for k, v in to_plain(self.train).items() if k not in _NOT_HASHED}
        return {"data": _data_section(self.data), "train": train, "eval": to_plain(self.eval),
                "label_smoothing": self.label_smoothing, "schedule": SCHEDULE}

    def digest(self, **context: Any) -> str:
        """First 10 hex digits of sha1 of `to_dict()` plus `context` (e.g. the space section)."""
        text = json.dumps({**self.to_dict(), **context}, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:10]


def _data_section(data: DataConfig) -> dict[str, Any]:
    """The `data` settings that shape the batches' contents (see the module docstring)."""
    plain = {k: v for k, v in to_plain(data).items() if k not in _DATA_NOT_HASHED}
    if plain.get("num_classes") is None:        # added after ground truths were committed: the data's own count
        plain.pop("num_classes", None)
    defaults = to_plain(AugmentConfig())
    plain["augment"] = {k: v for k, v in plain["augment"].items()
                        if k in _ALWAYS_HASHED_AUGMENT or v != defaults[k]}
    return plain


def with_effective_warmup(recipe: Recipe, total_steps: int) -> Recipe:
    """`recipe` with the warm-up its `total_steps` actually use (`nas.engine.training.schedule`), so a
    recipe read from a run whose config recorded the cut warm-up and one read from the
    uncut YAML name the same trainings."""
    train, _ = capped_warmup(recipe.train, total_steps)
    return replace(recipe, train=train)


def label_smoothing_of(config: RunConfig) -> float:
    """The run's label smoothing of label-trained subnets (its strategy's option, else 0.1)."""
    value = getattr(config.strategy.options, "label_smoothing", None)
    return float(value) if value is not None else DEFAULT_LABEL_SMOOTHING


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_overrides(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"recipe: {path}: no such file")
    overrides = yaml_io.load_mapping(path)
    for key in overrides:
        if key not in SECTIONS:
            raise ConfigError(f"{path}: {key}: unknown key{did_you_mean(str(key), SECTIONS)}; "
                              f"a recipe overrides {' and/or '.join(SECTIONS)}")
    return overrides


def load_recipe(config: RunConfig, path: str | Path | None = None, epochs: int | None = None) -> Recipe:
    """The recipe of `config` with the overrides of the YAML file `path` and `epochs`.

    Raises:
        ConfigError: naming `--epochs`, or the recipe file and the key path of each problem.
    """
    if epochs is not None:
        check_int("epochs", epochs, 1)
    raw = config.to_dict()
    raw["train"]["seed"] = 0
    source = "<run config>"
    if path is not None:
        source = str(path)
        for section, values in _read_overrides(Path(path)).items():
            if values is None:
                continue
            if section == "train" and isinstance(values, dict) and len(set(_LENGTH) & set(values)) == 1:
                given = next(k for k in _LENGTH if k in values)   # the other length key is dropped
                values = {**values, **{k: None for k in _LENGTH if k != given}}
            raw[section] = _merge(raw[section], values) if isinstance(values, dict) else values
    if epochs is not None:
        raw["train"]["epochs"], raw["train"]["steps"] = epochs, None
    built = build_config(raw, source)
    return Recipe(built.data, built.train, built.eval, label_smoothing_of(config))
