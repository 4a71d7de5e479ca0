"""`model.onnx`: a static model written as ONNX (torch's dynamo exporter) and checked with onnxruntime.

Shared by the export stage (`nas export --format onnx`) and the latency stage (`nas
latency-probe`, whose subnets are timed on a target device). Writing needs the `onnx` extra
(onnx and onnxscript); onnxruntime, where installed, checks the file against the model.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from nas.core.files import atomic_file

MAX_BATCH = 1 << 16
# What `model.onnx` needs: torch's ONNX exporter imports onnx and onnxscript.
ONNX_PACKAGES = ("onnx", "onnxscript")


def missing_onnx_packages() -> list[str]:
    """The packages of `ONNX_PACKAGES` that are not installed."""
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def save_onnx(static: nn.Module, example: torch.Tensor, path: Path) -> float | None:
    """Write `model.onnx` (dynamic batch) through a temporary file; returns the largest |difference|
    between onnxruntime and `static` on `example`, or None without onnxruntime."""
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    program = torch.onnx.export(static.eval(), (example,), dynamo=True, dynamic_shapes={"x": {0: batch}},
                                external_data=False, verbose=False)   # its progress lines would break --json
    with atomic_file(path, "wb") as f:
        f.write(program.model_proto.SerializeToString())
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {session.get_inputs()[0].name: example.numpy()})
    with torch.no_grad():
        return (torch.from_numpy(output) - static(example)).abs().max().item()


def save_checked_onnx(static: nn.Module, example: torch.Tensor, path: Path, tolerance: float,
                      relative: float) -> float | None:
    """`save_onnx`, then raise `RuntimeError` (an internal error: the file would not be the model)
    where onnxruntime differs from `static` by more than `tolerance` or `relative` times its
    largest output (at least 1): onnxruntime's kernels sum in other orders."""
    difference = save_onnx(static, example, path)
    with torch.no_grad():
        allowed = max(tolerance, relative * max(1.0, static(example).abs().max().item()))
    if difference is not None and not difference <= allowed:
        raise RuntimeError(f"{path.name} differs from the export by {difference:.3g} (> {allowed:.3g})")
    return difference
