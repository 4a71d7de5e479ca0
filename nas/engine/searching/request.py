"""One search's request: every argument of `nas.search` checked and resolved once, before any work.

`build_request` turns the Python API's arguments (budgets as amounts or percentages, `auto` as
a score, an optional folder) into a `SearchRequest`: a frozen value the stage, its spawned
workers and the files it writes all read unchanged. The score is resolved here and only here
(`resolve_score`): the request carries the estimator spec the search ranks by, the short line
saying why (`score_line`) and the whole evidence (`score_reason`).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from nas.core.arch import Arch, arch_id
from nas.core.costs import BY_NAME
from nas.core.errors import ConfigError, check_int
from nas.core.files import check_writable
from nas.core.wording import announce
from nas.core.registry import SEARCHERS, SUPERNET_SCORE
from nas.engine.run_dir import check_name
from nas.engine.searching.costs import Constraints

if TYPE_CHECKING:
    from nas.engine.run import Run
    from nas.engine.searching.score import ScoreChoice

MAX_REJECTIONS = 1000    # infeasible or duplicate suggestions in a row before a search gives up
SCORE_PART_MAX = 64     # characters of a score spec in a folder name; a longer one is cut and hashed
FINETUNE_STEPS, FINETUNE_LR = 100, 0.01     # the finalists' measure by default (`finalists.Finetune`)
# The window near a budget (`SearchRequest.window`): the top fifth of the way from the min subnet's
# cost to the budget; uniform draws on the default MobileNetV3 space put 5% of their archs there at
# a 50% MACs budget (their median costs half the budget).
WINDOW_SHARE = 0.2


@dataclass(frozen=True)
class Source:
    """The trained weights a search measures: the run's folder, its checkpoint file, the
    optimiser step that checkpoint holds (a run trained further is another source) and the
    weights' digest (`Run.weights`: what identifies them wherever the run lies; None untrained)."""

    run: str
    checkpoint: str
    step: int
    weights: str | None = None

    def settings(self) -> dict[str, Any]:
        """What search.json and finalists.jsonl record of it (as `nas fidelity` does)."""
        return {"checkpoint": self.checkpoint, "step": self.step}


@dataclass(frozen=True)
class SearchRequest:
    """A whole search, resolved: what the stage, each worker process and the output files read.

    Attributes:
        searcher: Registered searcher name (`random`, `evolution`, `optuna-tpe`, ...).
        out: The search folder.
        options: The searcher's options: a mapping, its options dataclass, or None (defaults).
        trials: Evaluations to complete (in the shared study for Optuna): re-running a
            finished search evaluates nothing, raising it continues.
        seed: Search seed; worker k of a shared study uses `seed + k`.
        score: The spec of what ranks the candidates, in its canonical spelling.
        score_reason: Why `auto` chose `score`, with the evidence (None when the caller named it).
        objective: What the score optimises, in words (inherited accuracy, or accuracy after
            training alone predicted by a proxy): the search's line and summary.json say it.
        constraints: The budgets, as counts.
        device, batch: Where candidates are evaluated, and the latency table's batch size.
        storage, study, worker: The shared Optuna study (None: a journal file in `out`, named
            after it) and this process's index among its workers.
        workers: Processes to search (shared searchers) and to measure finalists in.
        finalists: K > 0: the K best by the score are fine-tuned alone and the best of them
            answered, each with `finalist_steps` steps at peak rate `finalist_lr`.
        source: The run's weights the search measures (None: a search outside a run).
        progress, tensorboard: A tqdm bar on stderr; TensorBoard scalars under `out/tb`.
        max_rejections: Infeasible or duplicate suggestions in a row before giving up.
        latency_table, predict_missing: A latency table named instead of the run's own (a fitted
            or measured table file, or `CSV[:COLUMN]` of per-arch ms), and whether archs a CSV
            lacks are predicted rather than refused.
        first: Archs evaluated before the searcher's own proposals, where they meet the budgets:
            the supernet's anchors (the archs its strategy trains at every step, e.g. the
            sandwich rule's min and max) when the score is the supernet's own measurement,
            because they are the best-trained archs it holds; none otherwise.
        score_line: `score_reason` in one short line: the score and its one reason.
        announce_score: Print `score_line` on stderr when the search starts (a family's later
            members do not repeat it; their records keep it).
        window: Cost name -> the low edge of the costs near its budget where a searcher draws
            some of its first proposals (`searchers.window`; a family member's: the previous
            member's budget); a budgeted cost it does not name takes the top `WINDOW_SHARE` of
            the way from the min subnet's cost to the budget.
        reused: Arch id -> the record of an arch evaluated before (a family's earlier members),
            told again instead of evaluated, in this process and in each spawned worker.
    """

    searcher: str
    out: Path
    options: Any = None
    trials: int = 100
    seed: int = 0
    score: str = SUPERNET_SCORE
    score_reason: str | None = None
    objective: str = ""
    constraints: Constraints = field(default_factory=Constraints)
    device: str = "cpu"
    batch: int = 1
    storage: str | None = None
    study: str | None = None
    worker: int = 0
    workers: int = 1
    finalists: int = 0
    finalist_steps: int = FINETUNE_STEPS
    finalist_lr: float = FINETUNE_LR
    source: Source | None = None
    progress: bool = True
    tensorboard: bool = True
    max_rejections: int = MAX_REJECTIONS
    latency_table: str | None = None
    predict_missing: bool = False
    first: tuple[Arch, ...] = ()
    score_line: str | None = None
    announce_score: bool = True
    window: Mapping[str, float] | None = None
    reused: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Whether the searcher keeps its state in a storage several processes share (Optuna)."""
        return bool(getattr(SEARCHERS.get(self.searcher).obj, "shared", False))

    @property
    def search_workers(self) -> int:
        """Processes that search: `workers` for a shared searcher, else one (whose finalists may
        still be measured by `workers`)."""
        return self.workers if self.shared else 1


SHIPS = ("finetuned", "inherited")


def shipped_weights(run: Run, ships: str | None = None) -> str:
    """What the run's export ships: `finetuned` when `export.finetune` trains the subnet alone
    first, else `inherited`; `ships` overrides it (checked)."""
    if ships is None:
        return "finetuned" if run.config.export.finetune.enabled else "inherited"
    if ships not in SHIPS:
        raise ConfigError(f"ships: {ships!r} is not one of {', '.join(SHIPS)}")
    return ships


def resolve_score(spec: str, run: Run, ships: str | None = None) -> tuple[ScoreChoice, str]:
    """(the score a search of `run` ranks by, named by its canonical spec; what it optimises).

    `auto` follows what the export ships (`shipped_weights`): inherited weights are chosen for
    their inherited accuracy, which the supernet measures exactly (`supernet`); a fine-tuned
    export for its accuracy after training alone, which `nas.engine.searching.score.choose_score`
    predicts (the run's fidelity summary, else the space's default). A run with no trained
    weights (`nas search CONFIG`) always takes the prediction. An unknown spec fails here, with
    a did-you-mean."""
    from estimators import build_estimator, canonical_spec
    from nas.engine.searching.score import AUTO, ScoreChoice, choose_score
    from nas.engine.untrained import UNTRAINED

    shipped = shipped_weights(run, ships)
    trained = run.checkpoint.name != UNTRAINED
    if ships == "inherited" and not trained:
        raise ConfigError("ships: inherited: a config has no trained weights to inherit; train it (nas train) and "
                          "search the run, or leave ships out")
    if ships is not None and spec != AUTO:
        announce(f"warning: {{ships}} decides what score auto optimises; the search ranks by the score given ({spec}), "
                 "which it leaves as it is")
    if spec == AUTO and shipped == "inherited" and trained:
        because = "ships: inherited" if ships is not None else "export.finetune.length 0"
        return ScoreChoice(SUPERNET_SCORE, (
            f"score auto: supernet (the export ships the inherited weights, {because}: the answer is "
            "chosen for its inherited accuracy, which the supernet measures exactly; with a fine-tune before the "
            "export, auto predicts the accuracy after training instead)"),
            "score auto: supernet (the export ships the inherited weights: it measures their accuracy)"
        ), "inherited accuracy, measured by the supernet"
    chosen = choose_score(spec, run.dir.root, run.space)
    build_estimator(chosen.name)
    name = canonical_spec(chosen.name)
    if name == SUPERNET_SCORE:
        objective = "inherited accuracy, measured by the supernet"
    elif spec == AUTO:
        objective = (f"accuracy after training alone, predicted by {name}"
                     + (" (the export fine-tunes)" if shipped == "finetuned" and trained else ""))
    else:
        objective = ""      # a score the caller named: "chosen by" already says it
    return ScoreChoice(name, chosen.reason, chosen.line), objective


def resolve_budget(value: str | float | None, low: float, high: float, flag: str) -> float | None:
    """A budget as an amount (`4M`, `150K`, `3`) or as `P%` of the way from the min to the max subnet;
    always finite (`1e400` is an error naming `flag`, never "no budget")."""
    from nas.core.amounts import parse_amount
    from nas.core.budgets import budget_fraction

    if value is None:
        return None
    if not isinstance(value, str):
        return parse_amount(value, flag)     # a number from the Python API: finite, checked there
    fraction = budget_fraction(value, flag)
    return parse_amount(value.strip(), flag) if fraction is None else low + fraction * (high - low)


def build_request(run: Run, searcher: str, *, max_macs: str | float | None, max_params: str | float | None,
                  max_latency_ms: float | None, device: Any, batch: int, trials: int, seed: int,
                  storage: str | None, study: str | None, out: str | Path | None, options: Mapping[str, Any] | None,
                  worker: int, workers: int, progress: bool, score: str, finalists: int,
                  finalist_steps: int | None, latency_table: str | None = None,
                  predict_missing: bool = False, ships: str | None = None) -> SearchRequest:
    """The request of `nas.search`'s arguments (see there), every count, budget, name and the
    score checked before any folder is made or arch evaluated."""
    from nas.engine.devices import resolve_device

    SEARCHERS.get(searcher)      # an unknown searcher fails first, with a did-you-mean
    check_int("trials", trials, 1)
    check_int("workers", workers, 1)
    check_int("worker", worker, 0)
    check_int("batch", batch, 1)
    check_int("finalists", finalists, 0)
    if finalist_steps is not None:
        if not finalists:
            raise ConfigError("finalist_steps: needs finalists (the K best by the score, each fine-tuned "
                              "finalist_steps steps); give both or neither")
        check_int("finalist_steps", finalist_steps, 1)
    if workers > 1 and not finalists and not getattr(SEARCHERS.get(searcher).obj, "shared", False):
        raise ConfigError(f"workers: searcher '{searcher}' keeps its state in one process; use optuna-tpe or "
                          f"optuna-nsga2 to share a study between workers")
    if predict_missing and latency_table is None:
        raise ConfigError("applies to a CSV latency table", param="predict_missing",
                          fix="give {latency_table=CSV[:COLUMN]}")
    if finalists > trials:
        raise ConfigError(f"finalists: {finalists} is more than trials ({trials}): the finalists are among the "
                          "evaluated archs; lower finalists or raise trials")
    resolved_device = resolve_device(device) if device is not None else run.device
    chosen, objective = resolve_score(score, run, ships)
    spec = chosen.name
    low, high = run.space.costs(run.space.min()), run.space.costs(run.space.max())
    constraints = Constraints(resolve_budget(max_macs, low[0], high[0], "max_macs"),
                              resolve_budget(max_params, low[1], high[1], "max_params"), max_latency_ms)
    if out is None and study is not None:
        check_name(study, "study")      # the search folder's name
    out_dir = Path(out) if out is not None else run.dir.search(search_id(searcher, constraints, seed, study, spec))
    check_writable(out_dir, "out" if out is not None else "RUN")
    if workers > 1 and getattr(SEARCHERS.get(searcher).obj, "shared", False):   # spawned workers share a study
        storage = storage if storage is not None else f"journal:///{(out_dir / 'optuna.journal').resolve()}"
        study = study if study is not None else out_dir.name
    return SearchRequest(searcher, out_dir, options, trials, seed, spec, chosen.reason, objective, constraints,
                         str(resolved_device),
                         batch, storage, study, worker, workers, finalists,
                         FINETUNE_STEPS if finalist_steps is None else finalist_steps, FINETUNE_LR,
                         Source(str(run.dir.root.resolve()), run.checkpoint.name, run.step, run.weights), progress,
                         latency_table=latency_table, predict_missing=predict_missing,
                         first=anchor_archs(run) if spec == SUPERNET_SCORE else (), score_line=chosen.line)


def anchor_archs(run: Run) -> tuple[Arch, ...]:
    """The run's anchors (`Strategy.anchor_archs`), canonical, each once."""
    anchors: dict[str, Arch] = {}
    for arch in run.strategy.anchor_archs():
        canonical = run.space.canonical(arch)
        anchors.setdefault(arch_id(canonical), canonical)
    return tuple(anchors.values())


def search_id(searcher: str, constraints: Constraints, seed: int, study: str | None,
              score: str = SUPERNET_SCORE) -> str:
    """Default search directory name: the study, or searcher + budgets + score (unless
    `supernet`; its canonical spelling, cut and hashed when long) + seed (so re-running the same
    command continues the same search, and searches ranked by different scores never resume
    each other)."""
    if study is not None:
        return study
    parts = [searcher, *(BY_NAME[cost].folder_part(budget) for cost, budget in constraints.budgets().items())]
    if score != SUPERNET_SCORE:
        parts.append("score-" + _score_part(score))
    return "-".join(parts + [f"s{seed}"])


def _score_part(score: str) -> str:
    """A score spec as one folder-name part: its characters outside `[A-Za-z0-9._+]` as `_`, and
    past `SCORE_PART_MAX` characters its head and a hash of the whole spec (a name stays within
    the filesystem's 255 bytes, and distinct long specs stay distinct)."""
    part = re.sub(r"[^A-Za-z0-9._+]", "_", score)
    if len(part) <= SCORE_PART_MAX:
        return part
    digest = hashlib.sha256(score.encode()).hexdigest()[:12]
    return f"{part[:SCORE_PART_MAX - len(digest) - 1]}-{digest}"
