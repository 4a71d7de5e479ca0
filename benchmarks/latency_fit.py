"""How few whole-network timings fit a device's latency table: NAS-Bench-201 on ten devices.

The shared `nb201/nb201_latency_ms.csv` holds the measured latency of every NAS-Bench-201 arch
on ten devices (HW-NAS-Bench, HELP). For each device and each k in `--ks`, `--draws` seeded
draws of k random archs are timed (read from the file) and fitted; every other arch is
predicted and graded (Spearman's rho, MAPE). Beside `nas`'s fit (`nas.engine.searching.
latency_fit.fit_costs`, the code `nas latency-fit` runs):

- `macs`: the space's analytic MACs at paper scale (32x32x3 input, C = 16, 5 cells per stage),
  ranked as they are; MAPE of a non-negative line a*MACs + b fitted to the k timings;
- `edge_ls`: plain least squares of one cost per (edge, operation) (minimum-norm when k < 30);
- `fit`: the plain fit of the per-layer table; `fit+prior`: the same with the other nine
  devices' tables (each fitted on all of its archs) as priors.

HW-NAS-Bench's networks are not `nas`'s: `nas` prunes operations on dead edges (edges on no
path from the cell's input to its output), PyTorch on the GPUs and the CPU runs every non-`none`
edge, and TFLite on the Pixel 3 and the Raspberry Pi drops the operations whose outputs never
reach the output. The fit is given the layers each runtime ran, read one of the two ways
(`every`: every non-`none` edge; `to_output`: the edges that reach the output), chosen per draw
by the fit's own cross-validated MAPE on the k timings. The 341 archs whose cell has no path
from input to output (a constant network, which the phone and the Pi fold to a few
microseconds) are left out of training and grading.

    python benchmarks/latency_fit.py --out /tmp/latency_fit.json

Prints one row per (device, k) and one JSON line; numpy and scikit-learn only (a minute).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks import common

from nas.core.arch import arch_id
from nas.engine.fidelity.rank_stats import spearman_rho
from nas.engine.latency.fit import (
    FOLDS,
    LayerGroups,
    find_groups,
    fit_costs,
    fit_plain,
    fit_table,
    heldout_predictions,
    mape_pct,
    needed_timings,
    nonnegative_lstsq,
)
from nas.engine.latency.measure import DeviceRecord
from nas.engine.latency.sources import ArchLatencyTable
from nas.engine.latency.timings import Timings
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import run_search
from nas.engine.searching.request import SearchRequest
from search_spaces.cell201 import (
    EDGES,
    OPERATIONS,
    Cell201Options,
    Cell201Space,
    edge_key,
    from_nb201_string,
    live_edges,
    to_nb201_string,
)

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the repository (or beside a folder above it: a git worktree's)
SHARED = next((p / "shared" / "data" / "nb201" for p in ROOT.parents if (p / "shared" / "data").is_dir()),
              ROOT.parent / "shared" / "data" / "nb201")
DATA, ACCURACY = SHARED / "nb201_latency_ms.csv", SHARED / "nb201_cifar10.csv"
READINGS = ("every", "to_output")


def paper_space() -> Cell201Space:
    """The cell201 space at NAS-Bench-201's CIFAR-10 scale (10 classes)."""
    return Cell201Space(Cell201Options(image_size=32, channels=16, cells_per_stage=5), 3, 10)


def ran_edges(arch: dict, reading: str) -> list[tuple[int, int, str]]:
    """(to, from, op) of the edges a runtime ran: every non-`none` edge, or those reaching node 3."""
    used = [(to, source, arch[edge_key(to, source)]) for to, source in EDGES if arch[edge_key(to, source)] != "none"]
    if reading == "every":
        return used
    reach = {3}
    for to, source, _ in reversed(used):
        if to in reach:
            reach.add(source)
    return [(to, source, op) for to, source, op in used if to in reach]


def ran_layers(space: Cell201Space, arch: dict, reading: str) -> Counter:
    """Layer counts of the network as a runtime ran it, keyed as `space.layers` keys them."""
    counts = Counter(layer.key for layer in space.layers(space.min()) if not layer.key.startswith("edge:"))
    edges = [op for _, _, op in ran_edges(arch, reading)]
    if reading == "every":      # NAS-Bench-201's PyTorch cells run `none` too (a multiplication by 0)
        edges += ["none"] * (len(EDGES) - len(edges))
    for kind, cin, _, side in space.stages():
        if kind == "cell":
            counts.update(f"edge:{op}:{cin}x{side}x{side}" for op in edges)
    return counts


def load(path: Path) -> tuple[list[str], list[dict], np.ndarray]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    devices = [c for c in rows[0] if c not in ("index", "arch")]
    return devices, rows, np.array([[float(r[d]) for d in devices] for r in rows])


def edge_onehot(archs: list[dict]) -> np.ndarray:
    return np.array([[arch[edge_key(to, source)] == op for to, source in EDGES for op in OPERATIONS]
                     for arch in archs], dtype=float)


def fit_with_reading(designs: dict[str, np.ndarray], train: np.ndarray, y: np.ndarray,
                     priors: dict[str, np.ndarray] | None) -> tuple[str, object]:
    """The reading of least cross-validated MAPE on the training timings, and its fit."""
    scores = {}
    for reading, x in designs.items():
        prior = priors[reading] if priors else None
        scores[reading] = mape_pct(heldout_predictions(x[train], y[train], prior), y[train])
    best = min(scores, key=scores.get)
    prior = priors[best] if priors else None
    return best, fit_costs(designs[best][train], y[train], prior)


class AsRunTable:
    """A latency fitted to the networks as the runtime ran them, where a search asks `nas`'s table."""

    measurable = False

    def __init__(self, groups: LayerGroups, reading: str, fitted: object, device: str):
        self.groups, self.reading, self.fitted = groups, reading, fitted
        self.device = DeviceRecord(device, f"fitted as run ({reading})", "", 0, "", 1, False)

    def predict(self, space: Cell201Space, arch: dict) -> float:
        x = self.groups.design([ran_layers(space, space.canonical(arch), self.reading)])
        return float(self.fitted.predict(x)[0])

    def check_space(self, space: Cell201Space) -> None:
        pass


def budget_search(space: Cell201Space, groups: LayerGroups, rows: list[dict], device: str, k: int,
                  quantile: float, seeds: int, trials: int, seed: int) -> dict:
    """Evolution on the accuracy table under a latency budget of `device` (a quantile of the
    canonical archs' measured latency), with the latency fitted from k timed canonical archs:
    `nas_layers`, `nas latency-fit`'s table of `nas`'s layers; `as_run`, the same fit given the
    layers the runtime ran (`none` included), also with the budget lowered by its held-out MAPE
    (`as_run_margin`); beside the measured per-arch column as the table (`--latency-table
    CSV:COLUMN`) and the MACs budget that admits as many archs as `as_run`. The answers' latency
    and accuracy are read from the tables."""
    import tempfile

    with ACCURACY.open(newline="") as f:
        accuracy = {r["arch"]: float(r["cifar10_test_top1"]) for r in csv.DictReader(f)}
    measured = {r["arch"]: float(r[device]) for r in rows}
    canonical = {}
    for r in rows:
        arch = from_nb201_string(r["arch"])
        if space.canonical(arch) == arch and live_edges(arch):
            canonical[arch_id(arch)] = arch
    ids = sorted(canonical)
    rng = np.random.default_rng(seed)
    timed = [canonical[ids[i]] for i in rng.choice(len(ids), k, replace=False)]
    y = np.array([measured[to_nb201_string(a)] for a in timed])
    table, report = fit_table(space, Timings(DATA, device, timed, y.tolist(), timed), device=device)
    designs = {r: groups.design([ran_layers(space, a, r) for a in timed]) for r in READINGS}
    reading, fitted = fit_with_reading(designs, np.arange(k), y, None)
    as_run = AsRunTable(groups, reading, fitted, device)
    as_run_mape = mape_pct(heldout_predictions(designs[reading], y), y)
    latency = {i: measured[to_nb201_string(a)] for i, a in canonical.items()}
    budget = float(np.quantile(list(latency.values()), quantile))
    margin = budget * (1 - as_run_mape / 100)
    admitted = sum(as_run.predict(space, a) <= budget for a in canonical.values())
    macs_budget = float(sorted(space.costs(a)[0] for a in canonical.values())[admitted - 1])
    best_within = max(accuracy[to_nb201_string(a)] for i, a in canonical.items() if latency[i] <= budget)

    def evaluate(arch: dict) -> dict:
        return {"val_top1": accuracy[to_nb201_string(space.canonical(arch))] / 100}

    raw = [from_nb201_string(r["arch"]) for r in rows]
    every_row = Timings(DATA, device, [space.canonical(a) for a in raw], [measured[r["arch"]] for r in rows], raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # archs timed only with dead edges: their median (the search never asks)
        per_arch = ArchLatencyTable(space, every_row)
    variants = (("nas_layers", Constraints(max_latency_ms=budget), table),
                ("as_run", Constraints(max_latency_ms=budget), as_run),
                ("as_run_margin", Constraints(max_latency_ms=margin), as_run),
                ("measured", Constraints(max_latency_ms=budget), per_arch),
                ("macs", Constraints(max_macs=macs_budget), None))
    answers: dict[str, list] = {name: [] for name, *_ in variants}
    with tempfile.TemporaryDirectory() as work:
        for s in range(seeds):
            for name, constraints, latency_table in variants:
                request = SearchRequest("evolution", Path(work) / f"{name}{s}", trials=trials, seed=s,
                                        constraints=constraints, progress=False, tensorboard=False)
                result = run_search(space, evaluate, request, latency=latency_table)
                answer = to_nb201_string(space.canonical(result.best))
                answers[name].append({"arch": answer, "accuracy": accuracy[answer], "measured_ms": measured[answer],
                                      "nas_layers_ms": round(table.predict(space, result.best), 4),
                                      "as_run_ms": round(as_run.predict(space, result.best), 4),
                                      "within_budget": measured[answer] <= budget})
    return {"device": device, "k": k, "budget_ms": round(budget, 4), "margin_budget_ms": round(margin, 4),
            "quantile": quantile, "nas_layers_heldout": report.to_json(), "as_run_reading": reading,
            "as_run_heldout_mape_pct": round(as_run_mape, 3), "admitted_by_as_run": admitted,
            "canonical_archs": len(ids), "macs_budget": macs_budget, "best_accuracy_within_budget": best_within,
            "trials": trials, "answers": answers}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 20, 50, 100])
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write every figure as JSON here")
    parser.add_argument("--search-device", default="titan_rtx_1", help="device of the budget search")
    parser.add_argument("--search-k", type=int, default=20, help="timings the search's table is fitted from")
    parser.add_argument("--search-quantile", type=float, default=0.25,
                        help="the latency budget: this quantile of the canonical archs' measured latency")
    parser.add_argument("--search-seeds", type=int, default=3)
    parser.add_argument("--search-trials", type=int, default=100)
    parser.add_argument("--skip-fits", action="store_true", help="only the budget search")
    args = parser.parse_args(argv)
    if not Path(args.data).is_file():
        print(f"no {args.data}: the shared NAS-Bench-201 latency file is needed", file=sys.stderr)
        return 2
    start = time.time()
    space = paper_space()
    devices, rows, latency = load(Path(args.data))
    archs = [from_nb201_string(r["arch"]) for r in rows]
    live = np.array([bool(live_edges(a)) for a in archs])
    archs, latency = [a for a, keep in zip(archs, live) if keep], latency[live]
    macs = np.array([space.costs(a)[0] for a in archs], dtype=float)
    counts = {reading: [ran_layers(space, a, reading) for a in archs] for reading in READINGS}
    groups: LayerGroups = find_groups(counts["every"])
    designs = {reading: groups.design(counts[reading]) for reading in READINGS}
    onehot = edge_onehot(archs)
    # every device's table fitted on all its archs (reading of least in-sample MAPE): the priors
    full = {}
    for j, device in enumerate(devices):
        fits = {r: fit_plain(designs[r], latency[:, j]) for r in READINGS}
        full[device] = {r: fits[r].costs for r in READINGS}
    rng = np.random.default_rng(args.seed)
    results = []
    print(f"{len(archs)} live archs of {len(rows)}; groups {[g[0] for g in groups.groups]}", file=sys.stderr)
    print(f"{'device':14s} {'k':>4s}  {'macs':>13s}  {'edge_ls':>13s}  {'fit':>13s}  {'fit+prior':>13s}  (rho / MAPE %)")
    for j, device in enumerate(devices if not args.skip_fits else []):
        y = latency[:, j]
        priors = {r: np.array([full[d][r] for d in devices if d != device]) for r in READINGS}
        for k in args.ks:
            cells: dict[str, list] = {m: [] for m in ("macs", "edge_ls", "fit", "fit+prior")}
            readings = Counter()
            for _ in range(args.draws):
                train = rng.choice(len(y), k, replace=False)
                test = np.setdiff1d(np.arange(len(y)), train)
                line = nonnegative_lstsq(np.c_[macs[train], np.ones(k)], y[train])
                predictions = {
                    "macs": (macs[test], line[0] * macs[test] + line[1]),
                    "edge_ls": (np.linalg.lstsq(onehot[train], y[train], rcond=None)[0] @ onehot[test].T,) * 2,
                }
                for name, prior in (("fit", None), ("fit+prior", priors)):
                    if prior is None and k < needed_timings(groups, False):
                        continue        # fewer timings than the plain fit's free costs + 1
                    reading, fitted = fit_with_reading(designs, train, y, prior)
                    readings[f"{name}:{reading}"] += 1
                    p = fitted.predict(designs[reading][test])
                    predictions[name] = (p, p)
                for name, (ranked, valued) in predictions.items():
                    cells[name].append((spearman_rho(ranked.tolist(), y[test].tolist()), mape_pct(valued, y[test])))
            row = {"device": device, "k": k, "readings": dict(readings)}
            for name, values in cells.items():
                if not values:
                    row[name] = None
                    continue
                v = np.array(values)
                row[name] = {"spearman": round(float(v[:, 0].mean()), 4), "spearman_min": round(float(v[:, 0].min()), 4),
                             "mape_pct": round(float(v[:, 1].mean()), 2), "mape_max_pct": round(float(v[:, 1].max()), 2)}
            results.append(row)
            print(f"{device:14s} {k:4d}  " + "  ".join(
                f"{row[m]['spearman']:6.3f} /{row[m]['mape_pct']:5.1f}" if row[m] else f"{'n/a':>13s}" for m in cells),
                flush=True)
    search = None
    if ACCURACY.is_file():
        search = budget_search(space, groups, rows, args.search_device, args.search_k, args.search_quantile,
                               args.search_seeds, args.search_trials, args.seed)
        for name, answers in search["answers"].items():
            print(f"search under a {name} budget: " + "; ".join(
                f"{a['accuracy']:.2f}% at {a['measured_ms']:.3f} ms" for a in answers), flush=True)
        print(f"latency budget {search['budget_ms']} ms on {search['device']}"
              f" (best within it: {search['best_accuracy_within_budget']:.2f}%); the as-run fit admits "
              f"{search['admitted_by_as_run']} of {search['canonical_archs']} archs, as does MACs <= {search['macs_budget']:.0f}")
    summary = {"archs": len(archs), "devices": devices, "ks": args.ks, "draws": args.draws, "seed": args.seed,
               "folds": FOLDS, "seconds": round(time.time() - start, 1), "results": results,
               "search": search}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return common.emit("latency_fit", {k: v for k, v in summary.items() if k not in ("results", "search")}, argv)


if __name__ == "__main__":
    common.run(main)
