"""`nas import FORMAT FILE --name RUN`: a run folder from another engine's published supernet.

Each format is one module of this package that registers a reader in `IMPORTERS` (`ofa`:
Once-for-All's MobileNetV3; `alphanet`: AlphaNet's AttentiveNAS supernet). A reader turns the file into an `Imported`: the run's config (a
shipped config with the user's `--set` overrides) and the supernet's weights under `nas` names.
`import_run` writes what `nas train` would have: `config.yaml`, `checkpoints/last.pt` (step 0,
the weights, and the import record) and `environment.json`, plus `imported.json` (where the
weights came from), so every verb reads the run like a trained one (`Run.imported` is the record).
"""
from __future__ import annotations

import datetime
import hashlib
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from nas.core import yaml_io
from nas.core.config import RunConfig
from nas.core.errors import CheckpointError, RunError, clip_words
from nas.core.files import check_writable, write_json, write_text
from nas.core.locks import folder_lock
from nas.core.registry import Registry
from nas.engine.checkpoint import LAST, save_checkpoint
from nas.engine.json_result import JsonResult
from nas.engine.run_dir import RunDir, check_name, environment

FORMATS = ("ofa", "alphanet")      # the modules of this package that register a reader
IMPORTERS: Registry = Registry("import format", "FORMAT")


@dataclass(frozen=True)
class Imported:
    """What a reader made of a file: the run's config, its model state and what was read."""

    config: RunConfig
    model: dict[str, torch.Tensor]
    strategy: dict[str, Any]
    record: dict[str, Any]


@dataclass(frozen=True)
class ImportResult(JsonResult):
    """An imported run (`nas import`)."""

    run: Path
    format: str
    config: str
    record: dict[str, Any]


def reader(name: str) -> Callable[[Path, Sequence[str]], Imported]:
    """The reader of format `name` (an unknown one lists the known formats)."""
    for module in FORMATS:
        importlib.import_module(f"{__name__}.{module}")
    return IMPORTERS.get(name).obj


def read_weights_only(path: Path) -> Any:
    """`torch.load(path, weights_only=True)` on the CPU; a file it refuses gets one line saying why
    (and, for pickled objects, how to convert the file once where they may be unpickled)."""
    import pickle

    if not path.is_file():
        raise CheckpointError(f"FILE: {path} is not a file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))
        if found is None:
            raise CheckpointError(f"FILE: {path}: not a PyTorch checkpoint (or damaged): the weights-only "
                                  f"unpickler cannot read it") from e
        raise CheckpointError(
            f"FILE: {path} pickles Python objects ({found.group(1)}) that a weights-only load refuses; "
            f"convert it once, in a "
            f"Python you trust with this file: python -c \"import torch; c = torch.load('{path}', "
            f"weights_only=False); torch.save({{'state_dict': c['state_dict']}}, 'converted.pth')\"") from e
    except Exception as e:      # torch raises many types on damaged or foreign files
        first = (str(e) or type(e).__name__).split(". ")[0]
        raise CheckpointError(f"FILE: {path}: not a PyTorch checkpoint (or damaged): {clip_words(first)}") from e


def first_few(keys: Sequence[str], shown: int = 3) -> str:
    """`a, b, c and 4 more`."""
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def import_run(format: str, file: str | Path, name: str, overrides: Sequence[str] = (),
               runs_dir: str | Path = "runs") -> ImportResult:
    """Read `file` as `format` into a new run `runs_dir/name` that every verb reads like a trained run."""
    read = reader(format)
    run = RunDir(Path(runs_dir) / check_name(name))
    if run.config.exists():     # config.yaml is written last: a killed import leaves none and is rerun
        raise RunError(f"{run.root} already exists", param="name", fix="choose another {name}")
    path = Path(file)
    imported = read(path, list(overrides))
    record = {"format": format, "file": str(path.resolve()), "sha256": sha256(path),
              "imported": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
              **imported.record}
    state = {"config": imported.config.to_dict(), "model": imported.model, "strategy": imported.strategy,
             "step": 0, "epoch": 0, "imported": record}
    check_writable(run.root, "runs_dir", 2 * sum(t.numel() * t.element_size() for t in imported.model.values()))
    with folder_lock(run.root, "run"):
        if run.config.exists():
            raise RunError(f"{run.root} already exists", param="name", fix="choose another {name}")
        save_checkpoint(state, run.checkpoints / LAST)
        write_json(run.imported, record)
        write_json(run.environment, {**environment(), "ranks": 1, "started": record["imported"]})
        sets = " ".join(overrides)     # config.yaml's first line: the command that made the run
        header = f"# nas import {format} {path} --name {name}{' --set ' + sets if sets else ''}\n"
        write_text(run.config, header + yaml_io.dumps(imported.config.to_dict()))
    return ImportResult(run.root, format, record.get("config", ""), record)

