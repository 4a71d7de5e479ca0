"""A table of measured accuracies as the ground truth of `nas fidelity` (`--ground-truth
table:PATH[:COLUMN]`): no standalone training, the table's value of each selected arch instead.

The table is read as a score table (`estimators/table.py`: an `arch` or `arch_id` column, the
accuracy column named or the only other one besides `index`). The scale is decided once per
column from every value it holds for the space (not only the selected archs'), by the table
reader's `accuracy_scale`, the same rule `--score table:` reads by: fractions when every value
lies in [0, 1]; percentages (NAS-Bench-201's 94.37, divided by 100) when every value lies in
[0, 100] and most exceed 1; a mixed column is an error there already, and here so is a value
outside [0, 100] (no accuracy). A selected arch
the table lacks is a one-line error before any evaluation.
`TablePlan` and `TableTruth` stand in for the trained ground truth's `Plan` and `GroundTruth`
where `run_fidelity` reads them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimators.table import check_spec, digest, is_table_spec, lookup, read_table
from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.engine.fidelity.arch_selection import select_archs
from nas.engine.fidelity.runner import INIT_SEEDS
from search_spaces.base import ArchSpace

PARAM = "ground_truth_dir"      # the API parameter behind --ground-truth

is_table = is_table_spec


@dataclass(frozen=True)
class TableRecipe:
    """What the ground truth "trained" with: the table and its column (recorded in the settings)."""

    path: Path
    column: str

    def length(self) -> str:
        return "table"

    def to_dict(self) -> dict[str, Any]:
        return {"table": str(self.path), "column": self.column}


class TableTruth:
    """The `GroundTruth` interface `run_fidelity` uses, answered from a table."""

    def __init__(self, spec: str, space: ArchSpace):
        path, _, column = check_spec(spec, PARAM)
        self.spec, self.space, self.folder, self.recipe = spec, space, path, TableRecipe(path, column)
        self.digest = digest(path)
        values = read_table(spec, space, PARAM)
        if values.scale is None:
            outside = next(ident for ident, v in values.items() if not 0 <= v <= 100)
            raise ConfigError(f"{PARAM}: {path}: column '{column}': arch {outside} has {values[outside]:g}, no "
                              "accuracy (a fraction in [0, 1] or a percentage in [0, 100])")
        self.scale, self.values = values.scale, values

    def top1(self, arch: Arch) -> float:
        """The table's accuracy of `arch` as a fraction (an error naming the arch when it lacks it)."""
        return lookup(self.values, arch, self.space, self.spec) / self.scale

    def collect(self, archs: Sequence[Arch], seeds: int, workers: int,
                done: Callable[[Arch, list[dict[str, Any]]], None], progress: bool = True) -> int:
        """Call `done(arch, [result])` for every arch, as a finished training would; 0 trainings."""
        for arch in archs:
            macs, params = self.space.costs(arch)
            done(arch, [{"test_top1": self.top1(arch), "macs": macs, "params": params, "seconds": 0.0}])
        return 0


@dataclass(frozen=True)
class TablePlan:
    """The selected archs and the table that answers them (the trained `Plan`'s fields)."""

    archs: list[Arch]
    truth: TableTruth
    seeds: int = 1
    selection_seed: int = 0
    init_seeds: int = INIT_SEEDS
    extends: int | None = None

    @property
    def recipe(self) -> TableRecipe:
        return self.truth.recipe

    def ident(self) -> str:
        """The measurement's folder name: archs, the table's digest, the selection seed."""
        ident = f"n{len(self.archs)}-table-{self.truth.digest}"
        ident += f"-sel{self.selection_seed}" if self.selection_seed else ""
        ident += f"-ext{self.extends}" if self.extends not in (None, len(self.archs)) else ""
        return ident + (f"-i{self.init_seeds}" if self.init_seeds != INIT_SEEDS else "")


def table_plan(spec: str, space: ArchSpace, *, archs: int, epochs: int | None, seeds: int,
               recipe: Any, selection_seed: int = 0, init_seeds: int = INIT_SEEDS,
               extends: int | None = None) -> TablePlan:
    """The MACs-stratified selection answered by the table `spec`; training options are refused
    (a table trains nothing), and so is a selected arch the table lacks."""
    given = [flag for flag, value in (("epochs", epochs), ("recipe", recipe)) if value is not None]
    if seeds != 1:
        given.append("seeds")
    if given:
        raise ConfigError(f"{given[0]}: a table ground truth ({spec}) trains nothing; leave out "
                          f"{', '.join(given)}")
    truth = TableTruth(spec, space)
    selected = select_archs(space, archs, selection_seed, extends)
    for arch in selected:
        truth.top1(arch)
    return TablePlan(selected, truth, 1, selection_seed, init_seeds, extends)
