"""A stub evaluator with a known optimum, and a search worker for subprocess tests.

`val_top1 = 0.95 - 0.05 x (choices differing from TARGET)`: the unique optimum is TARGET, the
most expensive feasible arch of the small mobilenetv3 space under `MAX_MACS` (ties broken by
arch_id), so a searcher must respect the budget to get close to it.

`search_dir` is a pytest fixture (import it into a test module): an empty directory on
/dev/shm where there is one, because Optuna's journal storage fsyncs every write (about 1 ms
on this disk, some 20 writes per trial).

Run as `python -m tests.searchers.stub --out DIR --searcher NAME --trials N [...]` to start
one search worker (one thread) in a subprocess. Tests synchronise with workers through files,
never through durations: `--meet N` makes the first evaluation of each worker wait until N
workers have begun one (so every worker finishes a trial), and `--hold-after K` makes the
evaluation after K finished ones announce itself (`DIR/holding`) and block until the process
is killed (so a kill lands inside an evaluation). `--grace-period S` shortens how long a
silent worker's trial stays RUNNING (heartbeats every S/6 s), for the tests of heartbeats.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from nas.core.arch import Arch, arch_id
from tests.conftest import make_space

MAX_MACS = 1_000_000
_SHM = Path("/dev/shm")
_ROOT = Path(__file__).resolve().parents[2]


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


def untrained_generator(space):
    """An untrained architecture generator of `space`, what `searcher: generator` reads from a
    run trained with the shiftnas sampler's generator (its proposals are seeded draws)."""
    from supernets.arch_generator import GeneratorTrainer
    from supernets.shiftnas import ShiftNASOptions
    return GeneratorTrainer(space, ShiftNASOptions(), seed=0)


def target_arch(space, max_macs: float = MAX_MACS) -> Arch:
    """The most expensive feasible arch (ties: smallest arch_id)."""
    feasible = [a for a in space.enumerate() if space.macs(a) <= max_macs]
    return max(feasible, key=lambda a: (space.macs(a), [-ord(c) for c in arch_id(a)]))


class StubEvaluator:
    """`val_top1` falls 0.05 per choice that differs from `target`; records every call.

    `before(n)`, if given, runs before the evaluation of call number n (from 0).
    """

    def __init__(self, space, target: Arch, sleep: float = 0.0, before: Callable[[int], None] | None = None):
        self.space, self.target, self.sleep, self.before = space, space.canonical(target), sleep, before
        self.calls: list[str] = []

    def __call__(self, arch: Arch) -> dict[str, Any]:
        arch = self.space.canonical(arch)
        if self.before is not None:
            self.before(len(self.calls))
        self.calls.append(arch_id(arch))
        if self.sleep:
            time.sleep(self.sleep)
        distance = sum(arch[k] != v for k, v in self.target.items())
        return {"val_top1": 0.95 - 0.05 * distance, "distance": distance}


def start_worker(out_dir: Path, *args: str) -> subprocess.Popen:
    """A search worker (`main` below) in a subprocess with one thread, writing into `out_dir`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(_ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.searchers.stub", "--out", str(out_dir), *args],
                            cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(workers: list[subprocess.Popen]) -> None:
    """Wait for every worker; each must exit 0 (its stderr's tail is shown otherwise)."""
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-2000:]


def load_study(url: str, out_dir: Path, name: str):
    """The Optuna study `name` of storage `url`, opened afresh (a new connection)."""
    import optuna

    from searchers.optuna_storage import open_storage
    return optuna.load_study(study_name=name, storage=open_storage(url, out_dir))


def results(out_dir: Path) -> list[dict]:
    """The records of `out_dir/results.jsonl` (every worker appends to it), or []."""
    path = out_dir / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def stub_search(out: Path, searcher: str, trials: int, evaluate: StubEvaluator | None = None, **request: Any):
    """A search of the small space under `MAX_MACS` by `evaluate` (default: a fresh
    `StubEvaluator`) in this process; `request`: more `SearchRequest` fields (seed, storage, ...)."""
    from nas.engine.searching.costs import Constraints
    from nas.engine.searching.loop import run_search
    from nas.engine.searching.request import SearchRequest
    space = small_space()
    evaluate = evaluate if evaluate is not None else StubEvaluator(space, target_arch(space))
    return run_search(space, evaluate, SearchRequest(searcher, out, trials=trials, constraints=Constraints(
        max_macs=MAX_MACS), progress=False, tensorboard=False, **request))


def meet(folder: Path, worker: int, count: int) -> None:
    """Say that `worker` has begun an evaluation, then wait until `count` workers have."""
    (folder / f"meet-{worker}").touch()
    while len(list(folder.glob("meet-*"))) < count:
        time.sleep(0.01)


def hold(folder: Path) -> None:
    """Say that an evaluation is under way (`folder/holding`), then block until killed."""
    (folder / "holding").touch()
    threading.Event().wait()


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
    parser.add_argument("--meet", type=int, default=0, help="workers to wait for before the first evaluation")
    parser.add_argument("--hold-after", type=int, help="block inside the evaluation after this many")
    parser.add_argument("--grace-period", type=float, help="seconds a silent worker's trial stays RUNNING")
    args = parser.parse_args(argv)
    if args.grace_period is not None:
        from searchers import optuna_storage
        optuna_storage.GRACE_PERIOD = args.grace_period
        optuna_storage.HEARTBEAT_INTERVAL = args.grace_period / 6
    out = Path(args.out)

    def before(calls: int) -> None:
        if args.meet and calls == 0:
            meet(out, args.worker, args.meet)
        if args.hold_after is not None and calls == args.hold_after:
            hold(out)

    import torch
    torch.set_num_threads(1)
    from nas.engine.searching import pareto_report
    pareto_report.plot_pareto = lambda *_args, **_kwargs: None   # unread here; matplotlib costs 1.5 s of CPU
    space = small_space()
    result = stub_search(out, args.searcher, args.trials, StubEvaluator(space, target_arch(space), args.sleep, before),
                         seed=args.seed, storage=args.storage, study=args.study, worker=args.worker)
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
