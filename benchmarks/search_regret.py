"""Search regret: how good is the arch a budgeted search returns, by each score, once trained alone?

1. Runs `nas search RUN --max-macs BUDGET --score S` once per score (default: supernet, macs,
   params, every cheap zero-cost proxy registered, and auto; `--scores` to choose), with
   `--searcher evolution --trials 40` by default. Searches land in the run's usual search
   folders, so re-running resumes them.
2. Draws `--random N` distinct random archs within the same budget (seeded by `--seed`).
3. Trains every returned arch and every random arch alone with the ground-truth machinery of
   `nas fidelity` (the run config's recipe, or `--recipe`/`--epochs`; `--seeds` seeds each;
   cached under `--ground-truth DIR`, by default the run's `fidelity/ground_truth`, so `nas
   fidelity` and this benchmark share their trainings), `--workers` trainings at a time.
4. Prints one table row per score: the arch found, its MACs, its score value (and the
   supernet's validation top-1 when the score evaluated it), its standalone test top-1 (mean
   +- sample standard deviation over seeds), and its regret: the best random arch's standalone
   mean minus it, and the median random arch's minus it, in points (negative = better than
   random). Then one JSON line with everything.

    python -m benchmarks.search_regret RUN --budget 50% [--scores supernet,macs,auto]
        [--searcher evolution] [--trials 40] [--random 10] [--seeds 2] [--ground-truth DIR]
        [--recipe FILE] [--epochs N] [--workers 2] [--seed 0] [--runs-dir runs]

With `--crowd ROOT` the comparison is the committed ground truth instead of random archs: the
crowd of a budget is every arch that ROOT caches for the run's space and recipe (both seeds)
within that budget, read and never retrained. Several budgets (`--budget 35%,50%,75%`) and
search seeds (`--search-seeds 0,1`) give one cell per (budget, seed, score); `--finalists K`
adds, for each score, the same search followed by its K finalists (`nas search --finalists K`,
which resumes the plain search's folder). Each answer not in the crowd is trained alone into
`--ground-truth` (`--seeds` seeds each; the table uses every seed cached, at most 2). Per cell:
the answer's standalone test top-1, its rank among the crowd, the crowd's best and median, the
call's wall time and what the search cost however many calls it took (its evaluations' seconds,
its finalists' fine-tunes' seconds); then, per row, the targets of issue 37.

    python -m benchmarks.search_regret RUN --crowd benchmarks/ground_truth --budget 35%,50%,75%
        --search-seeds 0,1 --scores auto,supernet --finalists 4 --workers 2
        --ground-truth benchmarks/ground_truth_searched
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from nas import api
from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS, SUPERNET_SCORE
from nas.core.rng import python_rng
from nas.engine.fidelity.runner import recipe_ground_truth, standalone_record
from nas.engine.run_dir import DEFAULT_RUNS_DIR
from nas.engine.searching.stage import resolve_budget

BASELINES = (SUPERNET_SCORE, "macs", "params")
MAX_DRAWS = 100_000     # random draws before giving up on finding N distinct feasible archs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="trained run (directory or name under --runs-dir)")
    parser.add_argument("--budget", required=True, help="MACs budget of every search, e.g. 4M or 50%%; with "
                        "--crowd, a comma-separated list")
    parser.add_argument("--scores", help="comma-separated scores (default: supernet, macs, params, every cheap "
                        "proxy, auto)")
    parser.add_argument("--searcher", default="evolution")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--random", type=int, default=10, help="random feasible archs to compare with")
    parser.add_argument("--seeds", type=int, default=2, help="standalone trainings per arch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the searches and of the random archs")
    parser.add_argument("--ground-truth", metavar="DIR", help="standalone cache (default RUN/fidelity/ground_truth)")
    parser.add_argument("--recipe", help="YAML overrides of the run config's train:/data: sections")
    parser.add_argument("--epochs", type=int, help="standalone epochs (default: the recipe's)")
    parser.add_argument("--workers", type=int, default=1, help="standalone trainings at a time (1 thread each)")
    parser.add_argument("--crowd", metavar="ROOT", help="compare with the ground-truth archs ROOT caches for the "
                        "run's recipe instead of random archs")
    parser.add_argument("--search-seeds", default=None, help="with --crowd: comma-separated seeds of the searches "
                        "(default: --seed)")
    parser.add_argument("--finalists", type=int, default=0, help="with --crowd: also each score's search with K "
                        "finalists")
    parser.add_argument("--train-methods", help="with --crowd: comma-separated methods (e.g. auto,"
                        "auto+finalists4) whose new answers are trained; the others are reported where cached "
                        "(default: every method's)")
    parser.add_argument("--finalist-steps", type=int, help="with --finalists: fine-tune steps of each finalist "
                        "(default: nas search's)")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.finalists < 0:
        parser.error(f"--finalists: must be >= 0, got {args.finalists}")
    if (args.search_seeds is not None or args.finalists) and args.crowd is None:
        parser.error("--search-seeds and --finalists need --crowd")
    for flag in ("trials", "random", "seeds", "workers"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag}: must be >= 1, got {getattr(args, flag)}")
    return args


def default_scores() -> list[str]:
    """supernet, macs, params, then every cheap registered estimator that reads no more than
    training batches (the zero-cost proxies), then auto."""
    proxies = sorted(name for name in ESTIMATORS.names()
                     if name not in BASELINES and ESTIMATORS.get(name).obj.cheap
                     and not ESTIMATORS.get(name).obj.population and ESTIMATORS.get(name).obj.needs <= {"batches"})
    return [*BASELINES, *proxies, "auto"]


def random_archs(space: Any, max_macs: float, count: int, seed: int) -> list[Arch]:
    """`count` distinct canonical archs within `max_macs`, drawn uniformly from the space (a pure
    function of `seed`)."""
    found: dict[str, Arch] = {}
    for draw in range(MAX_DRAWS):
        arch = space.canonical(space.sample(python_rng(seed, "search-regret", draw)))
        if space.macs(arch) <= max_macs:
            found.setdefault(arch_id(arch), arch)
            if len(found) == count:
                return list(found.values())
    raise ConfigError(f"--random: found only {len(found)} distinct archs within the budget in {MAX_DRAWS} draws; "
                      f"lower --random or raise --budget")


def regret(reference: float, value: float) -> float:
    """How many points of standalone test top-1 `value` is below `reference`."""
    return round(100.0 * (reference - value), 4)


def score_rows(found: dict[str, Any], standalone: dict[str, dict[str, Any]], best: float,
               median: float) -> dict[str, dict[str, Any]]:
    """One row per score: the search's arch and its standalone results and regrets."""
    rows = {}
    for score, result in found.items():
        alone = standalone[result.arch_id]
        seeds = alone["standalone_test_top1_seeds"]
        rows[score] = {"score": result.score, "arch_id": result.arch_id, "arch": result.best, "macs": result.macs,
                       "score_value": result.score_value, "val_top1": result.val_top1, "search_dir": str(result.dir),
                       "standalone_mean": alone["standalone_test_top1"], "standalone_seeds": seeds,
                       "standalone_sd": statistics.stdev(seeds) if len(seeds) > 1 else 0.0,
                       "regret_vs_best_random": regret(best, alone["standalone_test_top1"]),
                       "regret_vs_median_random": regret(median, alone["standalone_test_top1"])}
    return rows


def format_table(rows: dict[str, dict[str, Any]], best: float, median: float, randoms: int) -> str:
    """The table printed for the rows of `score_rows`."""
    lines = [f"{'score':24s} {'arch_id':10s} {'MACs':>9s} {'score value':>22s} {'standalone %':>15s} "
             f"{'regret best':>11s} {'regret med':>10s}"]
    for name, row in rows.items():
        label = name if name == row["score"] else f"{name}->{row['score']}"
        value = f"{row['score_value']:.6g}"
        if row["val_top1"] is not None and row["score"] != SUPERNET_SCORE:
            value += f" (val {100 * row['val_top1']:.2f})"
        alone = f"{100 * row['standalone_mean']:.2f} +- {100 * row['standalone_sd']:.2f}"
        lines.append(f"{label:24s} {row['arch_id']:10s} {row['macs'] / 1e6:8.3f}M {value:>22s} {alone:>15s} "
                     f"{row['regret_vs_best_random']:+11.2f} {row['regret_vs_median_random']:+10.2f}")
    lines.append(f"random ({randoms} archs within the budget): best {100 * best:.2f}, median {100 * median:.2f} "
                 "(regret: points below them, standalone test top-1)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.crowd is not None:
        return crowd_main(args, argv)
    started = time.perf_counter()
    run = api.load_run(args.run, args.runs_dir)
    space = run.space
    scores = [s.strip() for s in args.scores.split(",") if s.strip()] if args.scores else default_scores()
    low, high = space.macs(space.min()), space.macs(space.max())
    max_macs = resolve_budget(args.budget, low, high, "--budget")
    root = Path(args.ground_truth) if args.ground_truth is not None else run.dir.fidelity("ground_truth")
    truth = recipe_ground_truth(run.config, space, api.standalone_model, root, args.recipe, args.epochs)

    found = {}
    for score in scores:
        found[score] = api.search(run, args.searcher, max_macs=max_macs, trials=args.trials, seed=args.seed,
                                  score=score, progress=not args.quiet)
        print(f"searched by {score}: {found[score].arch_id} ({found[score].dir})", file=sys.stderr, flush=True)
    randoms = random_archs(space, max_macs, args.random, args.seed)
    archs = {arch_id(a): a for a in [*randoms, *(result.best for result in found.values())]}
    standalone: dict[str, dict[str, Any]] = {}

    def keep(arch: Arch, results: list[dict[str, Any]]) -> None:
        standalone[arch_id(arch)] = standalone_record(arch, results)

    new = truth.collect(list(archs.values()), args.seeds, args.workers, keep, progress=not args.quiet)
    random_means = [standalone[arch_id(a)]["standalone_test_top1"] for a in randoms]
    best, median = max(random_means), statistics.median(random_means)
    rows = score_rows(found, standalone, best, median)
    print(format_table(rows, best, median, len(randoms)), flush=True)
    report = {"run": str(run.dir.root), "step": run.step, "budget": args.budget, "max_macs": max_macs,
              "searcher": args.searcher, "trials": args.trials, "seed": args.seed, "seeds": args.seeds,
              "ground_truth": str(truth.folder), "recipe_digest": truth.digest, "length": truth.recipe.length(),
              "scores": rows, "random": [{"arch_id": arch_id(a), "macs": space.macs(a),
                                          "standalone_mean": standalone[arch_id(a)]["standalone_test_top1"],
                                          "standalone_seeds": standalone[arch_id(a)]["standalone_test_top1_seeds"]}
                                         for a in randoms],
              "random_best": best, "random_median": median, "trainings_now": new, "workers": args.workers,
              "wall_s": round(time.perf_counter() - started, 1)}
    return common.emit("search_regret", report, argv)


# --- --crowd: the answers against the committed ground truth (issue 37) ---------------------------

def crowd_archs(truth: Any) -> dict[str, dict[str, Any]]:
    """Every arch the ground-truth folder of `truth` holds with all of seeds 0 and 1 valid, as
    `standalone_record`s by arch id."""
    crowd = {}
    for path in sorted(truth.folder.glob("*-s0.json")):
        arch = json.loads(path.read_text())["arch"]
        seeds = [truth.cached(arch, k) for k in (0, 1)]
        if all(seed is not None for seed in seeds):
            crowd[arch_id(arch)] = standalone_record(arch, seeds)
    return crowd


def seed_sd(records: list[dict[str, Any]]) -> float:
    """The pooled seed-to-seed standard deviation of one training (the root mean of each arch's
    sample variance over its seeds)."""
    return statistics.fmean(statistics.variance(r["standalone_test_top1_seeds"]) for r in records) ** 0.5


def place(value: float, arch: str, crowd: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a standalone mean `value` of arch `arch` stands among `crowd` (the arch itself left
    out if it is a member): rank (1 = best), the fraction of the others strictly below it, the
    crowd's best, median and 75th percentile."""
    others = [r["standalone_test_top1"] for r in crowd if r["arch_id"] != arch]
    means = [r["standalone_test_top1"] for r in crowd]
    return {"rank": 1 + sum(other > value for other in others), "of": len(others) + 1,
            "percentile": sum(other < value for other in others) / len(others),
            "crowd_best": max(means), "crowd_median": statistics.median(means),
            "crowd_p75": statistics.quantiles(means, n=4, method="inclusive")[2]}


def crowd_targets(cells: list[dict[str, Any]], spread: float, min_first: dict[str, bool]) -> dict[str, Any]:
    """Issue 37's targets over one row's cells (one method, every budget and seed, trained alone)."""
    if not cells:
        return {"cells": 0}
    return {"cells": len(cells),
            "at_or_above_median": sum(c["standalone_mean"] >= c["crowd_median"] for c in cells),
            "mean_percentile": statistics.fmean(c["percentile"] for c in cells),
            "above_p75_on_average": statistics.fmean(c["standalone_mean"] - c["crowd_p75"] for c in cells) > 0,
            "within_spread_of_best": sum(c["crowd_best"] - c["standalone_mean"] <= spread for c in cells),
            "min_subnet_answers": sum(c["is_min"] for c in cells),
            "min_subnet_unjustified": sum(c["is_min"] and not min_first[c["budget"]] for c in cells)}


def format_crowd(cells: list[dict[str, Any]], targets: dict[str, dict[str, Any]], spread: float) -> str:
    """The table printed by `crowd_main`: a line per cell, then a line per method's targets."""
    lines = [f"{'budget':>7s} {'seed':>4s} {'method':22s} {'arch_id':10s} {'MACs':>8s} {'standalone %':>14s} "
             f"{'rank':>6s} {'crowd best / median':>19s} {'wall s':>7s} {'eval s':>7s} {'final. s':>8s}"]
    for c in cells:
        if not c["trained"]:
            lines.append(f"{c['budget']:>7s} {c['search_seed']:4d} {c['method']:22s} {c['arch_id']:10s} "
                         f"{c['macs'] / 1e6:7.3f}M {'not trained':>14s} {'':>6s} {'':>19s} {c['wall_s']:7.1f} "
                         f"{c['eval_s']:7.1f} {c['finalists_s']:8.1f}")
            continue
        alone = (f"{100 * c['standalone_mean']:.2f} +- {100 * c['standalone_sd']:.2f}" if c["standalone_sd"] is not None
                 else f"{100 * c['standalone_mean']:.2f} (1 seed)")
        mark = " (min subnet)" if c["is_min"] else ""
        lines.append(f"{c['budget']:>7s} {c['search_seed']:4d} {c['method']:22s} {c['arch_id']:10s} "
                     f"{c['macs'] / 1e6:7.3f}M {alone:>14s} {c['rank']:3d}/{c['of']:<2d} "
                     f"{100 * c['crowd_best']:8.2f} / {100 * c['crowd_median']:.2f} {c['wall_s']:7.1f} "
                     f"{c['eval_s']:7.1f} {c['finalists_s']:8.1f}{mark}")
    for method, t in targets.items():
        if not t["cells"]:
            lines.append(f"{method}: no answer trained alone")
            continue
        lines.append(f"{method}: at or above the crowd median in {t['at_or_above_median']}/{t['cells']} cells; mean "
                     f"percentile {100 * t['mean_percentile']:.0f}% (above the 75th on average: "
                     f"{'yes' if t['above_p75_on_average'] else 'no'}); within the seed sd ({100 * spread:.2f} points) "
                     f"of the crowd's best in {t['within_spread_of_best']}/{t['cells']}; min subnet "
                     f"{t['min_subnet_answers']} times ({t['min_subnet_unjustified']} where the ground truth does "
                     "not rank it first)" + (f"; {t['untrained']} cell(s) not trained" if t["untrained"] else ""))
    return "\n".join(lines)


def crowd_main(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    """The `--crowd` mode: every (budget, search seed, method) answer against the committed crowd."""
    started = time.perf_counter()
    run = api.load_run(args.run, args.runs_dir)
    space = run.space
    scores = [s.strip() for s in args.scores.split(",") if s.strip()] if args.scores else ["auto", SUPERNET_SCORE]
    seeds = [int(s) for s in args.search_seeds.split(",")] if args.search_seeds else [args.seed]
    budgets = [b.strip() for b in args.budget.split(",") if b.strip()]
    low, high = space.macs(space.min()), space.macs(space.max())
    limits = {b: resolve_budget(b, low, high, "--budget") for b in budgets}
    crowd_truth = recipe_ground_truth(run.config, space, api.standalone_model, args.crowd, args.recipe, args.epochs)
    crowd = crowd_archs(crowd_truth)
    if not crowd:
        raise ConfigError(f"--crowd: {crowd_truth.folder} holds no arch trained with seeds 0 and 1 for this run's "
                          "space and recipe")
    root = Path(args.ground_truth) if args.ground_truth is not None else run.dir.fidelity("ground_truth")
    truth = recipe_ground_truth(run.config, space, api.standalone_model, root, args.recipe, args.epochs)
    min_id = arch_id(space.canonical(space.min()))
    feasible = {b: [r for r in crowd.values() if r["macs"] <= limits[b]] for b in budgets}
    for budget, members in feasible.items():
        if len(members) < 2:
            raise ConfigError(f"--budget: {budget}: only {len(members)} crowd arch(s) within it")
    min_first = {b: min_id in {r["arch_id"] for r in feasible[b]}
                 and max(feasible[b], key=lambda r: r["standalone_test_top1"])["arch_id"] == min_id for b in budgets}

    answers = []        # (budget, seed, method, SearchResult, wall seconds)
    for budget in budgets:
        for seed in seeds:
            for score in scores:
                kwargs = dict(max_macs=limits[budget], trials=args.trials, seed=seed, score=score,
                              progress=not args.quiet)
                clock = time.perf_counter()
                plain = api.search(run, args.searcher, **kwargs)
                plain_s = time.perf_counter() - clock
                answers.append((budget, seed, score, plain, plain_s))
                if args.finalists:
                    clock = time.perf_counter()
                    picked = api.search(run, args.searcher, finalists=args.finalists,
                                        finalist_steps=args.finalist_steps, workers=args.workers, **kwargs)
                    answers.append((budget, seed, f"{score}+finalists{args.finalists}", picked,
                                    plain_s + time.perf_counter() - clock))
                print(f"searched {budget}, seed {seed}, by {score}: {plain.arch_id}"
                      + (f", with finalists {answers[-1][3].arch_id}" if args.finalists else ""),
                      file=sys.stderr, flush=True)

    standalone = dict(crowd)

    def keep(arch: Arch, results: list[dict[str, Any]]) -> None:
        standalone[arch_id(arch)] = standalone_record(arch, results)

    chosen = set(args.train_methods.split(",")) if args.train_methods else {a[2] for a in answers}
    new = {a[3].arch_id: a[3].best for a in answers if a[3].arch_id not in crowd and a[2] in chosen}
    trained = truth.collect(list(new.values()), args.seeds, args.workers, keep, progress=not args.quiet) if new else 0
    for answer in answers:          # the other answers, and more seeds, where the cache holds them (seeds 0..k)
        cached = []
        for k in range(2):
            if (record := truth.cached(answer[3].best, k)) is None:
                break
            cached.append(record)
        if answer[3].arch_id not in crowd and len(cached) > len(standalone.get(answer[3].arch_id, {}).get(
                "standalone_test_top1_seeds", ())):
            keep(answer[3].best, cached)
    cells = []
    for budget, seed, method, result, wall in answers:
        cell = {"budget": budget, "max_macs": limits[budget], "search_seed": seed, "method": method,
                "score": result.score, "arch_id": result.arch_id, "arch": result.best, "macs": result.macs,
                "in_crowd": result.arch_id in crowd, "is_min": result.arch_id == min_id,
                "wall_s": round(wall, 1), "search_dir": str(result.dir), "trained": result.arch_id in standalone,
                "eval_s": round(sum(r.get("eval_seconds", 0.0) for r in result.trials), 1),
                "finalists_s": round(sum(f["finalist_seconds"] for f in result.finalists["finalists"]), 1)
                if result.finalists else 0.0}
        if cell["trained"]:
            alone = standalone[result.arch_id]
            cell.update({"standalone_mean": alone["standalone_test_top1"],
                         "standalone_seeds": alone["standalone_test_top1_seeds"],
                         "standalone_sd": (statistics.stdev(alone["standalone_test_top1_seeds"])
                                           if len(alone["standalone_test_top1_seeds"]) > 1 else None),
                         **place(alone["standalone_test_top1"], result.arch_id, feasible[budget])})
        cells.append(cell)
    spread = seed_sd(list(crowd.values()))
    methods = list(dict.fromkeys(c["method"] for c in cells))
    targets = {m: crowd_targets([c for c in cells if c["method"] == m and c["trained"]], spread, min_first)
               for m in methods}
    for method, row in targets.items():
        row["untrained"] = sum(c["method"] == method and not c["trained"] for c in cells)
    print(format_crowd(cells, targets, spread), flush=True)
    report = {"run": str(run.dir.root), "step": run.step, "space": space.name, "budgets": budgets,
              "search_seeds": seeds, "searcher": args.searcher, "trials": args.trials, "finalists": args.finalists,
              "crowd": str(crowd_truth.folder), "crowd_size": len(crowd),
              "crowd_feasible": {b: len(feasible[b]) for b in budgets}, "min_subnet_first": min_first,
              "seed_sd": spread, "ground_truth": str(truth.folder), "recipe_digest": truth.digest,
              "cells": cells, "targets": targets, "trainings_now": trained, "workers": args.workers,
              "wall_s": round(time.perf_counter() - started, 1)}
    return common.emit("search_regret", report, argv)


if __name__ == "__main__":
    common.run(main)
