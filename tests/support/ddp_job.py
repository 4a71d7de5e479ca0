"""Run under torchrun by test_distributed.py: a tiny DDP training that records, per rank, the
arch ids trained at every step and the (rank, world_size) its strategy's `StepIO`s carried."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nas import api  # noqa: E402
from nas.core.arch import arch_id  # noqa: E402
from nas.core.config import load_config  # noqa: E402
from nas.engine.training.trainer import Trainer  # noqa: E402
from supernets.one_shot import OneShotStrategy  # noqa: E402
from tests.support.tiny import tiny_config  # noqa: E402


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    seen: list[str] = []
    inside = []
    activate, train_step = OneShotStrategy.activate, OneShotStrategy.train_step

    def recording(self, arch):
        canonical = activate(self, arch)
        if inside:
            seen.append(arch_id(canonical))
        return canonical

    def step(self, *args):
        inside.append(True)
        try:
            return train_step(self, *args)
        finally:
            inside.clear()

    OneShotStrategy.activate, OneShotStrategy.train_step = recording, step
    places, step_io = set(), Trainer.step_io

    def recording_io(self):
        io = step_io(self)
        places.add((io.rank, io.world_size))
        return io

    Trainer.step_io = recording_io
    config = load_config(tiny_config(steps=steps))
    api.train(config, name="ddp", runs_dir=out, progress=False, device="cpu")
    (out / f"archs-{os.environ['RANK']}.json").write_text(json.dumps(seen))
    (out / f"io-{os.environ['RANK']}.json").write_text(json.dumps(sorted(places)))


if __name__ == "__main__":
    main()
