"""A run and what builds it: the floor the API, the search stages and the worker processes share.

`Run` (a trained run loaded from its folder), `load_run`, the builders of a config's space,
supernet, strategy and data, `resolve_arch`, `arch_generator` and `standalone_model` live
here, below `nas.api` and `nas.engine.searching.stage`, so neither of those (nor a spawned fidelity or
search worker, which unpickles its callbacks by module name) has to import the other.
`nas.api` re-exports them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from nas.core.arch import Arch, read_arch_file
from nas.core.config import RunConfig, load_config
from nas.core.errors import ArchError, CheckpointError, DataError, clip
from nas.core.registry import SPACES, STRATEGIES, load_plugins
from nas.engine.checkpoint import LAST, check_config, load_checkpoint, mismatch_detail, weights_digest
from nas.engine.data.build import build_source
from nas.engine.data.datasets import ImageSplits, dataset_info, load_dataset
from nas.engine.data.sources import DataSource
from nas.engine.devices import resolve_device
from nas.engine.evaluator import Evaluator
from nas.engine.run_dir import DEFAULT_RUNS_DIR, RunDir, find_run
from search_spaces.base import ArchSpace, Supernet
from supernets.base import Strategy, restore_strategy, seeded_supernet


def build_space(config: RunConfig) -> ArchSpace:
    """The architecture space a config describes (channels and classes from its dataset, or
    `data.num_classes` without reading the data)."""
    load_plugins()
    entry = SPACES.get(config.space.name)
    if config.data.num_classes is not None:
        in_chans, num_classes = 3, config.data.num_classes
    else:
        in_chans, num_classes, _ = dataset_info(config.data.name, config.data.root, config.data.image_size)
    return entry.obj(config.space.options, in_chans, num_classes)


def build_supernet(config: RunConfig) -> Supernet:
    """A freshly initialised plain supernet of the config's space, seeded by `train.seed`
    (global RNG state untouched). Training builds its model(s) through the strategy."""
    return seeded_supernet(build_space(config), config.train.seed)


def build_strategy(config: RunConfig) -> Strategy:
    """The config's training strategy, which builds its own freshly initialised model(s)."""
    s = config.strategy
    return STRATEGIES.get(s.name).obj(build_space(config), s.options, s.sampler, s.distill, config.train.seed)


def load_splits(config: RunConfig) -> ImageSplits:
    """The dataset of a config, in memory, with its fixed validation split."""
    d = config.data
    return load_dataset(d.name, d.root, d.val_size, d.train_size, d.split_seed, d.image_size)


def load_source(config: RunConfig, device: torch.device | None = None) -> DataSource:
    """The batches of a config: in memory or streamed (`data.in_memory`); pinned for CUDA.
    Data with more classes than `data.num_classes` (the classifier's) is refused."""
    source = build_source(config.data, pin_memory=device is not None and device.type == "cuda")
    classes = config.data.num_classes
    if classes is not None and source.num_classes > classes:
        raise DataError(f"data.num_classes: the classifier has {classes} classes but data.root "
                        f"{config.data.root} holds {source.num_classes}")
    return source


@dataclass
class Run:
    """A trained run: its config, its strategy (with the trained weights, on `device`) and an evaluator.
    `weights` (`weights_digest` of the checkpoint's model) identifies the trained weights, None for
    an untrained config's run."""

    dir: RunDir
    config: RunConfig
    strategy: Strategy
    step: int
    checkpoint: Path
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    weights: str | None = None
    _splits: ImageSplits | None = field(default=None, repr=False)
    _data: DataSource | None = field(default=None, repr=False)
    _evaluator: Evaluator | None = field(default=None, repr=False)

    @property
    def space(self) -> ArchSpace:
        return self.strategy.space

    @property
    def imported(self) -> dict[str, Any] | None:
        """The record of a run made by `nas import` (`imported.json`), None for a trained run."""
        path = self.dir.imported
        return json.loads(path.read_text()) if path.is_file() else None

    @property
    def has_data(self) -> bool:
        """Whether the run's config names its data: an imported ImageFolder run may have none
        (`data.root` unset), and then exports without recalibrating or evaluating."""
        return not (self.config.data.name == "imagefolder" and self.config.data.root is None)

    def subnet(self, arch: Mapping[str, Any]) -> Supernet:
        """The trained supernet that computes `arch`, with `arch` active."""
        return self.strategy.subnet_for(arch)

    def export_model(self, arch: Mapping[str, Any]) -> torch.nn.Module:
        """A static module of `arch` with the trained weights (running statistics as stored)."""
        return self.subnet(arch).export(arch)

    @property
    def splits(self) -> ImageSplits:
        if self._splits is None:
            self._splits = load_splits(self.config)
        return self._splits

    @property
    def data(self) -> DataSource:
        """The run's batches as its config says (in memory or streamed)."""
        if self._data is None:
            self._data = load_source(self.config, self.device)
        return self._data

    @property
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            self._evaluator = Evaluator(self.strategy.subnet_for, self.space.canonical, self.data,
                                        self.config.eval, self.config.train.seed, self.step,
                                        self.config.train.channels_last)
        return self._evaluator


def load_run(path_or_name: str | Path, runs_dir: str | Path = DEFAULT_RUNS_DIR, checkpoint: str = LAST,
             device: str | torch.device | None = None) -> Run:
    """A trained run by directory or name, with the weights of `checkpoints/<checkpoint>` on
    `device` (cpu, cuda or cuda:N; None: cuda when available, else cpu)."""
    device = resolve_device(device)
    run_dir = find_run(path_or_name, runs_dir)
    config = load_config(run_dir.config)
    path = run_dir.checkpoints / checkpoint
    if not path.is_file():
        raise CheckpointError(f"RUN: {run_dir.root} has no checkpoint {path.name} yet (train it with nas train)")
    state = load_checkpoint(path)
    check_config(state, config, path, run_dir.config)
    strategy = build_strategy(config)
    load_weights(strategy, state, path, run_dir.config)
    memory_format = torch.channels_last if config.train.channels_last else torch.contiguous_format
    strategy.model.to(device, memory_format=memory_format).eval()
    return Run(run_dir, config, strategy, int(state["step"]), path, device, weights=weights_digest(state["model"]))


def load_weights(strategy: Strategy, state: Mapping[str, Any], path: Path, config_path: Path) -> None:
    """`restore_strategy` from `state`; a mismatch names its first missing, unexpected or
    mis-shaped keys."""
    try:
        restore_strategy(strategy, state)
    except (KeyError, RuntimeError, ValueError, TypeError, AttributeError) as e:
        detail = mismatch_detail(strategy.model_state_dict(), state.get("model"), e)
        raise CheckpointError(f"{path}: weights do not match {config_path} ({detail})") from e


def resolve_arch(space: ArchSpace, spec: str | Mapping[str, Any]) -> Arch:
    """`max`, `min`, the space's own notation (cell201: a NAS-Bench-201 string), an arch file
    path (holding a mapping or such a string), or an arch mapping -> a canonical arch of `space`."""
    if isinstance(spec, Mapping):
        return space.canonical(spec)
    if spec == "max":
        return space.max()
    if spec == "min":
        return space.min()
    arch = space.arch_from_text(spec)
    if arch is None:
        arch = read_arch_file(spec)
    if isinstance(arch, str):
        text = arch
        arch = space.arch_from_text(text)
        if arch is None:
            raise ArchError(f"{spec}: arch: {clip(text)!r} is no arch of space '{space.name}' (give a mapping of "
                            f"its choices)")
    return space.canonical(arch)


def arch_generator(run: Run) -> Any:
    """The run's trained architecture generator (a shiftnas sampler's), or None."""
    return getattr(getattr(run.strategy, "sampler", None), "generator", None)


def standalone_model(config: RunConfig, arch: Mapping[str, Any], seed: int) -> nn.Module:
    """What standalone training of `arch` starts from: the export of a freshly initialised plain
    supernet of the config's space seeded with `seed`, in training mode. Never a run's trained
    weights nor its strategy's models: the ground truth depends on the space, not on how a run
    trained (so runs of one space, whatever their strategy, share it)."""
    return seeded_supernet(build_space(config), seed).export(arch).train()
