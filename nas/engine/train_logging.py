"""Training logs: tqdm progress on stderr and TensorBoard scalars under `runs/<name>/tb`."""
from __future__ import annotations

import signal
import sys
from typing import Any

import torch
from tqdm import tqdm

from nas.engine.run_dir import RunDir
from supernets.base import Restructure


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

    def interrupted(self, signum: int) -> None:
        if self.enabled:
            tqdm.write(interrupted_message(self.trainer.run, signum, self.trainer.state.step), file=sys.stderr)


def matrix_image(matrix: torch.Tensor, cell: int = 16) -> torch.Tensor:
    """A matrix as a grey image in [0, 1] (divided by its largest entry), `cell` pixels per entry."""
    matrix = matrix.detach().float().cpu()
    scaled = matrix / matrix.max() if matrix.max() > 0 else matrix
    return scaled.repeat_interleave(cell, 0).repeat_interleave(cell, 1)


def interrupted_message(run: RunDir, signum: int, step: int) -> str:
    """The line printed when a signal stops training."""
    name = signal.Signals(signum).name
    return (f"{name}: stopped at step {step}, checkpoint saved; resume with: "
            f"nas train {run.config} --name {run.name} --runs-dir {run.root.parent} --resume")
