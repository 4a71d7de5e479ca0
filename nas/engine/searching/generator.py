"""An arch within a MACs budget from a run's trained architecture generator, without a search
(`nas generate`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nas.core.amounts import format_amount
from nas.core.arch import Arch, arch_id, write_arch_file
from nas.core.errors import ConfigError, RunError
from nas.core.files import check_writable
from nas.engine.json_result import JsonResult
from nas.engine.run import Run, arch_generator
from nas.engine.searching.request import resolve_budget


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


def generate(run: Run, max_macs: str | float, seed: int = 0, out: str | Path | None = None) -> GenerateResult:
    """An arch within `max_macs` (an amount or `P%`) from the run's generator, without a search
    (`nas generate`); written as an arch file to `out` (default `runs/NAME/generate/<arch_id>.yaml`)."""
    trainer = arch_generator(run)
    if trainer is None:
        raise RunError(f"RUN: {run.dir.root} has no architecture generator (train it with "
                       f"strategy.sampler: {{name: shiftnas, generator: true}})")
    low, high = run.space.macs(run.space.min()), run.space.macs(run.space.max())
    budget = resolve_budget(max_macs, low, high, "max_macs")
    if budget < low:
        raise ConfigError(f"max_macs: {format_amount(budget)} is below the smallest subnet's MACs "
                          f"({format_amount(low)})")
    if out is not None:
        check_writable(Path(out).parent, "out")
    arch, attempts, shrunk = trainer.generate(budget, seed)
    macs, params = run.space.costs(arch)
    path = Path(out) if out is not None else run.dir.root / "generate" / f"{arch_id(arch)}.yaml"
    if out is None:
        check_writable(path.parent, "RUN")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_arch_file(arch, path)
    return GenerateResult(arch, arch_id(arch), macs, params, budget, attempts, shrunk, path)
