"""Where a training run stands (`nas train --json`, `nas.train_summary`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nas.core.errors import RunError
from nas.core.jsonl import read_records
from nas.engine.checkpoint import LAST, checkpoint_step
from nas.engine.json_result import JsonResult
from nas.engine.run_dir import DEFAULT_RUNS_DIR, RunDir, find_run


@dataclass(frozen=True)
class TrainSummary(JsonResult):
    """Where a training run stands: its last step and the validation top-1 of its monitored
    archs at the last epoch end (`nas train --json`)."""

    run: Path
    name: str
    step: int
    epoch: int | None
    val_top1: dict[str, float]
    checkpoint: Path | None

    @property
    def dir(self) -> RunDir:
        """The run's folder layout (`checkpoints`, `metrics`, `config`, ...)."""
        return RunDir(self.run)


def train_summary(run: RunDir | str | Path, runs_dir: str | Path = DEFAULT_RUNS_DIR) -> TrainSummary:
    """Where a run stands: its last checkpoint's step and the last epoch's validation top-1 of the
    monitored archs from `metrics.jsonl` (what `nas train --json` prints)."""
    run = run if isinstance(run, RunDir) else find_run(run, runs_dir)
    records = read_records(run.metrics, RunError)
    last: dict[str, Any] = records[-1] if records else {}
    scores = {key[len("val_top1_"):]: value for key, value in last.items() if key.startswith("val_top1_")}
    path = run.checkpoints / LAST
    step = checkpoint_step(path) if path.is_file() else 0
    return TrainSummary(run.root, run.name, step, last.get("epoch"), scores, path if path.is_file() else None)
