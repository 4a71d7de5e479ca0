"""The training loop around `strategy.train_step`: optimiser, LR schedule, precision, DDP,
logging, checkpoints every N steps or seconds, resume mid-epoch, clean interruption.

The trainer knows nothing of sampling rules: the strategy runs the passes of a step and the
trainer clips, steps the optimiser and the per-iteration LR schedule (timm), logs and saves.
The optimiser sees the strategy's `parameter_groups`; after every step the strategy may
restructure its model (`after_step`), and the trainer then rebuilds the DDP wrapper, the
optimiser and the scheduler around the new parameters (`Trainer.restructure`). The strategy also
says how many optimiser steps the run takes (`total_steps`: the schedule's length unless
it lengthens the run) and where each falls in the schedule (`schedule_step`).
"""
from __future__ import annotations

import contextlib
import inspect
import math
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from timm.optim import create_optimizer_v2, param_groups_weight_decay
from torch import nn

from nas.core.config import GradClipConfig, RunConfig, TrainConfig
from nas.core.errors import CheckpointError, Interrupted, RunError, TrainingDiverged, plural
from nas.core.rng import derive_seed
from nas.engine.checkpoint import (
    BEST,
    LAST,
    check_config,
    load_checkpoint,
    mismatch_detail,
    non_finite_tensors,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from nas.engine.data.batches import epoch_slice, steps_per_epoch
from nas.engine.data.datasets import ImageSplits
from nas.engine.data.sources import DataSource, as_source
from nas.engine.distributed import DistEnv, all_reduce_mean
from nas.engine.evaluator import Evaluator
from nas.engine.precision import bf16_cpu_warning
from nas.engine.data.importance import check_sampling, data_importance
from nas.core.jsonl import append_record, keep_records
from nas.engine.run_dir import RunDir
from nas.engine.training.schedule import build_scheduler
from nas.engine.training.train_logging import TrainLogger, interrupted_message
from supernets.base import Restructure, StepIO, Strategy, restore_strategy

_SGD_NAMES = ("sgd", "nesterov", "momentum")


def schedule_length(train: TrainConfig, num_train: int) -> tuple[int, int]:
    """(optimiser steps an epoch, steps of the learning-rate schedule) of `train` on `num_train` images."""
    per_epoch = steps_per_epoch(num_train, train.batch_size)
    return per_epoch, train.steps if train.steps is not None else train.epochs * per_epoch


def check_fits(config: RunConfig, strategy: Strategy, source: DataSource, world_size: int = 1) -> None:
    """Raise `ConfigError` (or `DataError`) naming the key when `config` cannot train `strategy`
    on `source` with `world_size` ranks (a few-shot split the schedule cannot hold, importance
    sampling of streamed data, a batch the ranks cannot share): what the trainer would find
    only once started, checked before the run folder is created."""
    per_epoch, schedule = schedule_length(config.train, source.num_train)
    strategy.check_schedule(schedule, per_epoch)
    check_sampling(config, source)
    epoch_slice(source.num_train, config.train.batch_size, 0, 0, world_size)


def build_optimizer(params: nn.Module | list[dict[str, Any]], config: TrainConfig) -> torch.optim.Optimizer:
    """timm optimiser from the config over a module or parameter groups.

    A module gets timm's groups: no weight decay on biases and normalisation parameters
    (every parameter of at most one dimension). Given groups carry their own weight decay.
    """
    if isinstance(params, nn.Module):
        params = param_groups_weight_decay(params, config.optimizer.weight_decay)
    o = config.optimizer
    kwargs: dict[str, Any] = {}
    name = o.name
    if name in _SGD_NAMES:
        name, kwargs["momentum"] = ("sgd" if o.nesterov else "momentum"), o.momentum
    if o.betas is not None:
        kwargs["betas"] = tuple(o.betas)
    if o.eps is not None:
        kwargs["eps"] = o.eps
    return create_optimizer_v2(params, opt=name, lr=o.lr, weight_decay=0.0, **kwargs)


def forget_epochs_after(run: RunDir, step: int) -> None:
    """Drop the metrics.jsonl records of steps after `step`: a run killed between writing an
    epoch's record and its checkpoint (or resumed from best.pt) trains those steps again."""
    keep_records(run.metrics, lambda record: record.get("step", step + 1) <= step, RunError)


def clip_gradients(model: nn.Module, clip: GradClipConfig) -> None:
    """Element-wise value clip and/or total-norm clip of the gradients, as `train.grad_clip` says."""
    params = [p for p in model.parameters() if p.grad is not None]
    if clip.value is not None:
        torch.nn.utils.clip_grad_value_(params, clip.value)
    if clip.norm is not None:
        torch.nn.utils.clip_grad_norm_(params, clip.norm)


@dataclass
class TrainState:
    """Where training stands; `step` counts finished optimiser steps."""

    step: int = 0
    elapsed: float = 0.0
    best_score: float = -1.0


class Trainer:
    """Train `strategy.model` on `splits` as `config.train` says, writing into `run`, on
    `env.device` (batches are moved there; in-memory splits are augmented as `config.data` says)."""

    saved_step: int | None = None    # step of the last.pt this process wrote or resumed from
    resumed_from: Path | None = None
    evaluation_pending = False       # the epoch that ends at `state.step` is not evaluated yet

    def __init__(self, config: RunConfig, strategy: Strategy, splits: ImageSplits | DataSource, run: RunDir,
                 env: DistEnv = DistEnv(), progress: bool = True,
                 make_evaluator: Callable[[int], Evaluator] | None = None):
        self.config, self.train_cfg = config, config.train
        self.strategy, self.run, self.env = strategy, run, env
        self.data = as_source(splits, config.data)
        self.progress, self.make_evaluator = progress, make_evaluator
        self.device = torch.device(env.device)
        self.memory_format = torch.channels_last if self.train_cfg.channels_last else torch.contiguous_format
        self.steps_per_epoch, self.schedule_steps = schedule_length(self.train_cfg, self.data.num_train)
        self.total_steps = self.schedule_steps
        self.importance = data_importance(config, self.data, env.rank, env.world_size)   # data.sampling: pada
        self.state = TrainState()
        self._build()
        self.total_steps = self.strategy.total_steps(self.step_io())   # a few-shot run may train longer
        self._stop_signal: int | None = None
        self.restructures: list[tuple[int, Restructure]] = []   # (step, change) of this process's restructures
        if self.train_cfg.precision == "bf16" and self.device.type == "cpu":
            warnings.warn(bf16_cpu_warning(), stacklevel=2)

    # -- setup --------------------------------------------------------------------------
    def _build(self) -> None:
        """Model on the device, DDP wrapper, optimiser and scheduler for the strategy's current model."""
        self.model = self.strategy.model.to(self.device, memory_format=self.memory_format)
        self.wrapped = self._wrap(self.model)
        self.optimizer = build_optimizer(self.strategy.parameter_groups(self.train_cfg.optimizer.weight_decay),
                                         self.train_cfg)
        self.scheduler = build_scheduler(self.optimizer, self.train_cfg, self.schedule_steps)

    def restructure(self, change: Restructure) -> None:
        """Rebuild DDP, optimiser and scheduler after the strategy changed its model.

        Optimiser state (momentum buffers, Adam moments...) is kept per parameter object: a
        parameter that survived keeps its own, a new parameter listed in `change.copied` gets
        a copy of the state of the parameter it was copied from, any other new parameter
        starts without state; with `change.reset_state` every parameter starts without. The
        scheduler is rebuilt with the same settings and loads its old state, so the learning
        rate continues where it was.
        """
        old_state = self.optimizer.state
        scheduler_state = self.scheduler.state_dict()
        self._build()
        kept = [] if change.reset_state else self.optimizer.param_groups
        for group in kept:
            for param in group["params"]:
                source = param if param in old_state else change.copied.get(param)
                if source is not None and source in old_state:
                    self.optimizer.state[param] = {k: v.clone() if torch.is_tensor(v) else v
                                                   for k, v in old_state[source].items()}
        self.scheduler.load_state_dict(scheduler_state)

    def _wrap(self, model: nn.Module) -> nn.Module:
        if not self.env.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [self.device.index] if self.device.type == "cuda" else None
        # Subnets leave most parameters unused; no_sync on all but the last pass of a step
        # plus find_unused_parameters lets one all-reduce carry the summed gradients.
        # BN running statistics stay each rank's own between steps (recalibrated before every
        # evaluation); torch 2.14 renamed the switch and warns at the old name.
        no_buffer_sync = ({"forward_sync_buffers": False}
                          if "forward_sync_buffers" in inspect.signature(DDP).parameters
                          else {"broadcast_buffers": False})
        return DDP(model, device_ids=ids, find_unused_parameters=True, **no_buffer_sync)

    def _autocast(self):
        if self.train_cfg.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _pass_context(self, final: bool):
        stack = contextlib.ExitStack()
        if self.env.enabled and not final:
            stack.enter_context(self.wrapped.no_sync())
        stack.enter_context(self._autocast())
        return stack

    def step_io(self) -> StepIO:
        return StepIO(forward=self.wrapped, pass_context=self._pass_context, all_reduce_mean=all_reduce_mean,
                      batches=self.probe_batches, steps_per_epoch=self.steps_per_epoch,
                      schedule_steps=self.schedule_steps, total_steps=self.total_steps,
                      record_logits=(self.importance.recorder(*divmod(self.state.step, self.steps_per_epoch))
                                     if self.importance is not None else None),
                      rank=self.env.rank, world_size=self.env.world_size)

    def schedule_position(self, step: int) -> float:
        """Where optimiser step `step` falls in the learning-rate schedule (the strategy says)."""
        return self.strategy.schedule_step(step, self.step_io())

    def epoch_of(self, step: int) -> int:
        """The schedule epoch that optimiser step `step` (counted as done) ends or lies in."""
        return math.ceil(self.schedule_position(step) / self.steps_per_epoch) - 1

    def probe_batches(self, split: str, count: int, key: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`count` batches of `split` (`train` or `val`), normalised, without augmentation, on the
        device: a pure function of (seed, split, key), the same on every rank."""
        size = self.train_cfg.batch_size // self.env.world_size
        batches = self.data.sample_batches(split, count, size, derive_seed(self.train_cfg.seed, "probe", key))
        return [(x.to(self.device, memory_format=self.memory_format), y.to(self.device)) for x, y in batches]

    # -- checkpoints --------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "model": self.strategy.model_state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "strategy": self.strategy.state_dict(), "step": self.state.step,
                "epoch": int(self.schedule_position(self.state.step) // self.steps_per_epoch), "rng": rng_state(),
                "elapsed": self.state.elapsed, "best_score": self.state.best_score,
                "total_steps": self.total_steps, "evaluation_pending": self.evaluation_pending,
                **({"data_sampling": self.importance.state_dict()} if self.importance is not None else {})}

    def save(self, name: str = LAST) -> None:
        """Write `checkpoints/<name>` (rank 0); a state holding NaN or infinity stops training instead."""
        state = self.checkpoint_state()
        bad = non_finite_tensors(state)     # every rank checks: they hold the same weights and stop together
        if bad:
            raise TrainingDiverged(
                f"non-finite weights after step {self.state.step} ({plural(len(bad), 'tensor')}, first: {bad[0]}), not "
                f"saved; {self.last_good()}: lower train.optimizer.lr or enable train.grad_clip")
        if self.env.is_main:
            save_checkpoint(state, self.run.checkpoints / name)
        if name == LAST:
            self.saved_step = self.state.step

    def last_good(self) -> str:
        """Names the checkpoint a diverged run can be resumed from, or says there is none yet."""
        path = self.run.checkpoints / LAST
        if not path.is_file():
            return f"no checkpoint was written yet ({path} comes after {self.train_cfg.checkpoint.every_steps} steps)"
        step = f" (step {self.saved_step})" if self.saved_step is not None else ""
        return f"the last good checkpoint is {path}{step}"

    def restore(self, state: dict[str, Any]) -> None:
        """Load a checkpoint: the strategy (structure, then weights), then a rebuilt optimiser
        and scheduler their states, then the RNG."""
        try:
            restore_strategy(self.strategy, state)
            self._build()
            self.total_steps = self.strategy.total_steps(self.step_io())
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            if self.importance is not None:
                self.importance.load_state_dict(state["data_sampling"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise CheckpointError(self._mismatch_message(state, e)) from e
        set_rng_state(state["rng"])
        self.state = TrainState(step=state["step"], elapsed=state.get("elapsed", 0.0),
                                best_score=state.get("best_score", -1.0))

    def _mismatch_message(self, state: dict[str, Any], error: Exception) -> str:
        where = self.resumed_from if self.resumed_from is not None else self.run.checkpoints / LAST
        detail = mismatch_detail(self.strategy.model_state_dict(), state.get("model"), error)
        return f"{where}: does not match this config ({detail})"

    def resume(self, name: str = LAST) -> None:
        """Continue from `checkpoints/<name>` (the scheduler then continues at that step)."""
        path = self.resumed_from = self.run.checkpoints / name
        state = load_checkpoint(path)
        check_config(state, self.config, path, self.run.config)
        self.restore(state)
        if name != LAST:
            self.save()        # the run continues from this state: it is the last checkpoint now
        self.saved_step = self.state.step
        # Saved at an epoch end before its evaluation: evaluate again (and log it once) in `fit`.
        self.evaluation_pending = bool(state.get("evaluation_pending", False))
        if self.env.is_main:
            forget_epochs_after(self.run, self.state.step - 1 if self.evaluation_pending else self.state.step)

    # -- the loop -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _signals(self):
        """SIGINT/SIGTERM stop the run after the current step (a checkpoint is then written)."""
        def handler(signum, frame):
            self._stop_signal = signum

        try:
            previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:          # not the main thread: no handlers
            previous = {}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def _agree_on_stop(self) -> None:
        """Under DDP a signal seen by any rank stops every rank after the same step."""
        if not self.env.enabled:
            return
        flag = torch.tensor([float(self._stop_signal or 0)], device=self.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item():
            self._stop_signal = int(flag.item())

    def _check_finite(self, logs: dict[str, float]) -> None:
        bad = {k: v for k, v in logs.items() if k.startswith("loss/") and not math.isfinite(v)}
        if self.env.enabled:    # every rank must stop at the same step, or the others hang
            flag = torch.tensor([float(bool(bad))], device=self.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            if flag.item() and not bad:
                bad = {"loss/another_rank": float("nan")}
        if bad:
            raise TrainingDiverged(
                f"non-finite loss at step {self.state.step} ({', '.join(f'{k}={v}' for k, v in bad.items())}); "
                f"{self.last_good()}: lower train.optimizer.lr or enable train.grad_clip")

    def _clip(self) -> None:
        clip_gradients(self.model, self.train_cfg.grad_clip)

    def train_one_step(self, images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
        """One optimiser step: the strategy's passes, clipping, the update, the LR schedule."""
        io = self.step_io()
        self.scheduler.step_update(self.strategy.lr_step(self.state.step, io))
        factor = self.strategy.lr_factor(self.state.step, io)
        if factor is not None:      # the strategy's own schedule (progressive shrinking's phases)
            for group in self.optimizer.param_groups:
                group["lr"] = factor * self.train_cfg.optimizer.lr * group.get("lr_scale", 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        self.model.train()
        logs = self.strategy.train_step(images, labels, self.state.step, io)
        self._check_finite(logs)
        self._clip()
        self.optimizer.step()
        self.state.step += 1
        if self.importance is not None:
            self.importance.after_step(self.state.step, self.steps_per_epoch, self.total_steps)
        logs["lr"] = self.optimizer.param_groups[0]["lr"]
        change = self.strategy.after_step(self.state.step, io)
        if change is not None:
            self.restructure(change)
            self.restructures.append((self.state.step, change))
            self.total_steps = self.strategy.total_steps(io)
        return logs

    def _batches(self):
        """(epoch, images, labels) from the current step to the end, resuming mid-epoch."""
        cfg = self.train_cfg
        while self.state.step < self.total_steps:
            epoch, offset = divmod(self.state.step, self.steps_per_epoch)
            for images, labels in self.data.train_batches(cfg.batch_size, cfg.seed, epoch, offset,
                                                          self.env.rank, self.env.world_size):
                yield (epoch, images.to(self.device, memory_format=self.memory_format, non_blocking=True),
                       labels.to(self.device, non_blocking=True))
                if self.state.step >= self.total_steps:
                    return

    @property
    def finished(self) -> bool:
        """Whether nothing is left to train or evaluate (a finished run resumed)."""
        return self.state.step >= self.total_steps and not self.evaluation_pending

    def fit(self) -> TrainState:
        """Train to `total_steps`; returns the final state.

        Raises:
            Interrupted: SIGINT/SIGTERM stopped training after the step in progress; the
                checkpoint of that step is written first.
        """
        logger = TrainLogger(self, enabled=self.env.is_main)
        last_save, last_save_time = self.state.step, time.monotonic()
        with self._signals(), logger:
            if self.evaluation_pending:     # resumed from an epoch end saved before its evaluation
                self.end_of_epoch(self.epoch_of(self.state.step), logger)
                self.save()
            for _, images, labels in self._batches():
                started = time.perf_counter()
                logs = self.train_one_step(images, labels)
                self.state.elapsed += time.perf_counter() - started
                logger.step(logs, images.shape[0] * self.env.world_size, time.perf_counter() - started)
                if self.restructures and self.restructures[-1][0] == self.state.step:
                    logger.restructured(*self.restructures[-1])
                at_epoch_end = (self.schedule_position(self.state.step) % self.steps_per_epoch == 0
                                or self.state.step == self.total_steps)
                if at_epoch_end:
                    self._evaluate_epoch(self.epoch_of(self.state.step), logger)
                due = (self.state.step - last_save >= self.train_cfg.checkpoint.every_steps
                       or time.monotonic() - last_save_time >= self.train_cfg.checkpoint.every_seconds)
                self._agree_on_stop()
                if due or at_epoch_end or self._stop_signal is not None:
                    self.save()
                    last_save, last_save_time = self.state.step, time.monotonic()
                if self._stop_signal is not None:
                    break
        if self._stop_signal is not None:
            raise Interrupted(interrupted_message(self.run, self._stop_signal, self.state.step), self._stop_signal)
        return self.state

    def _evaluate_epoch(self, epoch: int, logger: Any) -> None:
        """The epoch's checkpoint first (its steps are safe while evaluation runs; a resume from
        it evaluates again), then `end_of_epoch`."""
        self.evaluation_pending = True
        self.save()
        self.end_of_epoch(epoch, logger)

    def end_of_epoch(self, epoch: int, logger: Any) -> None:
        """Validation top-1 of the monitored archs after BN recalibration; best.pt by their mean."""
        self.evaluation_pending = False
        if self.make_evaluator is None:
            return
        evaluator = self.make_evaluator(self.state.step)
        scores = {role: evaluator.evaluate(arch, "val").top1
                  for role, arch in self.strategy.monitored_archs().items()}
        record = {"epoch": epoch, "step": self.state.step, "elapsed_s": round(self.state.elapsed, 1),
                  **{f"val_top1_{role}": score for role, score in scores.items()}}
        logger.epoch(record)
        if self.env.is_main:
            append_record(self.run.metrics, record)
        mean = sum(scores.values()) / len(scores)
        if mean > self.state.best_score:
            self.state.best_score = mean
            self.save(BEST)
