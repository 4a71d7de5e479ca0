"""Timing a static model: median and p90 milliseconds of a forward pass, and where they were measured.

`measure` times a static model after warm-up runs: `time.perf_counter` around each run with
a fixed thread count on CPU, CUDA events with synchronisation on GPUs; it reports median
and p90 (nearest rank). Every figure carries a `DeviceRecord` (device, CPU model or GPU
name, torch version, threads, dtype, batch size, memory format).
"""
from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from nas.core.errors import SearchError
from nas.core.wording import command
from nas.engine.devices import cpu_model, resolve_device


@dataclass(frozen=True)
class DeviceRecord:
    """Where and how a latency was measured."""

    device: str           # "cpu", "cuda:0"
    name: str             # CPU model or GPU name
    torch: str
    threads: int
    dtype: str            # "float32"
    batch_size: int
    channels_last: bool

    def rebuild(self) -> str:
        """The command that measures a table for this device and batch (a `nas.core.wording` marker)."""
        return command("latency-table", "RUN", device=self.device, batch=self.batch_size)


@dataclass(frozen=True)
class LatencyRecord:
    """One measurement: milliseconds per forward pass of one batch."""

    median_ms: float
    p90_ms: float
    samples: list[float]
    device: DeviceRecord

    def to_dict(self) -> dict[str, Any]:
        return {"median_ms": self.median_ms, "p90_ms": self.p90_ms, "device": asdict(self.device)}


def device_record(device: str | torch.device, threads: int | None = None, dtype: torch.dtype = torch.float32,
                  batch_size: int = 1, channels_last: bool = True) -> DeviceRecord:
    """The description stored beside every latency measured on `device`."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    return DeviceRecord(str(device), name, torch.__version__,
                        threads if threads is not None else torch.get_num_threads(),
                        str(dtype).removeprefix("torch."), batch_size, channels_last)


def _nearest_rank(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def measure(model: nn.Module, device: str | torch.device = "cpu", batch_size: int = 1,
            input_shape: Sequence[int] = (3, 224, 224), dtype: torch.dtype = torch.float32,
            warmup: int = 10, repeats: int = 50, threads: int | None = None,
            channels_last: bool = True) -> LatencyRecord:
    """Median and p90 milliseconds of `model` on a random `(batch_size, *input_shape)` input.

    Args:
        model: A static module; a copy is moved to `device` and `dtype` (the caller's is untouched).
        device: "cpu" or a CUDA device.
        batch_size: Images per forward pass.
        input_shape: One input without the batch dimension.
        dtype: Parameter and input dtype.
        warmup: Untimed runs first.
        repeats: Timed runs.
        threads: CPU threads during the measurement (None: torch's current setting).
        channels_last: Run 4-D tensors in channels-last memory format (much faster for
            depthwise convolutions on CPU).
    """
    device = resolve_device(device)
    if repeats < 1 or warmup < 0 or batch_size < 1:
        raise SearchError(f"measure: needs repeats >= 1, warmup >= 0, batch >= 1; "
                          f"got {repeats}, {warmup}, {batch_size}")
    record = device_record(device, threads, dtype, batch_size, channels_last)
    model = copy.deepcopy(model).eval().to(device=device, dtype=dtype)
    x = torch.randn(batch_size, *input_shape, device=device, dtype=dtype)
    if channels_last and x.dim() == 4:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with thread_count(record.threads), torch.inference_mode(), on_device:   # events record on the current device
        timer = _time_cuda if device.type == "cuda" else _time_cpu
        samples = timer(model, x, warmup, repeats)
    return LatencyRecord(statistics.median(samples), _nearest_rank(samples, 0.9), samples, record)


@contextlib.contextmanager
def thread_count(count: int) -> Iterator[None]:
    """torch's thread count set to `count` inside (switching costs tens of ms: only if needed)."""
    previous = torch.get_num_threads()
    if count != previous:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if count != previous:
            torch.set_num_threads(previous)


def _time_cpu(model: nn.Module, x: torch.Tensor, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        model(x)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(x)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _time_cuda(model: nn.Module, x: torch.Tensor, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        model(x)
    torch.cuda.synchronize(x.device)
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(x)
        end.record()
        torch.cuda.synchronize(x.device)
        samples.append(start.elapsed_time(end))
    return samples
