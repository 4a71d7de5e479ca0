"""What the fidelity stage returns: a space's ground truth and a run's fidelity measurement."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.engine.json_result import JsonResult

if TYPE_CHECKING:
    from nas.engine.fidelity.recipe import Recipe


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


@dataclass
class FidelityResult:
    """Outcome of `run_fidelity`: the summary, one record per arch, and the trainings run now."""

    dir: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    new: int
