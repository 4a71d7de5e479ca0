"""The Python API: each function is one stage of YAML -> supernet -> train -> search -> export.

A thin facade: each stage lives in its folder of `nas.engine` (`training`, `searching`,
`fidelity`, `export`), a run and its builders (`Run`, `load_run`, `build_space`,
`build_strategy`...) in `nas.engine.run`; this module re-exports them, and the CLI calls only it.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.engine.evaluator import SPLITS, EvalResult
from nas.engine.export import FORMATS as EXPORT_FORMATS
from nas.engine.export import ExportResult, export_subnet
from nas.engine.export.family import FAMILY_EXPORT, FamilyExport, export_family
from nas.engine.export.family_summary import check_family_json_kept, format_family_summary, summarise_family
from nas.engine.export.scratch import cheaper_path_note, export_family_from_scratch, finetune_share
from nas.engine.export.shipped import format_shipped, read_shipped, shipped_status
from nas.engine.fidelity.report import format_summary as format_fidelity_summary
from nas.engine.fidelity.results import FidelityResult, GroundTruthResult
from nas.engine.fidelity.stage import fidelity, ground_truth
from nas.engine.importing import ImportResult, import_run
from nas.engine.latency.stage import latency_table
from nas.engine.run import (
    Run,
    arch_generator,
    build_space,
    build_strategy,
    build_supernet,
    load_run,
    load_source,
    load_splits,
    load_weights,
    resolve_arch,
    standalone_model,
)
from nas.engine.run_dir import find_run
from nas.engine.searching.family import FamilyResult, is_family, read_family
from nas.engine.searching.family_budgets import budget_list
from nas.engine.searching.family_search import search_family
from nas.engine.searching.generator import GenerateResult, generate
from nas.engine.searching.results import SearchResult
from nas.engine.searching.request import resolve_budget
from nas.engine.searching.stage import search
from nas.engine.searching.summary import format_search_summary, search_summary
from nas.engine.space_report import format_space_summary, run_space_summary, space_summary
from nas.engine.training.stage import resume_config, run_name, train
from nas.engine.training.summary import TrainSummary, train_summary
from nas.engine.untrained import check_untrained_search, names_a_run, untrained_run

__all__ = ["EXPORT_FORMATS", "EvalResult", "ExportResult", "FAMILY_EXPORT", "FamilyExport", "FamilyResult",
           "FidelityResult", "GenerateResult", "GroundTruthResult", "ImportResult", "Run", "SPLITS", "SearchResult", "TrainSummary",
           "arch_generator", "budget_list", "build_space", "build_strategy", "build_supernet", "cheaper_path_note",
           "check_family_json_kept", "check_untrained_search", "evaluate", "export_family",
           "export_family_from_scratch", "export_subnet", "fidelity", "find_run", "finetune_share",
           "format_family_summary", "format_fidelity_summary", "format_search_summary", "format_shipped",
           "format_space_summary", "generate", "ground_truth", "import_run", "is_family", "latency_fit",
           "latency_probe", "latency_table", "load_config", "load_run", "load_source", "load_splits", "load_weights",
           "names_a_run",
           "read_family", "read_shipped", "resolve_arch", "resolve_budget", "resume_config", "run_name",
           "run_space_summary", "search", "search_family", "search_summary", "shipped_status", "space_summary",
           "standalone_model",
           "summarise_family", "train", "train_summary", "untrained_run"]


def latency_fit(target: str, timings: str, column: str = "latency_ms", priors: tuple[str, ...] = (),
                name: str | None = None, batch: int = 1, out: str | None = None,
                overrides: tuple[str, ...] = (), runs_dir: str = "runs") -> tuple[Any, Any]:
    """Fit a latency table of a run's or config's space to whole-network timings (`nas latency-fit`);
    returns the table file and the fit report (`nas.engine.latency.fit.latency_fit`)."""
    from nas.engine.latency.fit import latency_fit as fit
    return fit(target, timings, column, priors, name, batch, out, overrides, runs_dir)


def latency_probe(target: str, count: int, out: str, resolution: int | None = None, seed: int = 0,
                  overrides: tuple[str, ...] = (), runs_dir: str = "runs",
                  progress: Callable[[int, int], None] | None = None) -> Any:
    """Write `count` subnets of a run's or config's space at one resolution, chosen so that
    `latency_fit` tells its layer groups apart, as ONNX files with a timings CSV to fill in on the
    device (`nas latency-probe`; `nas.engine.latency.probe.latency_probe`)."""
    from nas.engine.latency.probe import latency_probe as probe
    return probe(target, count, out, resolution, seed, overrides, runs_dir, progress)


def evaluate(run: Run, arch: str | Mapping[str, Any], split: str = "val") -> EvalResult:
    """BN-recalibrated top-1/top-5 of `arch` on `split`, with its costs."""
    arch = resolve_arch(run.space, arch)
    result = run.evaluator.evaluate(arch, split)
    macs, params = run.space.costs(arch)
    return EvalResult(arch, arch_id(arch), split, result.top1, result.top5, result.n_images, macs, params, run.step)
