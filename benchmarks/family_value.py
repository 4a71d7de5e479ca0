"""What a shipped family is worth: each member beside the same arch trained alone, and the family's
cost beside training its members alone.

For an exported family (`nas search RUN --members K` or a budget list, then `nas export RUN
--family DIR`) of a trained run:
1. per member: its budget, arch, MACs, shipped test top-1 (and how it was shipped), inherited
   test top-1, the same arch trained alone with the run's recipe (`--seeds` seeds, mean and sd;
   trained now when the cache under `--ground-truth` lacks them, `--workers` at a time), the best
   arch of the cache within the member's budget (its mean over at least 2 seeds), and the min
   subnet's inherited test top-1;
2. the targets: each member at or above its arch alone minus one seed sd, and above the min
   subnet whenever its budget admits more than the min subnet;
3. costs in thread-seconds (seconds times the threads each part ran with): the supernet
   (`--supernet-seconds`, e.g. user+sys of `/usr/bin/time` around `nas train`, else the run's
   `elapsed_s` times its threads), the search (its evaluations' `eval_seconds`), the members'
   fine-tunes (their records' `seconds`), against training every member alone (the mean of its
   standalone records' `seconds` times their threads); their ratio is the family's price.
It prints the table, then one JSON line with everything.

    python -m benchmarks.family_value RUN FAMILY_DIR --ground-truth benchmarks/ground_truth
        [--seeds 2] [--workers 1] [--supernet-seconds S] [--runs-dir runs]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from benchmarks import common
from nas import api
from nas.core.arch import Arch, arch_id
from nas.core.errors import NasError
from nas.core.jsonl import read_records
from nas.engine.fidelity.runner import recipe_ground_truth
from nas.engine.run_dir import DEFAULT_RUNS_DIR


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="trained run (directory or name under --runs-dir)")
    parser.add_argument("family", metavar="FAMILY_DIR", help="an exported family search folder")
    parser.add_argument("--ground-truth", default="benchmarks/ground_truth", metavar="DIR",
                        help="standalone cache root (default benchmarks/ground_truth)")
    parser.add_argument("--seeds", type=int, default=2, help="standalone trainings per member (default 2)")
    parser.add_argument("--workers", type=int, default=1, help="standalone trainings at a time (default 1)")
    parser.add_argument("--supernet-seconds", type=float, default=None,
                        help="the supernet's thread-seconds (default: the run's elapsed_s times its threads)")
    parser.add_argument("--checkpoint", default="last.pt")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise NasError(f"{path}: cannot read it ({str(e).splitlines()[0]})", param="family") from e


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def thread_seconds(record: Mapping[str, Any]) -> float:
    """A training record's seconds times the threads it ran with (1 when unrecorded)."""
    return float(record.get("seconds") or 0.0) * int(record.get("threads") or 1)


def supernet_seconds(run_dir: Path, threads: int) -> float:
    """The run's training seconds (the last `elapsed_s` of metrics.jsonl) times its threads."""
    records = [r for r in read_records(run_dir / "metrics.jsonl") if "elapsed_s" in r]
    if not records:
        raise NasError(f"{run_dir / 'metrics.jsonl'} records no elapsed_s", param="supernet_seconds",
                       fix="give --supernet-seconds")
    return float(records[-1]["elapsed_s"]) * threads


def search_seconds(family_dir: Path, members: Sequence[Mapping[str, Any]], threads: int) -> tuple[float, int]:
    """The family search's evaluation thread-seconds and its distinct evaluated archs (an arch
    measured for several members counts once, at the seconds it cost the first time)."""
    seen: dict[str, float] = {}
    for member in members:
        for record in read_records(family_dir / member["dir"] / "results.jsonl"):
            seconds = float(record.get("eval_seconds") or 0.0)
            if seconds > 0 or record["arch_id"] not in seen:
                seen[record["arch_id"]] = max(seen.get(record["arch_id"], 0.0), seconds)
    return sum(seen.values()) * threads, len(seen)


def best_within(records: Mapping[str, Sequence[Mapping[str, Any]]], budget: float, cost: str) -> dict | None:
    """The cached arch of highest mean test top-1 (at least 2 seeds) whose `cost` fits `budget`."""
    rows = [(statistics.fmean(r["test_top1"] for r in seeds), seeds[0]) for seeds in records.values()
            if len(seeds) >= 2 and seeds[0][cost] <= budget]
    if not rows:
        return None
    top, first = max(rows, key=lambda row: row[0])
    return {"arch_id": first["arch_id"], "macs": first["macs"], "test_top1_mean": round(top, 4)}


def cached_records(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every standalone record of a recipe folder, by arch id."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*-s[0-9]*.json")):
        record = json.loads(path.read_text())
        found.setdefault(record["arch_id"], []).append(record)
    return found


def member_row(member: Mapping[str, Any], shipped: Mapping[str, Any], alone: Sequence[Mapping[str, Any]],
               best: dict | None, min_subnet: Mapping[str, Any] | None, cost: str) -> dict[str, Any]:
    """One member's figures and whether it meets the targets."""
    alone_mean, alone_sd = mean_sd([float(r["test_top1"]) for r in alone])
    test = float(shipped["test_top1"])
    inherited = (shipped.get("inherited") or {}).get("test_top1")
    row = {"index": member["index"], "budget": member["budget"], "budget_spec": member.get("budget_spec"),
           "arch_id": member["arch_id"], "macs": member["macs"], "params": member["params"],
           "shipped": shipped.get("shipped"), "shipped_test_top1": test, "inherited_test_top1": inherited,
           "alone_test_top1": [float(r["test_top1"]) for r in alone], "alone_mean": round(alone_mean, 4),
           "alone_sd": round(alone_sd, 4), "gap_points": round(100 * (test - alone_mean), 2),
           "meets_alone": test >= alone_mean - alone_sd, "best_within_budget": best,
           "finetune_steps": (shipped.get("finetune") or {}).get("steps", 0)}
    if min_subnet is not None:
        admits_more = member[cost] > min_subnet[cost]
        row["min_subnet_test_top1"] = min_subnet.get("test_top1")
        row["above_min"] = (None if not admits_more or min_subnet.get("test_top1") is None
                            else test > float(min_subnet["test_top1"]))
    return row


def format_table(rows: Sequence[Mapping[str, Any]], costs: Mapping[str, Any]) -> str:
    lines = [f"{'member':>6} {'budget':>9} {'arch':10} {'MACs':>8} {'shipped':>8} {'inherit':>8} "
             f"{'alone (sd)':>14} {'gap':>6} {'best in budget':>16} {'min':>7}"]
    for r in rows:
        inherited = f"{100 * r['inherited_test_top1']:.2f}" if r["inherited_test_top1"] is not None else "-"
        best = r["best_within_budget"]
        best_text = f"{best['arch_id'][:8]} {100 * best['test_top1_mean']:.2f}" if best else "-"
        low = r.get("min_subnet_test_top1")
        lines.append(f"{r['index']:>6} {str(r['budget_spec'] or r['budget']):>9} {r['arch_id']:10} "
                     f"{r['macs'] / 1e6:7.3f}M {100 * r['shipped_test_top1']:8.2f} {inherited:>8} "
                     f"{100 * r['alone_mean']:7.2f} ({100 * r['alone_sd']:.2f}) {r['gap_points']:+6.2f} "
                     f"{best_text:>16} {100 * low if low is not None else float('nan'):7.2f}")
    lines.append(f"family: supernet {costs['supernet_s']:.0f} + search {costs['search_s']:.0f} + fine-tunes "
                 f"{costs['finetune_s']:.0f} = {costs['family_s']:.0f} thread-s; members alone "
                 f"{costs['alone_s']:.0f} thread-s; ratio {costs['ratio']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    run = api.load_run(args.run, args.runs_dir, checkpoint=args.checkpoint)
    family_dir = Path(args.family)
    family = _json(family_dir / "family.json")
    exported = _json(family_dir / "family_export.json")
    shipped = {m["arch_id"]: m for m in exported["members"]}
    members = family["members"]
    missing = [m["arch_id"] for m in members if m["arch_id"] not in shipped]
    if missing:
        raise NasError(f"{family_dir}: members {', '.join(missing)} are not exported", param="family",
                       fix="run nas export RUN --family FAMILY_DIR first")
    truth = recipe_ground_truth(run.config, run.space, api.standalone_model, args.ground_truth, None, None)
    alone: dict[str, list[dict[str, Any]]] = {}

    def keep(arch: Arch, results: list[dict[str, Any]]) -> None:
        alone[arch_id(arch)] = results

    archs = {m["arch_id"]: run.space.canonical(m["arch"]) for m in members}
    trained_now = truth.collect(list(archs.values()), args.seeds, args.workers, keep, progress=not args.quiet)
    cached = cached_records(truth.folder)
    cost = family.get("cost", "macs")
    low = run.space.min()
    min_subnet = next((c for m in exported["members"] for c in (m.get("cheaper") or [])
                       if c.get("source") == "min subnet"), None)
    if min_subnet is None:
        min_subnet = {"arch_id": arch_id(low), "macs": run.space.macs(low), "params": run.space.params(low),
                      "test_top1": api.evaluate(run, low, split="test").top1}
    min_subnet.setdefault("params", run.space.params(low))
    rows = [member_row(m, shipped[m["arch_id"]], alone[m["arch_id"]], best_within(cached, m["budget"], cost),
                       min_subnet, cost) for m in members]
    threads = int(json.loads((run.dir.root / "environment.json").read_text()).get("threads") or 1)
    supernet = args.supernet_seconds if args.supernet_seconds is not None else supernet_seconds(run.dir.root, threads)
    search, evaluations = search_seconds(family_dir, members, threads)
    finetune = sum(thread_seconds(shipped[m["arch_id"]].get("finetune") or {}) for m in members)
    alone_s = sum(statistics.fmean(thread_seconds(r) for r in alone[m["arch_id"]]) for m in members)
    costs = {"supernet_s": round(supernet, 1), "search_s": round(search, 1), "evaluations": evaluations,
             "finetune_s": round(finetune, 1), "family_s": round(supernet + search + finetune, 1),
             "alone_s": round(alone_s, 1), "ratio": round((supernet + search + finetune) / alone_s, 4)}
    print(format_table(rows, costs), flush=True)
    report = {"run": str(run.dir.root), "step": run.step, "family": str(family_dir), "cost": cost,
              "members": rows, "costs": costs, "seeds": args.seeds, "ground_truth": str(truth.folder),
              "trainings_now": trained_now, "min_subnet": min_subnet,
              "targets": {"every_member_meets_alone": all(r["meets_alone"] for r in rows),
                          "every_member_above_min": all(r.get("above_min") is not False for r in rows),
                          "ratio_at_most_0.6": costs["ratio"] <= 0.6}}
    return common.emit("family_value", report, argv)


if __name__ == "__main__":
    common.run(main)
