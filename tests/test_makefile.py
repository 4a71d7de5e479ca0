"""The Makefile's `make run`: the run folder follows CONFIG, and each command names a run or a config unambiguously."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def planned(*argv: str) -> list[str]:
    """The commands `make -n` would run (BIN set so that nothing is installed)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed (apt-get install make)")
    done = subprocess.run(["make", "-n", "--no-print-directory", *argv, "BIN=bin"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("bin/nas")]


def test_make_run_with_another_config_trains_and_exports_its_own_run():
    lines = planned("run-supernet", "CONFIG=fashion_mnist_cell201")
    assert any(line.startswith("bin/nas search fashion_mnist_cell201 ") for line in lines), lines
    assert all("fashion_mnist_mbv3" not in line for line in lines), lines
    assert "bin/nas export runs/fashion_mnist_cell201 --family runs/fashion_mnist_cell201/search/make-run-family " \
           "--finetune 25%" in lines


def test_make_runs_cheaper_path_spells_a_shipped_config_as_a_file_and_a_config_path_as_given():
    assert planned("run-alone", "CONFIG=fashion_mnist_cell201")[1] == \
        "bin/nas export fashion_mnist_cell201.yaml --family runs/fashion_mnist_cell201/search/make-run-family"
    assert planned("run-alone", "CONFIG=configs/my.yaml")[1] == \
        "bin/nas export configs/my.yaml --family runs/my/search/make-run-family"
