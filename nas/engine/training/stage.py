"""The training stage's entry: `train` (what `nas.train` is), the config a resume runs with and
the default run name."""
from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch

from nas.core.config import RunConfig, load_config, parse_overrides
from nas.core.errors import ConfigError
from nas.engine.checkpoint import LAST
from nas.engine.data.batches import steps_per_epoch
from nas.engine.data.sources import DataSource
from nas.engine.distributed import barrier, detect, init_process_group
from nas.engine.evaluator import Evaluator
from nas.engine.run import build_strategy, load_source
from nas.engine.run_dir import DEFAULT_RUNS_DIR, RunDir, check_name, check_resume, open_run, record_start
from nas.engine.training.summary import TrainSummary, train_summary
from supernets.base import Strategy


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
        raise ConfigError(f"overrides {', '.join(keys)}: contradicts {run.config}, which is authoritative on "
                          "{resume=True}", fix="start a new run with {name} instead")
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
    from nas.engine.training.trainer import Trainer, check_fits     # torch's heavy training imports, on first use

    env = detect(device)
    init_process_group(env)
    if config.train.threads is not None:
        torch.set_num_threads(config.train.threads)
    run = RunDir(Path(runs_dir) / check_name(name if name is not None else run_name(config)))
    start = check_resume(run, resume, checkpoint)
    source = load_source(config, torch.device(env.device))
    config = _with_capped_warmup(config, source, env.is_main and not resume)
    strategy = build_strategy(config)
    check_fits(config, strategy, source, env.world_size)     # errors a started trainer would find: before any folder
    barrier()     # every rank has checked before rank 0 creates anything
    with ExitStack() as stack:
        if env.is_main:
            stack.enter_context(open_run(run, config, resume, strategy.model_state_dict()))
        strategy.set_cache_dir(run.root)
        barrier()
        trainer = Trainer(config, strategy, source, run, env, progress, evaluator_factory(config, strategy, source))
        if start is not None:
            trainer.resume(start)
        if env.is_main and not trainer.finished:     # a finished run resumed starts nothing: no new start recorded
            record_start(run, resumed=start is not None, ranks=env.world_size)
        trainer.fit()
        barrier()
    return train_summary(run)


def evaluator_factory(config: RunConfig, strategy: Strategy, source: DataSource) -> Callable[[int], Evaluator]:
    """What the trainer calls at each epoch end: step -> the `Evaluator` of the strategy's
    subnets at that step."""
    def make_evaluator(step: int) -> Evaluator:
        return Evaluator(strategy.subnet_for, strategy.space.canonical, source, config.eval,
                         config.train.seed, step, config.train.channels_last)

    return make_evaluator


def _with_capped_warmup(config: RunConfig, source: DataSource, announce: bool) -> RunConfig:
    """The config with a warm-up longer than a tenth of the run cut to a tenth (see
    `nas.engine.training.schedule`), saying so on stderr when `announce`."""
    from nas.engine.training.schedule import capped_warmup

    t = config.train
    total = t.steps if t.steps is not None else t.epochs * steps_per_epoch(source.num_train, t.batch_size)
    train_config, message = capped_warmup(t, total)
    if message is not None and announce:
        print(message, file=sys.stderr)
    return replace(config, train=train_config)
