"""Which score `nas search --score auto` should use without a fidelity summary, chosen on one half
of the committed ground truths and reported on the other.

For each `--config` (default: the two shipped spaces), every arch of the committed ground truth
(`--ground-truth`, the config's own recipe) with all `--seeds` standalone seeds cached is scored
by every candidate: the free baselines and cheap zero-cost proxies (standard-initialised, 2
seeded batches of 64 training images and 3 initialisations, as a search scores them), rank
fusions of MACs with them (equal weights, `estimators/fused.py`), and, with `--run
SPACE=RUN_DIR`, the trained supernet's BN-recalibrated validation top-1 and its fusions (the run
is only read). The archs are split in two halves by a fixed seeded draw stratified by MACs
(archs sorted by MACs, each consecutive pair split at random): the CHOOSE half picks, per space,
the candidate with the best within-MACs-tercile Kendall tau, and the generic default is the one
with the best mean over the spaces; the REPORT half, which took no part in the choice, grades
them. Prints a table per space and one JSON line.

    python -m benchmarks.default_score --ground-truth benchmarks/ground_truth \\
        --run cell201=/work/bench-runs/fashion_mnist_cell201-s0 --scores /tmp/default-scores.json

`--scores FILE` keeps every score computed (keyed by space, estimator and arch id) so a rerun
only computes what is new.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from estimators import EstimatorContext, build_estimator
from estimators.fused import normalised_ranks
from nas import api
from nas.core.arch import arch_id
from nas.engine.fidelity.runner import recipe_ground_truth, standalone_record
from nas.engine.fidelity.report import seed_agreement
from nas.engine.fidelity.ground_truth import recipe_source
from nas.engine.fidelity.rank_stats import kendall_tau_b, macs_terciles, within_bin_tau
from estimators import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES
from nas.engine.searching.score import BATCH_SEED

CONFIGS = ("fashion_mnist_cell201", "fashion_mnist_mbv3")
PROXIES = ("synflow", "naswot", "jacov", "snip", "grad_norm", "zico")
BASELINES = ("macs", "params")
SUPERNET = "supernet"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ground-truth", default="benchmarks/ground_truth", metavar="DIR")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--seeds", type=int, default=2, help="standalone seeds an arch needs cached")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--run", action="append", default=[], metavar="SPACE=RUN_DIR",
                        help="a trained run whose supernet to score (space name as in the config)")
    parser.add_argument("--scores", metavar="FILE", help="cache of computed scores (read, then extended)")
    return parser.parse_args(argv)


def cached_records(config_name: str, root: str, seeds: int) -> tuple[object, list[dict], str]:
    """(space, standalone records of every arch with `seeds` seeds cached, the cache folder)."""
    config = api.load_config(config_name)
    space = api.build_space(config)
    truth = recipe_ground_truth(config, space, api.standalone_model, root, None, None)
    archs = {}
    for path in sorted(truth.folder.glob("*-s0.json")):
        arch = space.canonical(json.loads(path.read_text())["arch"])
        archs[arch_id(arch)] = arch
    records = []
    for arch in archs.values():
        found = [truth.cached(arch, k) for k in range(seeds)]
        if all(r is not None for r in found):
            records.append(standalone_record(arch, found))
    return space, records, str(truth.folder)


def split_halves(macs: list[float], seed: int) -> tuple[list[int], list[int]]:
    """Indices of the CHOOSE and REPORT halves: archs sorted by MACs, each consecutive pair
    split by a seeded coin (an odd last arch goes to a seeded half)."""
    rng = random.Random(seed)
    order = sorted(range(len(macs)), key=lambda i: (macs[i], i))
    choose, report = [], []
    for start in range(0, len(order), 2):
        pair = order[start:start + 2]
        rng.shuffle(pair)
        choose.append(pair[0])
        if len(pair) == 2:
            report.append(pair[1])
    return sorted(choose), sorted(report)


def candidates(singles: list[str]) -> list[str]:
    """The scores compared: each single, MACs fused with each other single, and MACs fused with
    each pair of the others (equal weights); a spec's components in a fixed order."""
    others = [n for n in singles if n != "macs"]
    specs = list(singles) + [f"macs+{n}" for n in others if n != "params"]
    specs += [f"macs+{a}+{b}" for a, b in itertools.combinations([n for n in others if n != "params"], 2)]
    return specs


def fused(spec: str, scores: dict[str, list[float]], rows: list[int]) -> list[float]:
    """A spec's scores of the archs `rows`, as `estimators/fused.py` ranks them (within those archs)."""
    names = spec.split("+")
    if len(names) == 1:
        return [scores[spec][i] for i in rows]
    return list(sum(normalised_ranks([scores[n][i] for i in rows]) for n in names) / len(names))


def agreement(spec: str, scores: dict[str, list[float]], truth: list[float], macs: list[float],
              rows: list[int]) -> tuple[float, float]:
    """(Kendall tau-b, within-MACs-tercile tau) of a spec on the archs `rows`."""
    x, y = fused(spec, scores, rows), [truth[i] for i in rows]
    return kendall_tau_b(x, y), within_bin_tau(x, y, macs_terciles([macs[i] for i in rows]))


def score_space(space, records: list[dict], config_name: str, run_dir: str | None, cache: dict) -> dict:
    """Score name -> scores of `records`' archs (from `cache` where it has them, which is extended)."""
    archs = [r["arch"] for r in records]
    ids = [arch_id(a) for a in archs]
    config = api.load_config(config_name)
    context = EstimatorContext(space, init_seeds=3, seed=0)
    context.batches = recipe_source(config.data).sample_batches("train", ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE, BATCH_SEED)
    stored = cache.setdefault(space.name, {})
    names = list(BASELINES) + list(PROXIES)
    run = api.load_run(run_dir, device="cpu") if run_dir else None
    if run is not None:
        names.append(SUPERNET)
    scores = {}
    for name in names:
        memo = stored.setdefault(name, {})
        missing = [a for a, i in zip(archs, ids) if i not in memo]
        if missing:
            started = time.perf_counter()
            if name == SUPERNET:
                values = [run.evaluator.evaluate(a, "val").top1 for a in missing]
            else:
                values = build_estimator(name).scores(missing, context)
            memo.update(zip((arch_id(a) for a in missing), (float(v) for v in values)))
            print(f"  {space.name} {name}: {len(missing)} archs in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
        scores[name] = [memo[i] for i in ids]
    return scores


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    runs = dict(item.split("=", 1) for item in args.run)
    cache = json.loads(Path(args.scores).read_text()) if args.scores and Path(args.scores).is_file() else {}
    table: dict[str, dict] = {}
    for config_name in args.configs:
        space, records, folder = cached_records(config_name, args.ground_truth, args.seeds)
        scores = score_space(space, records, config_name, runs.get(space.name), cache)
        if args.scores:
            Path(args.scores).write_text(json.dumps(cache))
        truth = [r["standalone_test_top1"] for r in records]
        macs = [float(r["macs"]) for r in records]
        choose, report = split_halves(macs, args.split_seed)
        rows = {}
        for spec in candidates(list(scores)):
            rows[spec] = {"choose": agreement(spec, scores, truth, macs, choose),
                          "report": agreement(spec, scores, truth, macs, report),
                          "all": agreement(spec, scores, truth, macs, list(range(len(records))))}
        ceiling = {}
        for half, rows_ in (("choose", choose), ("report", report), ("all", list(range(len(records))))):
            agreed = seed_agreement([records[i] for i in rows_], args.seeds)
            ceiling[half] = (agreed["seed_kendall_tau"], agreed["seed_within_bin_tau"])
        table[space.name] = {"config": config_name, "ground_truth": folder, "archs": len(records), "seeds": ceiling,
                             "choose_ids": [arch_id(records[i]["arch"]) for i in choose],
                             "report_ids": [arch_id(records[i]["arch"]) for i in report], "rows": rows}
    result = choose_defaults(table)
    print_tables(table, result)
    return common.emit("default_score", {
        "configs": args.configs, "split_seed": args.split_seed, "seeds": args.seeds, "runs": runs, **result,
        "spaces": {name: {k: v for k, v in t.items() if k != "rows"} | {
            "rows": {s: {h: [round(x, 4) if np.isfinite(x) else None for x in r[h]] for h in r}
                     for s, r in t["rows"].items()}}
            for name, t in table.items()}}, argv)


def choose_defaults(table: dict[str, dict]) -> dict:
    """Per space the candidate with the best CHOOSE-half within-bin tau, and the generic one (the
    best mean over the spaces, among candidates every space scored); their REPORT-half figures
    (None where undefined). An undefined CHOOSE figure counts as -1; ties go to the shorter spec."""
    def rank_by(space: str, spec: str) -> float:
        value = table[space]["rows"][spec]["choose"][1]
        return value if np.isfinite(value) else -1.0

    def reported(space: str, spec: str) -> tuple[float | None, float | None]:
        return tuple(float(v) if np.isfinite(v) else None for v in table[space]["rows"][spec]["report"])

    per_space = {}
    for space, t in table.items():
        best = max(t["rows"], key=lambda spec: (rank_by(space, spec), -len(spec)))
        tau, within = reported(space, best)
        per_space[space] = {"score": best, "choose_within_bin_tau": rank_by(space, best), "report_tau": tau,
                            "report_within_bin_tau": within}
    shared = set.intersection(*(set(t["rows"]) for t in table.values()))
    generic = max(sorted(shared), key=lambda spec: (statistics.fmean(rank_by(s, spec) for s in table), -len(spec)))
    return {"per_space": per_space, "generic": {
        "score": generic, "choose_within_bin_tau": {s: rank_by(s, generic) for s in table},
        "report_tau": {s: reported(s, generic)[0] for s in table},
        "report_within_bin_tau": {s: reported(s, generic)[1] for s in table}}}


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def print_tables(table: dict[str, dict], result: dict) -> None:
    for space, t in table.items():
        print(f"\n{space} ({t['config']}): {t['archs']} archs of {t['ground_truth']}, CHOOSE "
              f"{len(t['choose_ids'])} / REPORT {len(t['report_ids'])}")
        print(f"{'score':32s} {'choose tau':>10s} {'choose wb':>9s} {'report tau':>10s} {'report wb':>9s} "
              f"{'all tau':>8s} {'all wb':>7s}")
        ordered = sorted(t["rows"], key=lambda s: -np.nan_to_num(t["rows"][s]["choose"][1], nan=-2))
        for spec in ordered:
            r = t["rows"][spec]
            mark = " <- chosen" if spec == result["per_space"][space]["score"] else ""
            mark += " <- generic" if spec == result["generic"]["score"] else ""
            print(f"{spec:32s} {r['choose'][0]:10.3f} {r['choose'][1]:9.3f} {r['report'][0]:10.3f} "
                  f"{r['report'][1]:9.3f} {r['all'][0]:8.3f} {r['all'][1]:7.3f}{mark}")
        c = {h: [float("nan") if v is None else v for v in t["seeds"][h]] for h in t["seeds"]}
        print(f"{'(seed 0 vs seed 1: the ceiling)':32s} {c['choose'][0]:10.3f} {c['choose'][1]:9.3f} "
              f"{c['report'][0]:10.3f} {c['report'][1]:9.3f} {c['all'][0]:8.3f} {c['all'][1]:7.3f}")
    print("\nper space: " + "; ".join(f"{s}: {c['score']} (choose wb {c['choose_within_bin_tau']:.3f}, report tau "
                                       f"{_figure(c['report_tau'])}, report wb {_figure(c['report_within_bin_tau'])})"
                                       for s, c in result["per_space"].items()))
    g = result["generic"]
    print(f"generic: {g['score']} (report tau " + ", ".join(f"{s} {_figure(v)}" for s, v in g["report_tau"].items())
          + "; report wb " + ", ".join(f"{s} {_figure(v)}" for s, v in g["report_within_bin_tau"].items()) + ")")


if __name__ == "__main__":
    common.run(main)
