"""Run under torchrun by test_streaming_ddp.py: a streamed DDP training on a PNG tree that records,
per rank and step, a digest of every image row of the rank's batch."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nas import api  # noqa: E402
from nas.core.config import load_config  # noqa: E402
from nas.engine.training.trainer import Trainer  # noqa: E402


def digest(row) -> str:
    return hashlib.sha1(row.contiguous().numpy().tobytes()).hexdigest()[:16]


def main() -> None:
    out, config_path = Path(sys.argv[1]), sys.argv[2]
    seen: list[list[str]] = []
    original = Trainer.train_one_step

    def recording(self, images, labels):
        seen.append([digest(row) for row in images.contiguous()])
        return original(self, images, labels)

    Trainer.train_one_step = recording
    api.train(load_config(config_path), name="ddp", runs_dir=out, progress=False, device="cpu")
    (out / f"rows-{os.environ['RANK']}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
