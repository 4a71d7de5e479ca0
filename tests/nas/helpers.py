"""Test helpers shared by the training tests: an interrupted-then-resumed run, a torchrun job."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from nas.core.errors import Interrupted
from nas.engine.checkpoint import load_checkpoint
from nas.engine.results import TrainSummary
from nas.engine.run_dir import RunDir
from nas.engine.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


def straight_and_resumed(train: Callable[[str, bool], TrainSummary], stop_at: int,
                         monkeypatch) -> tuple[dict, dict]:
    """Last checkpoints of run `straight` and of run `resumed`, which SIGINT stops after step
    `stop_at` (checked: it raises `Interrupted` with exit code 130, its checkpoint is at that
    step) and `train(name, resume=True)` finishes."""
    straight = train("straight", False).dir
    original = Trainer.train_one_step

    def interrupt(self, images, labels):
        logs = original(self, images, labels)
        if self.state.step == stop_at:
            os.kill(os.getpid(), signal.SIGINT)
        return logs

    monkeypatch.setattr(Trainer, "train_one_step", interrupt)
    with pytest.raises(Interrupted, match=f"SIGINT at step {stop_at}, checkpoint saved") as stopped:
        train("resumed", False)
    assert stopped.value.exit_code == 130
    interrupted = RunDir(straight.root.with_name("resumed"))
    assert load_checkpoint(interrupted.checkpoints / "last.pt")["step"] == stop_at
    monkeypatch.setattr(Trainer, "train_one_step", original)
    train("resumed", True)
    return load_checkpoint(straight.checkpoints / "last.pt"), load_checkpoint(interrupted.checkpoints / "last.pt")


def torchrun(script: str, *args: str, cwd: Path, nproc: int = 2) -> None:
    """Run `tests/nas/<script>` under torchrun with `nproc` one-thread CPU processes; fails the
    test with the end of stderr if the job fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(ROOT / "tests" / "nas" / script), *args]
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
