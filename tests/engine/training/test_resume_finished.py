"""`nas train --resume` on a finished run trains nothing and records no new start."""
from __future__ import annotations

from nas import api
from tests.support.safety import copy_run


def test_resuming_a_finished_run_leaves_its_environment_record_alone(trained, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path)
    before = (runs / "tiny" / "environment.json").read_bytes()
    checkpoint = (runs / "tiny" / "checkpoints" / "last.pt").read_bytes()
    config = api.resume_config("tiny", (), runs, "last.pt")
    api.train(config, name="tiny", resume=True, runs_dir=runs, progress=False)
    assert (runs / "tiny" / "environment.json").read_bytes() == before
    assert (runs / "tiny" / "checkpoints" / "last.pt").read_bytes() == checkpoint
