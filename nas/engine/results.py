"""Typed results of the API's stages: what `nas.train` (and `nas.train_summary`),
`nas.evaluate`, `nas.export_subnet`, `nas.api.generate` and `nas.ground_truth` return (the
search's `SearchResult` lives with the search loop, `FidelityResult` with the fidelity stage).

Each is a dataclass with `to_json()` (what the CLI's `--json` prints); `result["top1"]` reads
that JSON too, so scripts written against plain dicts keep working.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nas.core.arch import Arch
from nas.core.errors import NasError, RunError
from nas.engine.checkpoint import LAST
from nas.engine.jsonl import read_records
from nas.engine.run_dir import DEFAULT_RUNS_DIR, RunDir, find_run

if TYPE_CHECKING:
    from nas.engine.recipe import Recipe


class JsonResult:
    """Mixin for result dataclasses: `to_json()` and read access to its keys."""

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON-ready values (paths as strings)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def __getitem__(self, key: str) -> Any:
        """`result[key]` reads the JSON form, as the dicts earlier versions returned."""
        return self.to_json()[key]

    def keys(self) -> list[str]:
        return list(self.to_json())


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class EvalResult(JsonResult):
    """BN-recalibrated accuracy of one arch on one split, with its costs (`nas eval`)."""

    arch: Arch
    arch_id: str
    split: str
    top1: float
    top5: float
    n_images: int
    macs: int
    params: int
    step: int


@dataclass(frozen=True)
class ExportResult(JsonResult):
    """An exported subnet: `metrics.json`'s content plus the directory and its files (`nas export`)."""

    arch_id: str
    macs: int
    flops: int
    params: int
    val_top1: float
    test_top1: float
    dir: Path
    record: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self.record, "dir": str(self.dir)}


@dataclass(frozen=True)
class GenerateResult(JsonResult):
    """An arch from a run's generator within a MACs budget, written as an arch file (`nas generate`)."""

    arch: Arch
    arch_id: str
    macs: int
    params: int
    max_macs: float
    attempts: int
    shrunk: bool
    file: Path


@dataclass(frozen=True)
class GroundTruthResult(JsonResult):
    """A space's standalone ground truth (`nas.ground_truth`): its folder and recipe, one record
    per arch sorted by MACs, the seed-to-seed agreement and the trainings this call ran."""

    dir: Path
    recipe: Recipe
    recipe_digest: str
    records: list[dict[str, Any]]
    seed_kendall_tau: float | None
    seed_spearman_rho: float | None
    seed_within_bin_tau: float | None
    new: int

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "recipe": self.recipe.to_dict()}


@dataclass(frozen=True)
class TrainSummary(JsonResult):
    """Where a training run stands: its last step and the validation top-1 of its monitored
    archs at the last epoch end (`nas train --json`)."""

    run: Path
    name: str
    step: int
    epoch: int | None
    val_top1: dict[str, float]
    checkpoint: Path | None

    @property
    def dir(self) -> RunDir:
        """The run's folder layout (`checkpoints`, `metrics`, `config`, ...)."""
        return RunDir(self.run)


def train_summary(run: RunDir | str | Path, runs_dir: str | Path = DEFAULT_RUNS_DIR) -> TrainSummary:
    """Where a run stands: its last checkpoint's step and the last epoch's validation top-1 of the
    monitored archs from `metrics.jsonl` (what `nas train --json` prints)."""
    run = run if isinstance(run, RunDir) else find_run(run, runs_dir)
    records = read_records(run.metrics, RunError)
    last: dict[str, Any] = records[-1] if records else {}
    scores = {key[len("val_top1_"):]: value for key, value in last.items() if key.startswith("val_top1_")}
    path = run.checkpoints / LAST
    step = int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"]) if path.is_file() else 0
    return TrainSummary(run.root, run.name, step, last.get("epoch"), scores, path if path.is_file() else None)


def to_dataframe(rows: Sequence[Mapping[str, Any]], what: str) -> Any:
    """A pandas DataFrame of `rows`, one column per key (arch choices as `arch.<key>` columns)."""
    try:
        import pandas
    except ImportError:
        raise NasError(f"{what}: needs pandas, which is not installed; `pip install pandas`, or read the "
                       f"records as a list of dicts") from None
    flat = []
    for row in rows:
        arch = row.get("arch", {})
        flat.append({**{k: v for k, v in row.items() if k != "arch"}, **{f"arch.{k}": v for k, v in arch.items()}})
    return pandas.DataFrame(flat)
