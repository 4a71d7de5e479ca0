"""The latency stage's entry: `latency_table` (`nas latency-table`), the run's per-layer table measured on a device.

`nas latency-fit` is `nas.engine.latency.fit.latency_fit`; a search reads either table, or
measured per-arch ms, through `nas.engine.latency.sources.load_latency_source`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from nas.core.errors import check_int
from nas.core.files import check_writable
from nas.engine.devices import resolve_device
from nas.engine.run import Run, build_supernet


def latency_table(run: Run, device: str | torch.device | None = None, batch: int = 1, threads: int | None = None,
                  progress: bool = True) -> Path:
    """Measure every distinct layer configuration of the run's space on `device` (None: the
    run's device) (`nas latency-table`)."""
    from nas.engine.latency.table import write_latency_table

    device = resolve_device(device) if device is not None else run.device
    check_int("batch", batch, 1)
    if threads is not None:
        check_int("threads", threads, 1)
    check_writable(run.dir.root / "latency", "RUN")      # before minutes of measuring
    supernet = build_supernet(run.config)     # latency depends on the architecture, not the weights
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(desc=f"latency {device} b{batch}", unit="layer", file=sys.stderr)

    def report(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        path, _ = write_latency_table(supernet, run.dir.root / "latency", device, batch, threads=threads,
                                      seed=run.config.train.seed, progress=report)
    finally:
        if bar is not None:
            bar.close()
    return path
