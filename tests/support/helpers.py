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
from nas.engine.training.summary import TrainSummary
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer

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



def tiny_trainer(config, splits, root: Path) -> Trainer:
    """A quiet CPU `Trainer` of `config`'s freshly built strategy on in-memory `splits`, writing under `root`."""
    from nas import api

    return Trainer(config, api.build_strategy(config), splits, RunDir(root), progress=False)


def resumed_api_run(make_config: Callable[[], object], runs_dir: Path, stop_at: int, monkeypatch) -> tuple[dict, dict]:
    """`straight_and_resumed` of two `nas.api.train` runs of `make_config()` under `runs_dir`
    (on the CPU); the resumed run reloads its own config.yaml."""
    from nas import api
    from nas.core.config import load_config

    def train(name: str, resume: bool) -> TrainSummary:
        config = load_config(runs_dir / name / "config.yaml") if resume else make_config()
        return api.train(config, name=name, resume=resume, runs_dir=runs_dir, progress=False, device="cpu")

    return straight_and_resumed(train, stop_at, monkeypatch)


def torchrun(script: str, *args: str, cwd: Path, nproc: int = 2) -> str:
    """Run `tests/support/<script>` under torchrun with `nproc` one-thread CPU processes and return
    its stderr; fails the test with the end of stderr if the job fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(ROOT / "tests" / "support" / script), *args]
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def kill_standalone_at(monkeypatch, call: int) -> list[int]:
    """Make the standalone trainings' `train_step` raise KeyboardInterrupt at its `call`-th call
    (counted from 1), as a killed process stops there; returns the list its calls are counted in."""
    from nas.engine.fidelity import standalone

    calls: list[int] = []
    real_step = standalone.train_step

    def killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    monkeypatch.setattr(standalone, "train_step", killed)
    return calls
