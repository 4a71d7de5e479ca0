"""A tiny trained run shared by the tests that break things on purpose (they copy it to change it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from nas import api
from nas.core.config import load_config
from tests.support.tiny import tiny_config


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Path:
    """A runs folder holding `tiny`, trained 8 steps (last.pt and best.pt); never change it in place."""
    runs = tmp_path_factory.mktemp("shared-runs")
    api.train(load_config(tiny_config(steps=8)), name="tiny", runs_dir=runs, progress=False)
    return runs
