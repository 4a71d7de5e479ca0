"""What a search ranks its candidates by (`nas search --score NAME`): an estimator and its context.

`--score auto` (the default) picks the estimator with the best within-MACs-bin Kendall tau in
the run's latest `nas fidelity` summary (by modification time): within a budget the candidates
share a MACs range, so agreement inside a bin is what ranking them needs. Without a summary
(a fidelity run costs hours of standalone training) it uses the space's shipped default
(`DEFAULT_SCORES`, keyed by space name; `GENERIC_DEFAULT` for other spaces): the score that
`benchmarks/default_score.py` chose on one half of the committed ground truth of the shipped
space and recipe, graded on the other half (the dated figures: benchmarks/notes/17-default-path.md); for
`cell201`, NAS-Bench-201's published CIFAR-10 accuracies of the paper-scale network chose the same
score (`benchmarks/nb201_proxies.py`). A summary that reports no
within-bin tau leaves `supernet`, BN-recalibrated validation top-1 (what a search ranked by
before estimators existed). Either way one short line on stderr says what was chosen and its
one reason (`ScoreChoice.line`), and the search's summary.json keeps the whole evidence
(`ScoreChoice.reason`: the files, figures and caveats); when the chosen estimator's 90% interval
includes 0, both say the ground truth cannot tell it from chance (a small or flat ground truth:
the choice stands, flagged as weak).

A summary belongs to the run's space when its `space` and `space_fingerprint` match the
space's (a summary without them, from before they were recorded, is taken as the run's): one of
another space (a run folder whose config was edited, a copied folder) is ignored, and the line
says so. A summary whose within-bin tau is not a number in [-1, 1] (null: undefined, is
skipped), or that names an estimator unknown here, is refused in one line naming the file.

The context a search gives estimators: the run's space, fixed seeded training batches
(`ESTIMATOR_BATCHES` x `ESTIMATOR_BATCH_SIZE` with seed `BATCH_SEED`, loaded on first use, so
scores that read no data never load them), the supernet's validation top-1 (remembered per
arch, so a record keeps `val_top1` whenever its score evaluated the supernet) and the run's folder.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from estimators import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES, Estimator, EstimatorContext, Fused, build_estimator, \
    canonical_spec
from estimators.defaults import (  # noqa: F401  (the defaults' home; searches read them here)
    DEFAULT_SCORES, EVIDENCE, GENERIC_DEFAULT, DefaultScore, default_score)
from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError, RegistryError, SearchError, clip, clip_words
from nas.core.registry import SUPERNET_SCORE

AUTO = "auto"
DEFAULT = SUPERNET_SCORE     # what `auto` means without a fidelity summary
BATCH_SEED = 0


@dataclass(frozen=True)
class ScoreChoice:
    """The score a search uses: `name` (an estimator or fusion spec) and, for `auto`, why (both
    None when the user named the score): `line`, the score and its one reason in a short line
    (what a search announces and `nas summary` prints), and `reason`, the whole evidence (files,
    figures, caveats: summary.json's `score_reason`)."""

    name: str
    reason: str | None = None
    line: str | None = None


def latest_fidelity_summary(run_root: Path) -> Path | None:
    """The newest `fidelity/<id>/summary.json` of the run (by modification time), or None."""
    found = fidelity_summaries(run_root)
    return found[0] if found else None


def fidelity_summaries(run_root: Path) -> list[Path]:
    """The run's `fidelity/<id>/summary.json` files, newest first (by modification time)."""
    found = [p for p in (run_root / "fidelity").glob("*/summary.json") if p.is_file()]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, str(p)), reverse=True)


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _estimator_rows(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Estimator name -> its stats in a fidelity summary; the supernet's from the top level when
    `estimators` gives it no within-bin tau (summaries written before estimators existed)."""
    estimators = summary.get("estimators")
    if not isinstance(estimators, Mapping):
        estimators = {}
    rows = {str(name): stats for name, stats in estimators.items() if isinstance(stats, Mapping)}
    if rows.get(DEFAULT, {}).get("within_bin_tau") is None:
        rows[DEFAULT] = summary
    return rows


def within_bin_taus(summary: Mapping[str, Any]) -> dict[str, float]:
    """Estimator name -> within-bin Kendall tau of a fidelity summary (those without one left out)."""
    return {name: float(stats["within_bin_tau"]) for name, stats in _estimator_rows(summary).items()
            if _real(stats.get("within_bin_tau"))}


def within_bin_interval(summary: Mapping[str, Any], name: str) -> tuple[float, float] | None:
    """The bootstrap 90% interval of estimator `name`'s within-bin tau in a fidelity summary, or None."""
    interval = _estimator_rows(summary).get(name, {}).get("within_bin_tau_ci90")
    if isinstance(interval, Sequence) and len(interval) == 2 and all(_real(v) for v in interval):
        return float(interval[0]), float(interval[1])
    return None


def _read_summary(path: Path) -> dict[str, Any]:
    try:
        summary = json.loads(path.read_text())
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise SearchError(f"score auto: {path}: cannot read the fidelity summary ({clip_words(str(e))})",
                          fix="name a score with {score} or run nas fidelity again") from e
    return summary


def _other_space(summary: Mapping[str, Any], space: Any) -> str | None:
    """How a summary's space differs from `space` (an `ArchSpace`), or None when it is the same
    (or the summary does not record it)."""
    if space is None:
        return None
    theirs = (summary.get("space"), summary.get("space_fingerprint"))
    ours = (space.name, space.fingerprint())
    if theirs[0] is not None and theirs[0] != ours[0]:
        return f"space {clip(str(theirs[0]))}, this run's is {ours[0]}"
    if theirs[1] is not None and theirs[1] != ours[1]:
        return f"space fingerprint {clip(str(theirs[1]))}, this run's is {ours[1]}"
    return None


def _check_rows(summary: Mapping[str, Any], path: Path) -> None:
    """Refuse a summary whose rows could mislead `auto`: a within-bin tau that is neither null
    nor a number in [-1, 1], or an estimator this installation does not know."""
    for name, stats in _estimator_rows(summary).items():
        tau = stats.get("within_bin_tau")
        if tau is not None and not (_real(tau) and -1 <= tau <= 1):
            raise SearchError(f"score auto: {path}: the within-bin tau of '{clip(name)}' must be a number in "
                              f"[-1, 1] or null, got {clip(json.dumps(tau))}; the fidelity summary is damaged: "
                              "run nas fidelity again or name a score with {score}")
        if name == DEFAULT:
            continue
        try:
            build_estimator(name)
        except (ConfigError, RegistryError) as e:
            problem = str(e).splitlines()[0].removeprefix("score: ")
            raise SearchError(f"score auto: {path}: the fidelity summary names an estimator unknown here "
                              f"({clip_words(problem)})", fix="name a score with {score} or run nas fidelity "
                              "again") from None


def choose_score(spec: str, run_root: Path, space: Any = None) -> ScoreChoice:
    """`spec` itself, or for `auto` the best estimator of the newest fidelity summary of `space`
    (an `ArchSpace`; ties go to `supernet`, then to the first name in alphabetical order)."""
    if spec != AUTO:
        return ScoreChoice(spec)
    ignored = ""
    for path in fidelity_summaries(run_root):
        summary = _read_summary(path)
        other = _other_space(summary, space)
        if other is None:
            return _choose_from(summary, path, ignored)
        if not ignored:
            ignored = f"; ignored {path}: it measured {other}"
    of_space = " of this space" if ignored else ""
    spec, why = default_score(space)
    name = getattr(space, "name", None)
    whose = f"the {name} default" if name in DEFAULT_SCORES else "the generic default"
    chosen = DEFAULT_SCORES.get(name)
    said, short = (f"; {chosen.supernet}", f"; {chosen.supernet_headline}") if chosen and chosen.supernet else ("", "")
    return ScoreChoice(spec, f"score auto: {spec} (no fidelity summary{of_space} in {run_root / 'fidelity'}{ignored}; "
                             f"{why}{said}; `nas fidelity` measures the estimators on this run)",
                       f"score auto: {spec}, {whose} (no fidelity summary{of_space or ' of this run'}{short})")


def _choose_from(summary: Mapping[str, Any], path: Path, ignored: str) -> ScoreChoice:
    _check_rows(summary, path)
    taus = within_bin_taus(summary)
    if not taus:
        return ScoreChoice(DEFAULT, f"score auto: {DEFAULT} ({path} reports no within-bin tau of any "
                                    f"estimator{ignored})",
                           f"score auto: {DEFAULT} (the fidelity summary reports no within-bin tau)")
    ordered = sorted(taus, key=lambda name: (-taus[name], name != DEFAULT, name))
    best, others = ordered[0], ", ".join(f"{name} {taus[name]:.3f}" for name in ordered[1:])
    interval = within_bin_interval(summary, best)
    weak = ""
    if interval is not None and interval[0] <= 0:
        weak = (f"; its 90% interval [{interval[0]:.2f}, {interval[1]:.2f}] includes 0: this ground truth cannot "
                f"tell it from chance within MACs bins, so the choice is weak (a ground truth of "
                f"more archs would settle it)")
    return ScoreChoice(best, f"score auto: {best} (within-bin Kendall tau {taus[best]:.3f} in {path}"
                             f"{'; ' + others if others else ''}{ignored}){weak}",
                       f"score auto: {best}, the best within-bin tau in nas fidelity ({taus[best]:.3f}"
                       f"{'; weak: its 90% interval includes 0' if weak else ''})")


class _Batches(Sequence):
    """The context's training batches, drawn when first read."""

    def __init__(self, load: Callable[[], list]):
        self._load, self._batches = load, None

    def _get(self) -> list:
        if self._batches is None:
            self._batches = self._load()
        return self._batches

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, index):  # type: ignore[override]
        return self._get()[index]


@dataclass
class SearchScore:
    """An estimator bound to a run: `metrics(arch)` is the search's `evaluate`, `rank(archs)` its
    population scorer (None unless the estimator's scores are relative to a population)."""

    name: str
    estimator: Estimator
    context: EstimatorContext
    supernet: dict[str, Any] = field(default_factory=dict)    # arch_id -> validation accuracy, as evaluated

    def metrics(self, arch: Arch) -> dict[str, Any]:
        """`{"score_value"?, "val_top1"?, "val_top5"?, "score_NAME"?}` of `arch` (no `score_value`
        for a population score: the runner ranks it among the others; `val_top1` when the
        supernet was evaluated; for a fusion, each component's own score as `score_NAME`)."""
        result: dict[str, Any] = {}
        if not self.estimator.population:
            result["score_value"] = float(self.estimator.score(arch, self.context))
        if isinstance(self.estimator, Fused):     # what the ranks were made of, kept in the record
            result.update({f"score_{name}": float(value) if math.isfinite(value) else None
                           for name, value in self.estimator.component_scores(arch, self.context).items()})
        accuracy = self.supernet.get(arch_id(arch))
        if accuracy is not None:
            result.update(val_top1=accuracy.top1, val_top5=accuracy.top5)
        return result

    @property
    def rank(self) -> Callable[[Sequence[Arch]], list[float]] | None:
        if not self.estimator.population:
            return None
        return lambda archs: [float(v) for v in self.estimator.scores(list(archs), self.context)]


def search_score(name: str, run: Any) -> SearchScore:
    """The estimator `name` with the context of `run` (a `nas.api.Run`): its space, fixed training
    batches, validation top-1 through the run's evaluator, and its folder; named by the canonical
    spelling of `name` (`estimators/score_spec.py`), which the search's folder, records and
    settings use."""
    estimator = build_estimator(name)
    supernet: dict[str, Any] = {}

    def supernet_top1(arch: Arch) -> float:
        accuracy = run.evaluator.evaluate(arch, "val")
        supernet[arch_id(run.space.canonical(arch))] = accuracy
        return accuracy.top1

    batches = _Batches(lambda: run.data.sample_batches("train", ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE, BATCH_SEED))
    context = EstimatorContext(run.space, batches, supernet_top1, run_dir=run.dir.root)
    return SearchScore(canonical_spec(name), estimator, context, supernet)
