"""Export a subnet: a static module of plain torch layers, checked and saved.

Files, in the output directory (docs/exports.md): `model.pt2` (torch.export of the eval-mode
model, dynamic batch), `weights.safetensors`, `arch.yaml`, `metrics.json`, `timm.json` where
the space maps to a timm model (with a `pretrained_cfg` giving timm the export's
preprocessing), and `model.onnx` on request (the `onnx` extra: onnx and onnxscript to write
it, onnxruntime to check it). They are written into a temporary folder beside the output
directory, which then replaces it in one rename: an interrupted export leaves the previous
export (or nothing) in place, never a mix. An existing output directory is replaced only if
it holds nothing but export files.
`export_subnet` (what `nas.export_subnet` is) exports a trained run's subnet after recalibrating
its BN statistics and evaluating it (an imported run without data: as imported, unevaluated,
`without_data.py`).

The static model is checked against the supernet on the supernet's device (in exact float32:
no TF32 on CUDA), then saved from the CPU, so the files load on any machine.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors.torch import save
from torch import nn

from nas.core.arch import arch_id, write_arch_file
from nas.core.errors import NasError, PathError
from nas.core.locks import folder_lock
from nas.core.files import atomic_dir, atomic_file, check_writable, write_json
from nas.core.preprocessing import preprocessing_metadata
from nas.engine.counting import counted_flops, parameter_count
from nas.engine.devices import exact_float32, module_device
from nas.engine.json_result import JsonResult
from nas.engine.onnx_file import MAX_BATCH, missing_onnx_packages, save_checked_onnx
from nas.core.config import FinetuneConfig
from nas.engine.export.shipped import below_cheaper, cheaper_subnets, measured_by_search, search_folder, write_shipped
from nas.engine.export.shipped_record import foreign_export, other_weights, search_source
from nas.engine.export.stopping import stopped_by_sigterm
from nas.engine.run import Run, resolve_arch
from search_spaces.base import Supernet

EXPORT_FILES = ("model.pt2", "weights.safetensors", "arch.yaml", "metrics.json", "timm.json", "model.onnx")


def check_export_dir(out_dir: str | Path, flag: str, params: int = 0) -> Path:
    """Raise `PathError` naming `flag` unless an export can replace `out_dir`: a new folder, an
    empty one or an earlier export, in a writable place with room for `params` parameters twice."""
    out_dir = Path(os.path.abspath(out_dir))
    if out_dir.exists():
        if not out_dir.is_dir():
            raise PathError(f"{flag}: {out_dir} is a file, not a folder")
        others = sorted(p.name for p in out_dir.iterdir() if p.name not in EXPORT_FILES)
        if others:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise PathError(f"{flag}: {out_dir} holds files that are not an export ({shown}); choose a new or "
                            f"empty folder")
    check_writable(out_dir.parent, flag, need_bytes=export_bytes(params))
    return out_dir


def export_bytes(params: int) -> int:
    """Room an export of `params` parameters asks for: its float32 weights, twice (weights and
    program), with the old export beside the new while it is replaced."""
    return 2 * 4 * params * 2


def same_file_system(a: Path, b: Path) -> bool:
    """Whether the folders `a` and `b` (or their nearest existing parents) lie on one file system."""
    def device(path: Path) -> int:
        path = Path(os.path.abspath(path))
        while not path.exists() and path.parent != path:
            path = path.parent
        return path.stat().st_dev

    return device(a) == device(b)


# Off the CPU the supernet and the export run different kernels (sliced vs contiguous weights),
# which sum in other orders: allow float32 rounding relative to the size of the outputs.
DEVICE_TOLERANCE = 1e-4
FORMATS = ("pt2", "onnx")


def export_program(model: nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    """torch.export of an eval-mode model with a dynamic batch dimension."""
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    return torch.export.export(model.eval(), (example,), dynamic_shapes={"x": {0: batch}})


def check_format(export_format: str) -> None:
    """Fail before any work when `export_format` is unknown or its packages are missing."""
    if export_format not in FORMATS:
        raise NasError(f"export_format: unknown format '{export_format}'; choose one of {', '.join(FORMATS)}")
    if export_format == "onnx":
        missing = missing_onnx_packages()
        if missing:
            raise NasError(f"export_format onnx: needs {' and '.join(missing)}, not installed; install the onnx extra: "
                           "pip install -e '.[onnx]' (in a checkout of nas)")


def timm_pretrained_cfg(preprocessing: Mapping[str, Any], in_chans: int, num_classes: int) -> dict[str, Any]:
    """timm's `pretrained_cfg` for an export: `timm.data.resolve_data_config(model=...)` then gives
    the export's preprocessing (whole image resized to the resolution, no crop), not ImageNet's."""
    size = int(preprocessing["resolution"])
    return {"input_size": [in_chans, size, size], "interpolation": preprocessing["interpolation"],
            "mean": list(preprocessing["mean"]), "std": list(preprocessing["std"]), "crop_pct": 1.0,
            "crop_mode": "center", "num_classes": num_classes}


def max_abs_difference(supernet: Supernet, static: nn.Module, arch: Mapping[str, Any],
                       example: torch.Tensor) -> float:
    """Largest |output difference| between `supernet` with `arch` active and `static` (eval mode),
    both on `example`'s device."""
    was_training, previous = supernet.training, dict(supernet.active_arch)
    supernet.eval()
    supernet.set_active(arch)
    try:
        with torch.no_grad(), exact_float32(example.device):
            return (supernet(example) - static(example)).abs().max().item()
    finally:
        supernet.train(was_training)
        if previous:
            supernet.set_active(previous)


def program_difference(static: nn.Module, program: torch.export.ExportedProgram, example: torch.Tensor) -> float:
    """Largest |output difference| between `static` (eval mode) and its torch.export `program`."""
    with torch.no_grad():
        return (program.module()(example) - static(example)).abs().max().item()


def ignores_input(model: nn.Module, example: torch.Tensor, name: str) -> str | None:
    """The warning of a model (eval mode) whose output is the same for every image of `example`
    (distinct random images): a dead network, e.g. a cell whose every path from input to output
    passes through `none`; None when its output depends on its input."""
    with torch.no_grad():
        out = model(example)
    if len(out) < 2 or (out - out[0]).abs().max().item() != 0:
        return None
    return (f"{name} ignores its input: its output is the same for every image (a dead network, e.g. a cell whose "
            "every path from input to output passes through none), so it predicts one class for all; ship another "
            "arch")


def save_export(supernet: Supernet, arch: Mapping[str, Any], out_dir: str | Path,
                metrics: Mapping[str, Any] | None = None, preprocessing: Mapping[str, Any] | None = None,
                tolerance: float = 1e-5, export_format: str = "pt2", model: nn.Module | None = None) -> dict:
    """Export `arch` from `supernet` into `out_dir`; returns the metrics written.

    The static model is compared with the supernet on a seeded batch first, on the supernet's
    device; a difference above `tolerance` (on CPU; `DEVICE_TOLERANCE` times the largest output,
    at least 1, elsewhere) is an internal error (the export would not be the searched subnet).
    `model`, a static model of `arch` trained further (a fine-tune), is shipped instead: then the
    saved program is what is compared with it.
    """
    space = supernet.space
    arch = space.canonical(arch)
    out_dir = check_export_dir(out_dir, "out_dir", space.params(arch))
    device = module_device(supernet) if model is None else torch.device("cpu")
    static = (supernet.export(arch) if model is None else model).to(device).eval()
    size = space.input_size(arch)
    generator = torch.Generator().manual_seed(0)
    example = torch.randn(4, space.in_chans, size, size, generator=generator)
    exported = export_program(static.cpu(), example[:2]) if model is not None else None
    if exported is None:
        difference = max_abs_difference(supernet, static, arch, example.to(device))
    else:
        difference = program_difference(static, exported, example)
    if device.type != "cpu":
        with torch.no_grad():
            tolerance = max(tolerance, DEVICE_TOLERANCE * max(1.0, static(example.to(device)).abs().max().item()))
    if not difference <= tolerance:
        against = "the supernet" if model is None else "the fine-tuned model"
        raise RuntimeError(f"export differs from {against} by {difference:.3g} (> {tolerance:.3g}) on {device}")
    static = static.cpu()
    macs = space.macs(arch)
    classes = space.num_classes
    if model is not None:       # a fine-tune may have replaced the head (data with other classes)
        with torch.no_grad():
            classes = int(static(example[:1]).shape[-1])
        if classes != space.num_classes:
            macs = counted_flops(static, example[:1]) // 2
    record = {"arch_id": arch_id(arch), "macs": macs, "flops": 2 * macs, "params": parameter_count(static),
              "max_abs_difference": difference, "checked_on": str(device),
              "checked_against": "supernet" if model is None else "finetuned model", **dict(metrics or {}),
              "ignores_input": ignores_input(static, example, arch_id(arch))}
    if preprocessing is not None:
        record["preprocessing"] = dict(preprocessing)
    program = io.BytesIO()      # serialised in memory: a full disk then raises an OSError naming the file
    torch.export.save(exported if exported is not None else export_program(static, example[:2]), program)
    weights = save({k: v.contiguous() for k, v in static.state_dict().items()})
    with atomic_dir(out_dir) as tmp:
        for name, data in (("model.pt2", program.getbuffer()), ("weights.safetensors", weights)):
            with atomic_file(tmp / name, "wb") as f:
                f.write(data)
        write_arch_file(arch, tmp / "arch.yaml")
        timm_config = supernet.timm_config(arch)
        if timm_config is not None:
            timm_config["kwargs"]["num_classes"] = classes
            if preprocessing is not None:
                timm_config["pretrained_cfg"] = timm_pretrained_cfg(preprocessing, space.in_chans, classes)
            write_json(tmp / "timm.json", timm_config)
        elif supernet.timm_unavailable() is not None:
            record["timm"] = supernet.timm_unavailable()
        if export_format == "onnx":     # a failed check leaves the previous export in place
            record["onnx_max_abs_difference"] = save_checked_onnx(static, example, tmp / "model.onnx", tolerance,
                                                                  DEVICE_TOLERANCE)
        write_json(tmp / "metrics.json", record)
    return record


@dataclass(frozen=True)
class ExportResult(JsonResult):
    """An exported subnet: `metrics.json`'s content plus the directory and its files (`nas export`).

    `val_top1`/`test_top1` are the shipped model's (after the fine-tune when there was one);
    `record["inherited"]` holds the accuracies it inherited from the supernet, `record["cheaper"]`
    the cheaper subnets it was compared with, `warning` the line said when one of them is better."""

    arch_id: str
    macs: int
    flops: int
    params: int
    val_top1: float | None     # None: an imported run exported without data
    test_top1: float | None
    dir: Path
    record: dict[str, Any]

    @property
    def warning(self) -> str | None:
        return self.record.get("warning")

    def to_json(self) -> dict[str, Any]:
        return {**self.record, "dir": str(self.dir)}


def export_subnet(run: Run, arch: str | Mapping[str, Any], out: str | Path | None = None,
                  export_format: str = "pt2", finetune: FinetuneConfig | None = None,
                  progress: bool = True) -> ExportResult:
    """Recalibrate BN, evaluate, fine-tune (as `finetune` says, default the run's
    `export.finetune`), compare with the cheaper subnets, and export `arch` to `out` (default
    `runs/NAME/export/<arch_id>`); `export_format="onnx"` also writes `model.onnx` (the `onnx`
    extra). An arch file from a search folder of this run also gets that folder's `shipped.json`;
    `record["search"]` says whether it did, and why not (another run's search). A second export
    into the same folder while one runs fails at once (`RunError`); SIGTERM stops an export with
    `Interrupted`, saying that a rerun resumes."""
    check_format(export_format)     # a missing package fails before the evaluations
    folder = search_folder(arch if isinstance(arch, (str, Path)) else None)
    arch = resolve_arch(run.space, arch)
    out_dir = Path(os.path.abspath(out if out is not None else run.dir.export(arch_id(arch))))
    check_export_dir(out_dir, "out" if out is not None else "RUN", run.space.params(arch))
    with stopped_by_sigterm(), folder_lock(export_lock(out_dir), f"export folder {out_dir}", remove=True):
        return _export_subnet(run, arch, folder, out_dir, export_format, finetune, progress)


def export_lock(out_dir: str | Path) -> Path:
    """The folder whose lock an export into `out_dir` holds (beside it: the export folder itself is
    replaced), so that two exports into one folder never both say they exported; removed once the
    export ends."""
    out_dir = Path(os.path.abspath(out_dir))
    return out_dir.with_name(f".{out_dir.name}.exporting")


def _export_subnet(run: Run, arch: dict[str, Any], folder: Path | None, out_dir: Path, export_format: str,
                   finetune: FinetuneConfig | None, progress: bool) -> ExportResult:
    settings = run.config.export.finetune if finetune is None else finetune
    if run.imported is not None and not run.has_data:
        from nas.engine.export.without_data import export_without_data

        record = export_without_data(run, arch, out_dir, export_format, settings)
        return ExportResult(record["arch_id"], record["macs"], record["flops"], record["params"], None, None,
                            out_dir, record)
    if settings.enabled:        # a length past the ceiling fails before the evaluations
        from nas.engine.export.finetune import finetune_steps, run_length

        finetune_steps(settings.length, *run_length(run), what="export.finetune.length" if finetune is None
                       else "finetune")
    inherited = _accuracies(run, arch)
    shipped, model, finetuned = inherited, None, None
    if settings.enabled:
        from nas.engine.export.finetune import finetune_subnet   # the trainer loads timm: only when it trains

        beside = export_bytes(run.space.params(arch)) if same_file_system(out_dir, run.dir.root) else 0
        tuned = finetune_subnet(run, arch, settings, progress=progress, keep_partial=True, beside_bytes=beside)
        shipped = {"val_top1": tuned.val_top1, "test_top1": tuned.test_top1, "val_top5": tuned.val_top5,
                   "test_top5": tuned.test_top5}
        model, finetuned = tuned.model, dict(tuned.record)
        partial = finetuned.pop("partial")
    smallest = run.space.min()
    min_subnet = {"arch_id": arch_id(smallest), "macs": run.space.macs(smallest), **_accuracies(run, smallest, top5=False)}
    cheaper = cheaper_subnets(run.space.macs(arch), min_subnet, measured_by_search(folder))
    warning = below_cheaper(arch_id(arch), run.space.macs(arch), shipped["val_top1"], cheaper)
    metrics = {**shipped, "shipped": "finetuned" if finetuned else "inherited", "inherited": inherited,
               "finetune": finetuned, "cheaper": cheaper, "warning": warning, "step": run.step,
               "checkpoint": run.checkpoint.name, "run": str(run.dir.root.resolve()),
               "space_fingerprint": run.space.fingerprint(), "weights": run.weights,
               "search": _search_record(folder, run)}
    preprocessing = preprocessing_metadata(run.space.input_size(arch), run.data.mean, run.data.std,
                                           run.space.interpolation)
    with run.evaluator.prepared(arch) as supernet:     # recalibrated statistics are what gets exported
        record = save_export(supernet.to(memory_format=torch.contiguous_format), arch, out_dir, metrics,
                             preprocessing, export_format=export_format, model=model)
    if finetuned:       # the fine-tune is stored now: its partial state is no longer needed
        from nas.engine.export.finetune import remove_partial

        remove_partial(Path(partial))
    write_shipped(folder, out_dir, record)
    return ExportResult(record["arch_id"], record["macs"], record["flops"], record["params"], record["val_top1"],
                        record["test_top1"], out_dir, record)


def _search_record(folder: Path | None, run: Run) -> dict[str, Any] | None:
    """What an export from the search `folder`'s arch file says of that search: whether its
    `shipped.json` records it (not for another run's search) and a note (why not, or other weights
    than the search measured); None without a search folder."""
    if folder is None:
        return None
    source = search_source(folder)
    foreign = foreign_export(source, {"run": str(run.dir.root), "space_fingerprint": run.space.fingerprint(),
                                      "weights": run.weights, "step": run.step})
    if foreign is not None:
        return {"dir": str(folder), "recorded": False,
                "note": f"not recorded as the shipped model of the search {folder}: {foreign}"}
    return {"dir": str(folder), "recorded": True, "note": other_weights(source, run.step, run.checkpoint.name)}


def _accuracies(run: Run, arch: Mapping[str, Any], top5: bool = True) -> dict[str, float]:
    """The supernet's BN-recalibrated val and test accuracy of `arch`."""
    val, test = (run.evaluator.evaluate(arch, split) for split in ("val", "test"))
    return {"val_top1": val.top1, "test_top1": test.top1,
            **({"val_top5": val.top5, "test_top5": test.top5} if top5 else {})}
