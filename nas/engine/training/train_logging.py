"""Training logs: tqdm progress on stderr and TensorBoard under `runs/<name>/tb`: scalars, the
resolved config as text, and the run's hyperparameters with its final accuracies (HPARAMS tab)."""
from __future__ import annotations

import signal
import sys
from typing import Any

import torch
from tqdm import tqdm

from nas.core import yaml_io
from nas.core.wording import command
from nas.engine.run_dir import RunDir
from supernets.base import Restructure

HPARAM_TYPES = (bool, int, float, str)


class TrainLogger:
    """Progress bar and TensorBoard writer of one training run (rank 0 only)."""

    def __init__(self, trainer: Any, enabled: bool = True):
        self.trainer, self.enabled = trainer, enabled
        self.bar = None
        self.writer = None
        self._images = 0
        self._seconds = 0.0

    def __enter__(self) -> "TrainLogger":
        if self.enabled:
            from torch.utils.tensorboard import SummaryWriter

            t = self.trainer
            self.writer = SummaryWriter(str(t.run.tb))
            self.bar = tqdm(total=t.total_steps, initial=t.state.step, desc=f"train {t.run.name}",
                            file=sys.stderr, disable=not t.progress, dynamic_ncols=True, leave=True)
            # indented: TensorBoard renders text as Markdown, and this keeps the YAML verbatim
            text = "\n".join("    " + line for line in yaml_io.dumps(t.config.to_dict()).splitlines())
            self.writer.add_text("config", text, t.state.step)
            described = t.strategy.describe()
            if described:
                self.writer.add_text("train/strategy", described, t.state.step)
                tqdm.write(described, file=sys.stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()

    def step(self, logs: dict[str, float], images: int, seconds: float) -> None:
        if not self.enabled:
            return
        self._images += images
        self._seconds += seconds
        step = self.trainer.state.step
        if step % self.trainer.train_cfg.log_every == 0 or step == self.trainer.total_steps:
            rate = self._images / max(self._seconds, 1e-9)
            for key, value in logs.items():
                self.writer.add_scalar(f"train/{key}", value, step)
            self.writer.add_scalar("train/images_per_s", rate, step)
            self._images, self._seconds = 0, 0.0
            losses = {k.split("/", 1)[1]: v for k, v in logs.items() if k.startswith("loss/")}
            self.bar.set_postfix({**{k: f"{v:.3f}" for k, v in losses.items()}, "img/s": f"{rate:.0f}"},
                                 refresh=False)
        self.bar.update(1)

    def epoch(self, record: dict) -> None:
        if not self.enabled:
            return
        for key, value in record.items():
            if key.startswith("val_top1_"):
                self.writer.add_scalar(f"val/top1_{key[len('val_top1_'):]}", value, record["step"])
        scores = "  ".join(f"{k[len('val_top1_'):]} {v:.4f}" for k, v in record.items() if k.startswith("val_top1_"))
        tqdm.write(f"epoch {record['epoch']} step {record['step']}: val top-1 {scores}", file=sys.stderr)
        if record["step"] == self.trainer.total_steps:
            self.hparams(record)

    def hparams(self, record: dict) -> None:
        """The config's scalar keys as hyperparameters, with the final validation top-1 of each
        monitored arch (`hparams/val_top1_min`, `..._max`) as their metrics."""
        from torch.utils.tensorboard.summary import hparams

        metrics = {f"hparams/{k}": v for k, v in record.items() if k.startswith("val_top1_")}
        experiment, start, end = hparams(flat_hparams(self.trainer.config.to_dict()), metrics)
        for summary in (experiment, start, end):
            self.writer.file_writer.add_summary(summary)
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, record["step"])

    def restructured(self, step: int, change: Restructure) -> None:
        """The strategy changed its model's structure at `step` (e.g. a few-shot split): its
        reason as text, its scalars, and its matrices as grey images (largest entry white)."""
        if not self.enabled:
            return
        self.writer.add_text("train/restructure", change.reason, step)
        for tag, value in change.scalars.items():
            self.writer.add_scalar(tag, value, step)
        for tag, matrix in change.images.items():
            self.writer.add_image(tag, matrix_image(matrix), step, dataformats="HW")
        tqdm.write(f"step {step}: {change.reason}", file=sys.stderr)


def flat_hparams(data: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested config with the values TensorBoard accepts (lists as text; None left out)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flat_hparams(value, f"{prefix}{key}."))
        elif isinstance(value, HPARAM_TYPES):
            flat[f"{prefix}{key}"] = value
        elif isinstance(value, (list, tuple)):
            flat[f"{prefix}{key}"] = str(value)
    return flat


def matrix_image(matrix: torch.Tensor, cell: int = 16) -> torch.Tensor:
    """A matrix as a grey image in [0, 1] (divided by its largest entry), `cell` pixels per entry."""
    matrix = matrix.detach().float().cpu()
    scaled = matrix / matrix.max() if matrix.max() > 0 else matrix
    return scaled.repeat_interleave(cell, 0).repeat_interleave(cell, 1)


def interrupted_message(run: RunDir, signum: int, step: int) -> str:
    """What the CLI prints (after `stopped:`) when a signal stops training."""
    name = signal.Signals(signum).name
    return (f"{name} at step {step}, checkpoint saved; resume with: "
            + command("train", run.config, name=run.name, runs_dir=run.root.parent, resume=True))
