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

    python benchmarks/search_regret.py RUN --budget 50% [--scores supernet,macs,auto]
        [--searcher evolution] [--trials 40] [--random 10] [--seeds 2] [--ground-truth DIR]
        [--recipe FILE] [--epochs N] [--workers 2] [--seed 0] [--runs-dir runs]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nas import api  # noqa: E402
from nas.core.arch import Arch, arch_id  # noqa: E402
from nas.core.errors import ConfigError, NasError  # noqa: E402
from nas.core.registry import ESTIMATORS, SUPERNET_SCORE  # noqa: E402
from nas.core.rng import python_rng  # noqa: E402
from nas.engine.fidelity.runner import recipe_ground_truth, standalone_record  # noqa: E402
from nas.engine.run_dir import DEFAULT_RUNS_DIR, cpu_model  # noqa: E402
from nas.engine.searching.stage import resolve_budget  # noqa: E402

BASELINES = (SUPERNET_SCORE, "macs", "params")
MAX_DRAWS = 100_000     # random draws before giving up on finding N distinct feasible archs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="trained run (directory or name under --runs-dir)")
    parser.add_argument("--budget", required=True, help="MACs budget of every search, e.g. 4M or 50%%")
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
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
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
              "wall_s": round(time.perf_counter() - started, 1), "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    try:
        main()
    except NasError as error:      # bad input: one line, exit 2, as the nas CLI
        print(f"search_regret: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
