"""A family in one command: one search answers several budgets (`nas.search_family`).

The members are searched in ascending budget order, each an ordinary one-budget search in its
own folder (`nas.engine.searching.family`), with `trials` evaluations each, sharing what they
learn:
- an arch an earlier member evaluated is not evaluated again: the score and the weights are
  the family's, so its earlier record is told again, marked `reused_from` (the member folder
  that evaluated it);
- each later member starts from the earlier members' answers, which meet its larger budget:
  they are evaluated (reused) first, then the searcher proposes its own;
- each member's first proposals cover its budget's neighbourhood: the searcher's window (the
  costs from the previous member's budget up to this one's; see `SearchRequest.window`);
- each member draws its own stream: member 1 searches with the family's seed, member k > 1 with
  `member_seed(seed, k)`, so no member replays another's draws (which, shared, would be told
  again and answer the earlier member's arch for a larger budget).
Every member's request is built and checked before the first is searched. Re-running the same
command continues the family: a finished member evaluates nothing, a killed one resumes from its
results.jsonl as a one-budget search does; family.json lists the members found so far.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from nas.core.arch import Arch, arch_id
from nas.core.config import config_spelling
from nas.core.costs import BY_NAME
from nas.core.errors import ConfigError
from nas.core.files import check_writable
from nas.core.locks import folder_lock
from nas.core.rng import derive_seed
from nas.core.search_config import BUDGET_KEYS, SearchSettings
from nas.core.stopping import sigterm_raises
from nas.core.wording import announce
from nas.engine.run_dir import check_name
from nas.engine.searching.costs import Constraints
from nas.engine.searching.family import FAMILY, FamilyResult, member_dir, read_family, write_family
from nas.engine.searching.family_budgets import FamilyBudgets, family_budgets
from nas.engine.searching.request import SearchRequest, build_request, resolve_score, search_id
from nas.engine.searching.shared_evaluations import REUSED, SharedEvaluations  # noqa: F401  (REUSED, also here)
from nas.engine.untrained import UNTRAINED

if TYPE_CHECKING:
    from nas.engine.run import Run
    from nas.engine.searching.results import SearchResult


def member_seed(seed: int, index: int) -> int:
    """The seed member `index` (1-based) of a family seeded `seed` searches with: `seed` for the
    first (a one-budget search's stream), one derived from both for the others."""
    return seed if index == 1 else derive_seed(seed, "family member", index) % 2**31


def family_id(searcher: str, budgets: FamilyBudgets, seed: int, score: str) -> str:
    """The family folder's default name, from the arguments: `family-evolution-macs3.2M-6.1M-n3-s0`
    (the first and last budgets and the count; the score unless `supernet`, as a one-budget
    search's name has it)."""
    cost = BY_NAME[budgets.cost]
    digits = cost.distinct_digits(budgets.budgets)
    span = (cost.folder_part(budgets.budgets[0], digits) + "-"
            + cost.folder_part(budgets.budgets[-1], digits)[len(cost.name):])
    tail = search_id(searcher, Constraints(), seed, None, score)[len(searcher):]     # [-score-X]-sS
    return f"family-{searcher}-{span}-n{len(budgets.budgets)}{tail}"


def search_family(run: Run, searcher: str | None = None, *, max_macs: Any = None, max_params: Any = None,
                  max_latency_ms: Any = None, members: int | None = None, device: Any = None, batch: int = 1,
                  trials: int | None = None, seed: int | None = None, storage: str | None = None,
                  study: str | None = None, out: str | Path | None = None, options: Mapping[str, Any] | None = None,
                  workers: int = 1, progress: bool = True, score: str | None = None, finalists: int | None = None,
                  finalist_steps: int | None = None, latency_table: str | None = None, predict_missing: bool = False,
                  ships: str | None = None) -> FamilyResult:
    """Search the run for one subnet per budget, sharing evaluations (`nas search` with a budget
    list or `--members`; see the module docstring).

    Exactly one of `max_macs`, `max_params`, `max_latency_ms` is a list (or a comma-separated
    string: `"35%,50%,75%"`), or `members=K` asks K MACs budgets from 20% to 80% of the MACs range;
    the other budgets, one value each, are shared by every member. `trials` is per member; `study`
    (with a shared Optuna storage) names member k's study `<study>-m<k>`. The other arguments are
    `nas.search`'s; as there, those left None are the run config's `search:` section's (with no
    budget given, its budgets). Returns the members' results and the family folder (`out`,
    default `runs/NAME/search/family-...`, named after the arguments so that re-running
    continues it).
    """
    settings = run.config.search.settings(run.config.source, searcher=searcher, max_macs=max_macs,
                                          max_params=max_params, max_latency_ms=max_latency_ms, members=members,
                                          trials=trials, seed=seed, score=score, finalists=finalists)
    with settings.blamed():
        return _search_family(run, settings, device=device, batch=batch, storage=storage, study=study, out=out,
                              options=options, workers=workers, progress=progress, finalist_steps=finalist_steps,
                              latency_table=latency_table, predict_missing=predict_missing, ships=ships)


def _search_family(run: Run, settings: SearchSettings, *, out: str | Path | None, study: str | None,
                   progress: bool, **arguments: Any) -> FamilyResult:
    """`search_family` with its settings resolved (`arguments`: the rest of `build_request`'s)."""
    from nas.engine.searching.stage import check_search, search_request

    values = settings.values
    searcher, seed, trials = values["searcher"], values["seed"], values["trials"]
    plan = family_budgets(run, **{key: values[key] for key in BUDGET_KEYS})
    if study is not None:
        check_name(study, "study")      # each member's study, and with no storage its journal's folder
    spec = resolve_score(values["score"], run, arguments["ships"])[0].name
    folder = Path(out) if out is not None else run.dir.search(family_id(searcher, plan, seed, spec))
    check_writable(folder, "out" if out is not None else "RUN")
    digits = BY_NAME[plan.cost].distinct_digits(plan.budgets)
    # with workers sharing a study and no `study` given, each member's study is named after its
    # folder (and journaled in it unless `storage` is given), as a one-budget search's
    requests = [build_request(run, searcher, **plan.member(k), trials=trials, seed=member_seed(seed, k + 1),
                              score=values["score"], finalists=values["finalists"],
                              study=None if study is None else f"{study}-m{k + 1}",
                              out=folder / member_dir(k + 1, plan.cost, plan.budgets[k], digits), worker=0,
                              progress=progress, **arguments)
                for k in range(len(plan.budgets))]
    for request in requests:
        check_search(run, request)
    record = _family_record(plan, requests[0], trials)
    if run.checkpoint.name == UNTRAINED:     # what `nas export CONFIG --family DIR` names (nothing trained)
        record["config"] = config_spelling(run.config)
    shared = SharedEvaluations()
    results: list[SearchResult] = []
    origin = settings.budget_origin()
    stopped = (f"the family search stopped; its finished members and every arch evaluated are kept in {folder}; "
               "run the same nas search again to resume it")
    with sigterm_raises(stopped), folder_lock(folder, "family search"):
        _check_resumed(folder, record)
        for k, request in enumerate(requests):
            earlier = tuple(r.best for r in results)
            request = dataclasses.replace(request, first=_first(request.first, earlier), window=_window(plan, k),
                                          announce_score=k == 0, reused=dict(shared.known) if k else {})
            if progress:
                param = BY_NAME[plan.cost].param
                budget = plan.specs[k] if settings.budgets_from_config else f"{{{param}={plan.specs[k]}}}"
                announce(f"family member {k + 1}/{len(requests)}: {budget}" + (f" ({origin})" if origin else ""))
            result = search_request(run, request, shared.wrap)
            shared.add(result.trials, request.out.name)
            results.append(result)
            write_family(folder, _with_members(record, plan, results))
    data = _with_members(record, plan, results)
    new = sum(result.new for result in results) - shared.reused      # spawned workers count only their own
    return FamilyResult(folder, plan.cost, list(plan.budgets), list(plan.specs), results, data["evaluations"], new,
                        data)


def _first(anchors: tuple[Arch, ...], earlier: tuple[Arch, ...]) -> tuple[Arch, ...]:
    """The anchors, then the earlier members' answers, each once."""
    first: dict[str, Arch] = {}
    for arch in (*anchors, *earlier):
        first.setdefault(arch_id(arch), dict(arch))
    return tuple(first.values())


def _window(plan: FamilyBudgets, k: int) -> dict[str, float] | None:
    """Where member k's first proposals go: above the previous member's budget (None for the
    first member: the searcher's own window below its budget)."""
    return {plan.cost: plan.budgets[k - 1]} if k else None


def _family_record(plan: FamilyBudgets, request: SearchRequest, trials: int) -> dict[str, Any]:
    """family.json without its members."""
    source = request.source
    return {"kind": "family", "cost": plan.cost, "budget_specs": list(plan.specs), "budgets": list(plan.budgets),
            "other_budgets": {name: value for name, value in request.constraints.budgets().items()
                              if name != plan.cost},
            "members": [], "searcher": request.searcher, "score": request.score,
            "score_reason": request.score_reason, "seed": request.seed, "trials": trials, "evaluations": 0,
            "source": None if source is None else {"run": source.run, "checkpoint": source.checkpoint,
                                                   "step": source.step, "weights": source.weights},
            "latency_table": request.latency_table, "device": request.device, "batch": request.batch}


def _with_members(record: dict[str, Any], plan: FamilyBudgets, results: list[SearchResult]) -> dict[str, Any]:
    members = [{"index": k + 1, "budget": plan.budgets[k], "budget_spec": plan.specs[k], "dir": r.dir.name,
                "arch_id": r.arch_id, "arch": r.best, "macs": r.macs, "params": r.params, "latency_ms": r.latency_ms,
                "val_top1": r.val_top1, "score": r.score, "score_value": r.score_value}
               for k, r in enumerate(results)]
    distinct = {t["arch_id"] for r in results for t in r.trials}
    return {**record, "members": members, "evaluations": len(distinct)}


def _check_resumed(folder: Path, record: dict[str, Any]) -> None:
    """Refuse to continue a family folder searched with other settings."""
    if not (folder / FAMILY).is_file():
        return
    stored = read_family(folder)
    keys = ("cost", "budgets", "other_budgets", "searcher", "score", "seed")     # more trials continue it
    diffs = [f"{key} {stored.get(key)} there, {record[key]} now" for key in keys if stored.get(key) != record[key]]
    before = stored.get("source")
    if weights_identity(before, like=before) != weights_identity(record["source"], like=before):
        diffs.append(f"source {stored.get('source')} there, {record['source']} now")
    if diffs:
        raise ConfigError(f"{folder}: a family searched with other settings ({'; '.join(diffs)})", param="out",
                          fix="repeat the same command to continue it, or give another {out}")
    if record["trials"] < stored["trials"]:      # family.json would claim fewer trials than its members ran
        raise ConfigError(f"{record['trials']} is fewer than the {stored['trials']} per member {folder} was searched "
                          "with", param="trials", fix=f"repeat it with {{trials={stored['trials']}}}, or more to "
                                                      "continue it")


def weights_identity(source: Mapping[str, Any] | None, like: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """What identifies the weights a family was searched on: its source's checkpoint, step and
    weights digest, never the run's path (a moved run or a relocated clone is the same run). With
    `like`, a stored source written before the digest existed: only the keys it has."""
    if source is None:
        return None
    keys = [key for key in ("checkpoint", "step", "weights") if like is None or key in like]
    return {key: source.get(key) for key in keys}
