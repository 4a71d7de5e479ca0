"""Searchers on NAS-Bench-201: random, evolution and TPE with the benchmark's CIFAR-10 table as
the objective, at several query budgets and seeds, through the product's own search path.

Each cell is `nas search cifar10_nb201 --score table:nb201_cifar10.csv --searcher S --trials N
--seed K --out DIR` (an untrained run: no training, each query a table lookup); the found arch's
accuracy is the table's value of the search's best arch. Queries are distinct archs (a search
never evaluates an arch twice). The objective and the reported figure are the same test
accuracies, as in NAS-Bench-201's own searcher comparisons with the test table as the
oracle; the table's optimum is 94.37. With `--max-macs P%` every search has that budget (of the
config's space's MACs range, as `nas search`) and the optimum is the table's best within it.
Prints mean and sd per (searcher, queries), then the issue's targets (without a budget), then
one JSON line.

    python -m benchmarks.nb201_searchers [--queries 50,100,300] [--seeds 10] [--option evolution.population=20]
        [--searchers random,evolution,optuna-tpe] [--table ../shared/data/nb201/nb201_cifar10.csv] [--max-macs 50%]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.nb201_data import TABLE
from benchmarks import common
from nas import api
from nas.core.errors import ConfigError

OPTIMUM = 94.37


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", default="50,100,300", help="query budgets (--trials), comma-separated")
    parser.add_argument("--seeds", type=int, default=10, help="search seeds 0..N-1 per cell (default 10)")
    parser.add_argument("--searchers", default="random,evolution,optuna-tpe")
    parser.add_argument("--table", type=Path, default=TABLE, help="NAS-Bench-201's CIFAR-10 table")
    parser.add_argument("--config", default="cifar10_nb201")
    parser.add_argument("--option", action="append", default=[], metavar="SEARCHER.KEY=VALUE",
                        help="a searcher option (e.g. evolution.population=20); repeatable")
    parser.add_argument("--max-macs", help="a MACs budget for every search, e.g. 50%% (default: none)")
    return parser.parse_args(argv)


def searcher_options(pairs: list[str]) -> dict[str, dict]:
    """`SEARCHER.KEY=VALUE` pairs as {searcher: {key: value}} (values read as YAML scalars)."""
    options: dict[str, dict] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        searcher, dot, key = name.partition(".")
        if not (eq and dot and searcher and key):
            raise ConfigError(f"--option: expected SEARCHER.KEY=VALUE, got {pair!r}")
        options.setdefault(searcher, {})[key] = yaml.safe_load(value)
    return options


def budget_optimum(config, table: Path, max_macs: str | None) -> float:
    """The best value a search can answer within `max_macs` (None: the table's best): the
    table's value of each canonical arch, as the `table:` score reads it, over those within."""
    if max_macs is None:
        return OPTIMUM
    from estimators.table import read_table
    from nas.core.arch import arch_id

    space = api.build_space(config)
    budget = api.resolve_budget(max_macs, space.macs(space.min()), space.macs(space.max()), "--max-macs")
    values = read_table(f"table:{table}", space)
    canonical = {arch_id(c): c for c in map(space.canonical, space.enumerate())}
    return max(values[ident] for ident, arch in canonical.items() if ident in values and space.macs(arch) <= budget)


def found_accuracy(config, searcher: str, trials: int, seed: int, score: str, root: Path,
                   options: dict | None = None, max_macs: str | None = None) -> float:
    """The table's accuracy of the arch one search answers."""
    out = root / f"{searcher}-{trials}-s{seed}"
    run = api.untrained_run(config, out, "cpu")
    result = api.search(run, searcher, trials=trials, seed=seed, score=score, out=out, progress=False,
                        options=options, max_macs=max_macs)
    return float(result.score_value)


def targets(cells: dict[str, dict]) -> list[str]:
    """The issue's targets, met or missed."""
    lines = []
    evo, rnd = cells.get("evolution-100"), cells.get("random-100")
    if evo and rnd:
        spread = max(evo["sd"], rnd["sd"])
        ahead = evo["mean"] - rnd["mean"]
        lines.append(f"evolution ahead of random at 100 queries by more than the seed spread: {ahead:+.2f} vs sd "
                     f"{spread:.2f}: {'met' if ahead > spread else 'missed'}")
    for name, cell in cells.items():
        if name.endswith("-300"):
            lines.append(f"{name}: mean {cell['mean']:.2f} >= 94.2: {'met' if cell['mean'] >= 94.2 else 'missed'}")
    return lines


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if not args.table.is_file():
        sys.exit(f"no table at {args.table}")
    config = api.load_config(args.config)
    score = f"table:{args.table}"
    options = searcher_options(args.option)
    optimum = budget_optimum(config, args.table, args.max_macs)
    if args.max_macs is not None:
        print(f"max_macs {args.max_macs}: the table's best within it is {optimum:.2f}", flush=True)
    cells: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for searcher in args.searchers.split(","):
            for trials in (int(q) for q in args.queries.split(",")):
                start = time.perf_counter()
                found = [found_accuracy(config, searcher, trials, seed, score, Path(tmp), options.get(searcher),
                                        args.max_macs) for seed in range(args.seeds)]
                cells[f"{searcher}-{trials}"] = {
                    "searcher": searcher, "queries": trials, "options": options.get(searcher, {}),
                    "found": found, "mean": statistics.fmean(found),
                    "sd": statistics.stdev(found) if len(found) > 1 else 0.0,
                    "max_macs": args.max_macs, "optimum": optimum,
                    "optimum_hits": sum(round(f, 2) >= optimum for f in found),
                    "seconds": round(time.perf_counter() - start, 1)}
                c = cells[f"{searcher}-{trials}"]
                options_shown = f" {c['options']}" if c["options"] else ""
                print(f"{searcher:11s} {trials:4d} queries{options_shown}: {c['mean']:.2f} +- {c['sd']:.2f} "
                      f"(min {min(found):.2f}, max {max(found):.2f}, optimum {c['optimum_hits']}/{len(found)}) "
                      f"[{c['seconds']} s]", flush=True)
    for line in targets(cells) if args.max_macs is None else []:
        print(line)
    common.emit("nb201_searchers", {"cells": cells}, argv)
    return cells


if __name__ == "__main__":
    common.run(main)
