"""Two gloo ranks on one machine for a test: `two_gloo_ranks(job, tmp_path)`.

A module of its own, importing nothing of nas: each spawned rank imports this module and its
job's, so a light job (tests/support/importance_ranks.py) starts in about half the CPU time of
one that also loads the trainer, timm and torchvision (tests/support/helpers.py imports them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable


def two_gloo_ranks(job: Callable[[int, str, dict], None], tmp_path: Path, timeout: float = 300) -> dict:
    """`job(rank, store, out)` in two spawned processes (a gloo group on the file `store`, one
    thread each); checks both exit cleanly and returns what each put in `out[rank]`.

    A group whose ranks fail to connect (gloo's full-mesh TCP pairing refused, seen once under a
    loaded pytest-xdist run) is formed again once on a fresh store; an error in `job` is not retried.
    """
    for attempt in range(2):
        out, exitcodes = _start_ranks(job, str(tmp_path / f"store{attempt}"), timeout)
        if exitcodes == [0, 0] or not any(f"unconnected{rank}" in out for rank in range(2)):
            break
    assert exitcodes == [0, 0], out
    return out


def _start_ranks(job: Callable[[int, str, dict], None], store: str, timeout: float) -> tuple[dict, list]:
    import multiprocessing as mp

    context = mp.get_context("spawn")
    with context.Manager() as manager:
        out = manager.dict()
        procs = [context.Process(target=_gloo_rank, args=(job, rank, store, out)) for rank in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=timeout)
        for proc in procs:
            if proc.is_alive():       # its peer failed and it waits for the group
                proc.kill()
                proc.join()
        return dict(out), [proc.exitcode for proc in procs]


def _gloo_rank(job: Callable[[int, str, dict], None], rank: int, store: str, out: dict) -> None:
    from datetime import timedelta

    import torch

    torch.set_num_threads(1)
    try:
        torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                                             timeout=timedelta(seconds=120))
    except RuntimeError as error:
        out[f"unconnected{rank}"] = str(error)
        raise
    try:
        job(rank, store, out)
    finally:
        torch.distributed.destroy_process_group()
