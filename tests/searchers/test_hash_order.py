"""Spaces and searchers draw the same archs in every process: nothing depends on the iteration order
of sets of strings, which changes with PYTHONHASHSEED, so a killed and resumed search (a new
process) continues exactly as an uninterrupted one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.searchers.stub import search_dir  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def _start(hash_seed: int, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed), OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tests.searchers.hash_probe", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(probe: subprocess.Popen) -> dict | list:
    out, err = probe.communicate()
    assert probe.returncode == 0, err[-3000:]
    return json.loads(out)


@pytest.mark.slow
def test_spaces_and_searchers_ignore_the_hash_seed_and_a_resumed_search_continues_exactly(search_dir):
    first = _start(1, "all", str(search_dir / "a"))          # two processes at once: one each core
    second = _start(2, "all", str(search_dir / "b"), str(search_dir / "resumed"), "6")   # stopped after 6
    first, second = _result(first), _result(second)
    resumed = _result(_start(3, "evolution", str(search_dir / "resumed"), "12"))
    assert all(first.values()) and first.keys() == second.keys() - {"resumable"}
    for key in first:
        assert first[key] == second[key], key
    straight = first["search:evolution"]
    assert len(straight) == 12 and second["resumable"] == straight[:6] and resumed == straight
