"""An untrained run: a config's freshly initialised supernet, for searches that need no training.

A search ranked by a table of measured results (`--score table:PATH`) or by zero-cost proxies
reads no trained weight, so `nas search CONFIG --out DIR` searches a config directly: the run
is built in memory (weights initialised with `train.seed`, step 0), nothing is written but the
search folder, which must be given (a config has no run folder, and creating `runs/NAME` would
block a later `nas train`). What needs trained weights is refused in one line: the `supernet`
score (and fusions with it), finalists, and worker processes (which reload a run from disk).
"""
from __future__ import annotations

from pathlib import Path

import torch

from estimators import build_estimator
from nas.core.config import RunConfig
from nas.core.errors import ConfigError
from nas.engine.devices import resolve_device
from nas.engine.run import Run, build_strategy
from nas.engine.run_dir import RunDir

UNTRAINED = "untrained"     # the run's checkpoint name: there is none


def names_a_run(target: str, runs_dir: str | Path) -> bool:
    """Whether `nas search TARGET` means a run: a directory, or a run's name under `runs_dir`
    (a run named like a shipped config is the run, as before configs were accepted)."""
    return Path(target).is_dir() or (Path(runs_dir) / target / "config.yaml").is_file()


def check_untrained_search(score: str, out: str | None, workers: int, finalists: int) -> None:
    """Refuse, in one line naming the parameter, what a search of an untrained run cannot do."""
    if out is None:
        raise ConfigError("out: required when searching a config rather than a trained run (no run folder to "
                          "write into)")
    if score != "auto" and "supernet_top1" in build_estimator(score).needs:
        raise ConfigError(f"score: '{score}' ranks by the trained supernet's accuracy: search a trained run, or "
                          "rank by a table or a zero-cost proxy (e.g. {score=table:PATH.csv})")
    if workers > 1:
        raise ConfigError("workers: a search of an untrained config runs in one process")
    if finalists:
        raise ConfigError("finalists: fine-tuning finalists needs a trained run")


def untrained_run(config: RunConfig, out: str | Path, device: str | torch.device | None = None) -> Run:
    """The config's run at step 0, in memory (module docstring); its folder is the search's `out`."""
    device = resolve_device(device)
    strategy = build_strategy(config)
    memory_format = torch.channels_last if config.train.channels_last else torch.contiguous_format
    strategy.model.to(device, memory_format=memory_format).eval()
    return Run(RunDir(Path(out)), config, strategy, 0, Path(out) / UNTRAINED, device)
