"""A stub evaluator with a known optimum, and a search worker for subprocess tests.

`val_top1 = 0.95 - 0.05 x (choices differing from TARGET)`: the unique optimum is TARGET, the
most expensive feasible arch of the small mobilenetv3 space under `MAX_MACS` (ties broken by
arch_id), so a searcher must respect the budget to get close to it.

`search_dir` is a pytest fixture (import it into a test module): an empty directory on
/dev/shm where there is one, because Optuna's journal storage fsyncs every write (about 1 ms
on this disk, some 20 writes per trial).

Run as `python -m tests.searchers.stub --out DIR --searcher NAME --trials N [...]` to start
one search worker (one thread) in a subprocess.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from nas.core.arch import Arch, arch_id
from tests.conftest import make_space

MAX_MACS = 1_000_000
_SHM = Path("/dev/shm")


@pytest.fixture
def search_dir(tmp_path: Path):
    """An empty directory, on tmpfs when available (removed afterwards)."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK) and shutil.disk_usage(_SHM).free > 1 << 28:
        path = Path(tempfile.mkdtemp(prefix="nas-search-", dir=_SHM))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


def small_space():
    """The small mobilenetv3 space every searcher test uses (1600 distinct archs, 478 feasible)."""
    return make_space("mobilenetv3", small=True)


def target_arch(space, max_macs: float = MAX_MACS) -> Arch:
    """The most expensive feasible arch (ties: smallest arch_id)."""
    feasible = [a for a in space.enumerate() if space.macs(a) <= max_macs]
    return max(feasible, key=lambda a: (space.macs(a), [-ord(c) for c in arch_id(a)]))


class StubEvaluator:
    """`val_top1` falls 0.05 per choice that differs from `target`; records every call."""

    def __init__(self, space, target: Arch, sleep: float = 0.0):
        self.space, self.target, self.sleep = space, space.canonical(target), sleep
        self.calls: list[str] = []

    def __call__(self, arch: Arch) -> dict[str, Any]:
        arch = self.space.canonical(arch)
        self.calls.append(arch_id(arch))
        if self.sleep:
            time.sleep(self.sleep)
        distance = sum(arch[k] != v for k, v in self.target.items())
        return {"val_top1": 0.95 - 0.05 * distance, "distance": distance}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stub")
    parser.add_argument("--out", required=True)
    parser.add_argument("--searcher", required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--storage")
    parser.add_argument("--study")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from nas.engine.search_runner import Constraints, run_search
    space = small_space()
    result = run_search(space, StubEvaluator(space, target_arch(space), args.sleep), searcher=args.searcher,
                        constraints=Constraints(max_macs=MAX_MACS), trials=args.trials, seed=args.seed,
                        out_dir=Path(args.out), storage=args.storage, study=args.study, worker=args.worker,
                        progress=False, tensorboard=False)
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
