"""Typed results of the API's stages: what `nas.train` (and `nas.train_summary`),
`nas.evaluate`, `nas.export_subnet`, `nas.search`, `nas.api.generate`, `nas.ground_truth`,
`nas.fidelity` and a standalone training return, in one place.

Each is a dataclass with `to_json()` (what the CLI's `--json` prints); `result["top1"]` reads
that JSON too, so scripts written against plain dicts keep working.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nas.core.arch import Arch
from nas.core.errors import NasError, RunError
from nas.core.pareto import Record
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


@dataclass(frozen=True)
class StandaloneResult:
    """Test accuracy (fractions) of a standalone-trained model and what the training took."""

    test_top1: float
    test_top5: float
    steps: int
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FidelityResult:
    """Outcome of `run_fidelity`: the summary, one record per arch, and the trainings run now."""

    dir: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    new: int


@dataclass
class SearchResult:
    """Outcome of `run_search`: the best arch and where everything was written.

    Attributes:
        best: The best arch (highest score within the budgets), canonical.
        arch_id, val_top1, macs, params, latency_ms: Its id and metrics (val_top1 None when
            the score did not evaluate the supernet; latency predicted by the table, None
            without one).
        dir: The search directory.
        evaluated: Evaluations in the search (all workers of a shared study).
        new: Evaluations made by this call (0 when re-run on a finished search).
        record: The best arch's results.jsonl record.
        latency_check: Predicted vs measured latency of `best` (None without a table and export).
        notes: Things the caller should tell the user (fewer feasible archs than asked...).
        front: The records on the Pareto front of the score against MACs, by increasing MACs.
        trials: Every evaluated record of the search (results.jsonl), in trial order; for a
            population score, with `score_value` the final one (the told one in `score_told`).
        score, score_value: What ranked the candidates and the best arch's value of it.
        finalists: With `finalists=K`: the finalists stage (`nas.engine.finalists`: each
            finalist's two measures, the winner, which is `best`, and the score's own best).
    """

    best: Arch
    arch_id: str
    val_top1: float | None
    macs: int
    params: int
    latency_ms: float | None
    dir: Path
    evaluated: int
    new: int
    record: Record
    latency_check: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    front: list[Record] = field(default_factory=list)
    trials: list[Record] = field(default_factory=list)
    score: str = "supernet"
    score_value: float | None = None
    finalists: dict[str, Any] | None = None

    def to_dataframe(self) -> Any:
        """`trials` as a pandas DataFrame, one row per evaluated arch and one `arch.<key>` column
        per choice (needs pandas, which nas does not install)."""
        return to_dataframe(self.trials, "SearchResult.to_dataframe")

    def to_json(self) -> dict[str, Any]:
        """What `nas search --json` prints: `{"best", "val_top1"?, "macs", "dir", "score", "score_value", ...}`."""
        data = {"best": self.best, **({"val_top1": self.val_top1} if self.val_top1 is not None else {}),
                "macs": self.macs, "dir": str(self.dir), "arch_id": self.arch_id, "params": self.params,
                "evaluated": self.evaluated, "score": self.score, "score_value": self.score_value}
        if self.latency_ms is not None:
            data["latency_ms"] = self.latency_ms
        if self.latency_check is not None:
            data["latency_check"] = self.latency_check
        if self.finalists is not None:
            data["finalists"] = self.finalists
        return data


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
