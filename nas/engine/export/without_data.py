"""Exporting an imported run that has no data (`data.root` unset in an ImageFolder config).

A published supernet (`nas import`) can be exported before the user has any images: the export
ships the checkpoint's BN statistics as they are (not recalibrated), evaluates nothing, and its
`metrics.json` says both (`bn_statistics`, `evaluated`; accuracies null). It cannot fine-tune.
With `data.root` set, an imported run exports as every run does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nas.core.config import FinetuneConfig
from nas.core.errors import ConfigError
from nas.core.preprocessing import preprocessing_metadata
from nas.engine.data.datasets import IMAGENET_MEAN, IMAGENET_STD
from nas.engine.run import Run

NOTE = ("exported without data (data.root unset): the BN statistics are the imported checkpoint's, not "
        "recalibrated, and nothing was evaluated")


def export_without_data(run: Run, arch: dict[str, Any], out_dir: Path, export_format: str,
                        settings: FinetuneConfig) -> dict[str, Any]:
    """Save `arch`'s export from the imported weights as they are; returns the record written."""
    from nas.engine.export import save_export

    if settings.enabled:
        raise ConfigError("a fine-tune trains on data: set data.root in the run's config.yaml (or import the file "
                          "again with data.root set), or export without a fine-tune", param="finetune")
    metrics = {"val_top1": None, "test_top1": None, "shipped": "imported", "inherited": None, "finetune": None,
               "bn_statistics": "imported, not recalibrated", "evaluated": False, "note": NOTE, "cheaper": [],
               "warning": None, "step": run.step, "checkpoint": run.checkpoint.name,
               "run": str(run.dir.root.resolve()), "space_fingerprint": run.space.fingerprint(), "search": None,
               "imported": run.imported}
    preprocessing = preprocessing_metadata(run.space.input_size(arch), IMAGENET_MEAN, IMAGENET_STD,
                                           run.space.interpolation)
    supernet = run.subnet(arch)
    return save_export(supernet.to(memory_format=torch.contiguous_format), arch, out_dir, metrics, preprocessing,
                       export_format=export_format)
