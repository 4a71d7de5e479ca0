"""Weight sharing judged on NAS-Bench-201: supernets trained on CIFAR-10 rank the published table.

The supernets are `cifar10_nb201_cpu` (NAS-Bench-201's cell at 16 channels and two cells per
stage, one CPU thread) trained by each seed method at equal steps. The modes:

- `sample`: writes the fixed sample (`benchmarks/nb201/supernet_sample.csv`): `--size` (500)
  distinct networks drawn with `--seed` (0) from the space's 15,625 raw archs, each raw arch
  reduced to its network (dead edges set to `none`) and a network kept once. Drawing raw archs
  weighs a network by its spellings, as NAS-Bench-201's own list does. `--check` redraws and
  compares with the committed file.
- `zero-cost --images DIR/train`: `macs` and `jacov` of the sample's archs that the committed
  score files (`benchmarks/nb201/scores_*_b0_i0*.csv`, `benchmarks.nb201_scores`) lack, on the
  paper-scale network, with the same batches and initialisation, into
  `benchmarks/nb201/scores_sample_b0_i0.csv`; `grade` reads them all.
- `commands [--images DIR] [--seeds 0 1] [--ranks 1]`: the `nas train` command of every seed
  method (`METHODS`) and seed, at the config's length (40 epochs of 98 steps: 3,920 steps each;
  in thread-seconds a step, SPOS 0.49, PA&DA and GM about the same, the sandwich rule about 5.5
  times that). `--ranks 2` prints it under torchrun, two one-thread processes splitting each
  batch of 256: on 2 cores it halves the sandwich rule's wall clock, where a second thread in one
  process saves a sixth.
- `grade RUN... [--images DIR]`: each run's BN-recalibrated validation top-1 of every sample arch
  (the first `--val-images` (1,000) of the run's validation split, which training never read;
  BN statistics re-estimated from `--recal-batches` (2) x 256 training images: 1.9 thread-seconds
  an arch, 16 minutes for the 500; 2,000 and 4 take 3.4 s), appended per arch
  to `benchmarks/nb201/supernet_<RUN>.csv` (a killed grading resumes), then Kendall tau-b and
  Spearman against the table's CIFAR-10 test accuracy with 90% bootstrap intervals, beside
  `macs+jacov` (the zero-cost default) on the same archs and the rank fusion
  `supernet+macs+jacov` (equal weights, as the `+` spec ranks), and the table's accuracy of the
  arch `nas search RUN` returns (default searcher and trials), once per `--search-score`: `auto`
  (on this space the zero-cost default, which reads no supernet, unless the run holds a fidelity
  summary) and `supernet` (the supernet's own ranking); about 5 thread-seconds a trial.
- `ceiling [--archs 8] [--start 0] [--epochs 7] [--out CSV]`: sample archs `--start` to `--archs` each trained alone with
  the config's recipe for `--epochs` (7 epochs: 686 steps), in the standalone cache
  `--ground-truth` (`nas fidelity`'s, resumable, `--workers` processes), ranked against the table:
  what a supernet of this size could reach at best.
- `beside-ceiling [--ceiling CSV...]`: the ceiling files' archs (default the committed
  `benchmarks/nb201/ceiling_c8n1*.csv`) ranked against the table by every committed grading that
  holds them all and by `macs+jacov`, beside the archs trained alone.
- `populations [--intervals 400 100]`: every committed grading's and `macs+jacov`'s Kendall on
  the whole sample, on spread subsets (the best arch of each of N equal intervals of the table's
  accuracy, as SUMNAS and DYNAS choose the archs they rank) and on the table's better half.
- `time --images DIR`: median thread-seconds of a training step per channels x cells per stage x
  method (`--methods`, default spos).

    python -m benchmarks.nb201_supernets sample
    python -m benchmarks.nb201_supernets commands --images /tmp/cifar --seeds 0 1
    nas train cifar10_nb201_cpu --name nb201cpu-spos-s0 --set data.root=/tmp/cifar train.seed=0
    nas train cifar10_nb201_cpu --name nb201cpu-sandwich-s0 --set data.root=/tmp/cifar train.seed=0 \\
        'strategy.sampler={name: sandwich, num_random: 2}' 'strategy.distill={name: kl}'
    nas train cifar10_nb201_cpu --name nb201cpu-pada-s0 --set data.root=/tmp/cifar train.seed=0 \\
        data.sampling=pada 'data.pada={mix_schedule: published, undrawn_norm: zero}' \\
        'strategy.sampler={name: pada, num_random: 1, sandwich: false, mix_schedule: published}'
    nas train cifar10_nb201_cpu --name nb201cpu-gm-s0 --set data.root=/tmp/cifar train.seed=0 \\
        strategy.name=few_shot 'strategy.options={split: {at: [0.2222, 0.4444], reinit_children: false,
        budget: shared, branching: 2, metric: cos, batches: 50, edge_selection: max_cut}}'
    python -m benchmarks.nb201_supernets grade runs/nb201cpu-spos-s0 runs/nb201cpu-sandwich-s0 ...
    python -m benchmarks.nb201_supernets ceiling --images /tmp/cifar --archs 16

(`/tmp/cifar`: the shared `cifar10-jpeg.tar.gz` extracted; it holds `train/` and `test/`.) GM at
equal steps shares the schedule's steps among the sub-supernets (`budget: shared`) and keeps the
parents' weights (`reinit_children: false`): the authors' `--restart final` trains the last
split's children a whole schedule more.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import json
import random
import shlex
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from benchmarks import common
from benchmarks.default_score import fused
from benchmarks.nb201_data import TABLE, paper_space
from nas import api
from nas.core.arch import Arch, arch_id
from nas.core.errors import NasError
from nas.engine.data.sources import in_memory_source
from nas.engine.evaluator import Evaluator
from nas.engine.fidelity.rank_stats import bootstrap_interval, kendall_tau_b, spearman_rho
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from search_spaces.cell201 import from_nb201_string, to_nb201_string

CONFIG = "cifar10_nb201_cpu"
FOLDER = Path(__file__).resolve().parent / "nb201"
SAMPLE = FOLDER / "supernet_sample.csv"
SAMPLE_SIZE, SAMPLE_SEED = 500, 0
ZERO_COST = FOLDER / "scores_sample_b0_i0.csv"
ZERO_COST_FILES = "scores_*_b0_i0*.csv"     # one batch and initialisation (0, 0), as nb201_scores writes
ZERO_COST_DEFAULT = ("macs", "jacov")
BOOTSTRAP_SEED = 0

# The seed methods on the config, as `--set` overrides; each trains the config's 3,920 steps.
METHODS: dict[str, list[str]] = {
    "spos": [],
    "sandwich": ["strategy.sampler={name: sandwich, num_random: 2}", "strategy.distill={name: kl}"],
    "pada": ["data.sampling=pada", "data.pada={mix_schedule: published, undrawn_norm: zero}",
             "strategy.sampler={name: pada, num_random: 1, sandwich: false, mix_schedule: published}"],
    "gm": ["strategy.name=few_shot",
           "strategy.options={split: {at: [0.2222, 0.4444], reinit_children: false, budget: shared, branching: 2, "
           "metric: cos, batches: 50, edge_selection: max_cut}}"],
}


# -- the fixed sample -------------------------------------------------------------------------------
def draw_sample(space, size: int = SAMPLE_SIZE, seed: int = SAMPLE_SEED) -> list[Arch]:
    """`size` distinct networks of `space`: its raw archs shuffled with `seed`, each made canonical
    (dead edges set to `none`), kept at its first appearance."""
    choices = space.choices()
    raw = [dict(zip(choices, ops)) for ops in itertools.product(*choices.values())]
    random.Random(seed).shuffle(raw)
    chosen: dict[str, Arch] = {}
    for arch in raw:
        network = space.canonical(arch)
        chosen.setdefault(arch_id(network), network)
        if len(chosen) == size:
            return list(chosen.values())
    raise NasError(f"--size: the space has only {len(chosen)} distinct networks, asked for {size}")


def write_sample(archs: Sequence[Arch], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["arch_id", "arch"])
        writer.writerows([arch_id(a), to_nb201_string(a)] for a in archs)


def read_sample(space, path: Path = SAMPLE) -> list[Arch]:
    """The sample's archs, in file order (canonical in `space`)."""
    if not path.is_file():
        raise NasError(f"--sample: {path} does not exist (write it: python -m benchmarks.nb201_supernets sample)")
    with path.open(newline="") as f:
        return [space.canonical(from_nb201_string(row["arch"])) for row in csv.DictReader(f)]


# -- the zero-cost default on the sample ------------------------------------------------------------
def zero_cost_scores(folder: Path = FOLDER) -> dict[str, dict[str, float]]:
    """arch id -> {"macs", "jacov"} from every committed score file of batch 0 and initialisation 0."""
    scores: dict[str, dict[str, float]] = {}
    for path in sorted(folder.glob(ZERO_COST_FILES)):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if all(row.get(name) not in (None, "") for name in ZERO_COST_DEFAULT):
                    scores[row["arch_id"]] = {name: float(row[name]) for name in ZERO_COST_DEFAULT}
    return scores


def zero_cost_columns(ids: Sequence[str], zero_cost: Mapping[str, Mapping[str, float]]) -> dict[str, list[float]] | None:
    """`ZERO_COST_DEFAULT`'s scores of `ids`, a list per score, or None where an arch has none."""
    if not all(i in zero_cost for i in ids):
        return None
    return {name: [zero_cost[i][name] for i in ids] for name in ZERO_COST_DEFAULT}


def score_missing(images: Path, archs: Sequence[Arch], out: Path = ZERO_COST) -> int:
    """Score `macs` and `jacov` of the archs no committed file holds, as `benchmarks.nb201_scores`
    does (paper-scale network, batches of seed 0, initialisation seed 0); appended to `out`."""
    from benchmarks.nb201_scores import BATCH_SIZE, cifar_batches
    from estimators import EstimatorContext, build_estimator

    known = zero_cost_scores(out.parent)
    todo = [a for a in archs if arch_id(a) not in known]
    if not todo:
        return 0
    space = paper_space()
    context = EstimatorContext(space, cifar_batches(images, 2, BATCH_SIZE, 0), init_seeds=1, seed=0)
    estimators = [build_estimator(name) for name in ZERO_COST_DEFAULT]
    fresh = not out.is_file()
    with out.open("a", newline="") as f:
        writer = csv.writer(f)
        if fresh:
            writer.writerow(["arch_id", "arch", *ZERO_COST_DEFAULT])
        for n, arch in enumerate(todo, 1):
            scores = [estimator.scores([arch], context)[0] for estimator in estimators]
            writer.writerow([arch_id(arch), to_nb201_string(arch), *(f"{s:.10g}" for s in scores)])
            f.flush()
            if n % 50 == 0:
                print(f"{n}/{len(todo)} archs scored", flush=True)
    return len(todo)


# -- grading a supernet -----------------------------------------------------------------------------
GRADE_COLUMNS = ["arch_id", "arch", "val_top1", "step", "val_images", "bn_recal_batches"]


def grade_archs(archs: Sequence[Arch], top1: Callable[[Arch], float], out: Path, settings: Mapping[str, int],
                progress: bool = True) -> dict[str, float]:
    """arch id -> `top1(arch)` of every arch; each new value is appended to `out` at once, and archs
    already there with the same `settings` (step, val_images, bn_recal_batches) are read, not
    measured again. A file measured with other settings is an error (grade into another file)."""
    done: dict[str, float] = {}
    if out.is_file():
        with out.open(newline="") as f:
            for row in csv.DictReader(f):
                other = {key: int(row[key]) for key in settings}
                if other != dict(settings):
                    raise NasError(f"--results: {out} holds values measured with {other}, not {dict(settings)}; "
                                   "remove it or grade into another folder")
                done[row["arch_id"]] = float(row["val_top1"])
    out.parent.mkdir(parents=True, exist_ok=True)
    fresh = not out.is_file()
    started = time.perf_counter()
    with out.open("a", newline="") as f:
        writer = csv.writer(f)
        if fresh:
            writer.writerow(GRADE_COLUMNS)
        todo = [a for a in archs if arch_id(a) not in done]
        for n, arch in enumerate(todo, 1):
            done[arch_id(arch)] = value = top1(arch)
            writer.writerow([arch_id(arch), to_nb201_string(arch), f"{value:.6g}", *settings.values()])
            f.flush()
            if progress and (n % 25 == 0 or n == len(todo)):
                print(f"  {n}/{len(todo)} archs graded ({(time.perf_counter() - started) / n:.2f} s each)", flush=True)
    return {arch_id(a): done[arch_id(a)] for a in archs}


def with_interval(statistic, x: Sequence[float], y: Sequence[float]) -> dict:
    """`statistic(x, y)` and its 90% bootstrap interval over the archs (None where no resample
    defines it: a few archs, or tied values)."""
    low, high = bootstrap_interval(statistic, [x, y], BOOTSTRAP_SEED)
    interval = None if low is None else [round(low, 3), round(high, 3)]
    return {"value": round(statistic(x, y), 3), "interval": interval}


def agreement(scores: Sequence[float], truth: Sequence[float]) -> dict:
    """Kendall tau-b and Spearman of `scores` with `truth`, each with its 90% bootstrap interval."""
    return {"kendall": with_interval(kendall_tau_b, scores, truth),
            "spearman": with_interval(spearman_rho, scores, truth), "archs": len(scores)}


def rank_report(supernet: Mapping[str, float], table: Mapping[str, float],
                zero_cost: Mapping[str, Mapping[str, float]]) -> dict:
    """The supernet's agreement with the table over its archs; where the zero-cost scores cover
    them all, also `macs+jacov`'s and the fusion `supernet+macs+jacov`'s."""
    ids = list(supernet)
    truth = [table[i] for i in ids]
    report = {"supernet": agreement([supernet[i] for i in ids], truth)}
    free = zero_cost_columns(ids, zero_cost)
    if free is None:
        report["zero_cost_missing"] = sum(i not in zero_cost for i in ids)
        return report
    columns = {"supernet": [supernet[i] for i in ids], **free}
    default = "+".join(ZERO_COST_DEFAULT)
    for spec in (default, f"supernet+{default}"):
        report[spec] = agreement(fused_ranks(spec, columns), truth)
    return report


def fused_ranks(spec: str, columns: Mapping[str, list[float]]) -> list[float]:
    """The fusion `spec`'s scores (the mean of its components' normalised ranks), rounded so that
    archs whose rank sums tie exactly also tie in floating point."""
    return [round(value, 9) for value in fused(spec, columns, list(range(len(next(iter(columns.values()))))))]


def sample_evaluator(run, val_images: int, recal_batches: int) -> Evaluator:
    """BN-recalibrated accuracy of the run's subnets on the first `val_images` of its validation
    split, statistics re-estimated from `recal_batches` training batches of 256."""
    splits = run.splits
    n = min(val_images, len(splits.val_labels))
    splits = dataclasses.replace(splits, val_images=splits.val_images[:n], val_labels=splits.val_labels[:n])
    settings = dataclasses.replace(run.config.eval, bn_recal_batches=recal_batches, bn_recal_batch_size=256)
    return Evaluator(run.strategy.subnet_for, run.space.canonical, in_memory_source(splits, run.config.data),
                     settings, run.config.train.seed, run.step, run.config.train.channels_last)


def load_graded_run(path: str, images: Path | None, loaded: dict[str, object]):
    """The run at `path` on the CPU, reading its images from `images` when given; its images are
    decoded once for all runs of the same data settings (`loaded`, by settings)."""
    run = api.load_run(path, device="cpu")
    if images is not None:
        run.config = dataclasses.replace(run.config, data=dataclasses.replace(run.config.data, root=str(images)))
    key = repr(run.config.data)
    if key not in loaded:
        loaded[key] = api.load_splits(run.config)
    splits = loaded[key]
    return dataclasses.replace(run, _splits=splits, _data=in_memory_source(splits, run.config.data))


def training_record(run) -> dict:
    """What the run's own files say of its training: the step it stands at and its
    environment.json (versions, commit, CPU, threads and ranks of its latest start, and of its
    earlier starts under `earlier_starts` when it was resumed)."""
    path = run.dir.environment
    return {"step": run.step, **(json.loads(path.read_text()) if path.exists() else {})}


def searched(run, table: Mapping[str, float], score: str, trials: int) -> dict:
    """The arch `nas search RUN` returns (default searcher) and its table accuracy."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = api.search(run, out=out, progress=False, score=score, trials=trials)
    return {"arch": to_nb201_string(result.best), "arch_id": result.arch_id, "score": result.score,
            "val_top1": result.val_top1, "table_top1": table[result.arch_id],
            "seconds": round(time.perf_counter() - started, 1)}


def grade(args: argparse.Namespace) -> dict:
    from estimators.table import read_table

    space = paper_space()
    archs = read_sample(space, args.sample)[:args.limit]
    table = read_table(f"table:{TABLE}", space)
    zero_cost = zero_cost_scores(args.sample.parent)
    graded, loaded = {}, {}
    for path in args.runs:
        run = load_graded_run(path, args.images, loaded)
        evaluator = sample_evaluator(run, args.val_images, args.recal_batches)
        name = run.dir.root.name
        print(f"{name}: step {run.step}, {len(archs)} archs", flush=True)
        started = time.perf_counter()
        values = grade_archs(archs, lambda arch: evaluator.evaluate(arch, "val").top1,
                             args.sample.parent / f"supernet_{name}.csv",
                             {"step": run.step, "val_images": args.val_images,
                              "bn_recal_batches": args.recal_batches})
        report = {"training": training_record(run), **rank_report(values, table, zero_cost)}
        report["grading_seconds"] = round(time.perf_counter() - started, 1)
        if not args.no_search:
            report["search"] = {score: searched(run, table, score, args.search_trials) for score in args.search_score}
        graded[name] = report
        print_report(name, report)
    return {"mode": "grade", "archs": len(archs), "val_images": args.val_images,
            "bn_recal_batches": args.recal_batches, "runs": graded}


def print_report(name: str, report: Mapping) -> None:
    if "training" in report:
        trained = report["training"]
        ranks = f"{trained['ranks']} rank(s)" if "ranks" in trained else "unrecorded ranks"   # older runs
        earlier = [f"{e.get('ranks', '?')} rank(s) at commit {str(e.get('git_commit'))[:7]}"
                   for e in trained.get("earlier_starts", [])]
        print(f"  trained to step {trained.get('step')} with {ranks} of {trained.get('threads')} thread(s) "
              f"at commit {str(trained.get('git_commit'))[:7]}"
              + (f" (resumed; earlier starts: {', '.join(earlier)})" if earlier else ""))
    for key, row in report.items():
        if isinstance(row, dict) and "kendall" in row:
            k, s = row["kendall"], row["spearman"]
            print(f"  {key:26s} Kendall {k['value']:.3f} {k['interval']}  Spearman {s['value']:.3f} {s['interval']}")
    for spec, found in report.get("search", {}).items():
        print(f"  nas search --score {spec} ({found['score']}): {found['arch']} -> table {found['table_top1']:.2f}")


# -- the ceiling: sample archs trained alone ----------------------------------------------------------
CEILING_COLUMNS = ("arch_id", "arch", "alone_test_top1", "table_top1", "steps")


def ceiling(args: argparse.Namespace) -> dict:
    from estimators.table import read_table
    from nas.engine.fidelity.runner import recipe_ground_truth, standalone_record

    config = api.load_config(CONFIG, [f"data.root={args.images}", *args.set])
    space = api.build_space(config)
    archs = read_sample(space, args.sample)[args.start:args.archs]
    if not archs:
        raise NasError(f"--start: {args.start} leaves no arch of the first --archs {args.archs}")
    table = read_table(f"table:{TABLE}", paper_space())
    truth = recipe_ground_truth(config, space, api.standalone_model, args.ground_truth, None, args.epochs)
    records: dict[str, dict] = {}
    started = time.perf_counter()
    truth.collect(archs, 1, args.workers, lambda a, r: records.__setitem__(arch_id(a), standalone_record(a, r)),
                  progress=True)
    ids = [arch_id(a) for a in archs]
    alone = [records[i]["standalone_test_top1"] for i in ids]
    report = agreement(alone, [table[i] for i in ids])
    print(f"{len(ids)} archs alone ({truth.steps} steps each): Kendall {report['kendall']['value']:.3f} "
          f"{report['kendall']['interval']}, Spearman {report['spearman']['value']:.3f} "
          f"{report['spearman']['interval']}; test top-1 {min(alone):.3f}-{max(alone):.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(CEILING_COLUMNS)
            writer.writerows([i, to_nb201_string(records[i]["arch"]), f"{records[i]['standalone_test_top1']:.6g}",
                              table[i], truth.steps] for i in ids)
    return {"mode": "ceiling", "steps": truth.steps, "folder": str(truth.folder), **report,
            "seconds": round(time.perf_counter() - started, 1),
            "archs": [{"arch": to_nb201_string(records[i]["arch"]), "test_top1": records[i]["standalone_test_top1"],
                       "table_top1": table[i]} for i in ids]}


def committed_gradings(folder: Path = FOLDER) -> dict[str, dict[str, float]]:
    """run name -> {arch id: validation top-1} of every `supernet_<RUN>.csv` grading in `folder`."""
    gradings = {}
    for path in sorted(folder.glob("supernet_*.csv")):
        if path.name == SAMPLE.name:
            continue
        with path.open(newline="") as f:
            gradings[path.stem.removeprefix("supernet_")] = {row["arch_id"]: float(row["val_top1"])
                                                             for row in csv.DictReader(f)}
    return gradings


def spread_subset(table: Mapping[str, float], intervals: int) -> list[str]:
    """One arch per non-empty interval of `intervals` equal slices of the table's accuracy range
    (the best in each), so that near-ties count once: how SUMNAS and DYNAS pick the archs they
    rank (320 of NAS-Bench-201's networks from 400 intervals)."""
    low, high = min(table.values()), max(table.values())
    width = (high - low) / intervals
    best: dict[int, str] = {}
    for i, accuracy in table.items():
        slot = min(int((accuracy - low) / width), intervals - 1) if width > 0 else 0
        if slot not in best or accuracy > table[best[slot]]:
            best[slot] = i
    return [best[slot] for slot in sorted(best)]


def populations(intervals: Sequence[int], folder: Path = FOLDER, sample: Path = SAMPLE) -> dict:
    """Kendall tau-b of every complete committed grading and of `macs+jacov` against the table on
    the whole sample, on its spread subsets (`spread_subset`, one per count in `intervals`) and on
    its better half by the table: whether the population ranked explains a gap to published taus."""
    from estimators.table import read_table

    space = paper_space()
    ids = [arch_id(a) for a in read_sample(space, sample)]
    table = read_table(f"table:{TABLE}", space)
    on_sample = {i: table[i] for i in ids}
    ranked = sorted(ids, key=on_sample.__getitem__)
    subsets = {"all": ids, **{f"spread{n}": spread_subset(on_sample, n) for n in intervals},
               "top half": ranked[len(ranked) // 2:]}
    free = zero_cost_columns(ids, zero_cost_scores(folder))
    rankers = {name: graded for name, graded in committed_gradings(folder).items() if all(i in graded for i in ids)}
    if free is not None:
        default = "+".join(ZERO_COST_DEFAULT)
        rankers = {default: dict(zip(ids, fused_ranks(default, free))), **rankers}
    report = {"archs": {name: len(subset) for name, subset in subsets.items()}, "kendall": {}}
    print("Kendall tau-b against the table, by the archs ranked: "
          + ", ".join(f"{name} ({len(subset)})" for name, subset in subsets.items()))
    for name, scores in rankers.items():
        row = {subset_name: with_interval(kendall_tau_b, [scores[i] for i in subset], [table[i] for i in subset])
               for subset_name, subset in subsets.items()}
        report["kendall"][name] = row
        print(f"  {name:26s} " + "  ".join(f"{r['value']:6.3f} {r['interval']}" for r in row.values()))
    return report


def beside_ceiling(ceiling_csvs: Sequence[Path], folder: Path = FOLDER) -> dict:
    """The archs of `ceiling --out` files ranked against the table three ways on the same archs:
    trained alone, by every grading in `folder` (`supernet_<RUN>.csv`) that holds them all, and by
    `macs+jacov`. A few archs leave wide intervals; this sets the figures side by side, it does
    not replace the 500-arch grading."""
    if not ceiling_csvs:
        raise NasError("--ceiling: no ceiling file given, and none committed (write one with `ceiling --out`)")
    rows = []
    for path in ceiling_csvs:
        if not path.is_file():
            raise NasError(f"--ceiling: {path} is not a file (write it with `nb201_supernets ceiling --out`)")
        with path.open(newline="") as f:
            rows += list(csv.DictReader(f))
    ids = [r["arch_id"] for r in rows]
    truth = [float(r["table_top1"]) for r in rows]
    report: dict = {"archs": len(ids), "alone": agreement([float(r["alone_test_top1"]) for r in rows], truth)}
    free = zero_cost_columns(ids, zero_cost_scores(folder))
    if free is not None:
        report["+".join(ZERO_COST_DEFAULT)] = agreement(fused_ranks("+".join(ZERO_COST_DEFAULT), free), truth)
        report.update({name: agreement(column, truth) for name, column in free.items()})
    report["runs"], report["incomplete"] = {}, []
    for name, graded in committed_gradings(folder).items():
        if all(i in graded for i in ids):
            report["runs"][name] = agreement([graded[i] for i in ids], truth)
        else:
            report["incomplete"].append(name)
    print(f"{len(ids)} archs of {', '.join(p.name for p in ceiling_csvs)} against the table:")
    print_report("", {"trained alone": report["alone"],
                      **{k: v for k, v in report.items() if k in ("+".join(ZERO_COST_DEFAULT), *ZERO_COST_DEFAULT)},
                      **report["runs"]})
    return report


# -- commands and step times --------------------------------------------------------------------------
def train_command(method: str, seed: int, images: str, ranks: int = 1) -> str:
    """The `nas train` command of one seed method and seed; with `ranks` > 1, under torchrun with
    that many one-thread CPU processes, which share the global batch of 256."""
    overrides = [f"data.root={images}", f"train.seed={seed}", *METHODS[method]]
    nas = ["nas"] if ranks == 1 else ["torchrun", "--standalone", f"--nproc_per_node={ranks}", "-m", "nas"]
    command = shlex.join([*nas, "train", CONFIG, "--name", f"nb201cpu-{method}-s{seed}", "--set", *overrides])
    return command if ranks == 1 else f"OMP_NUM_THREADS=1 {command}"


def step_seconds(config, splits, steps: int) -> list[float]:
    """Thread-seconds (CPU time of the training thread: on a shared machine, nearer a quiet
    machine's wall time than the wall clock) of `steps` training steps of `config` on `splits`,
    after common.WARMUP untimed ones."""
    strategy = api.build_strategy(config)
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(config, strategy, splits, RunDir(Path(root)), progress=False)
        batches = iter([(images, labels) for _, images, labels in
                        itertools.islice(trainer._batches(), common.WARMUP + steps)])
        return common.timed_steps(lambda: trainer.train_one_step(*next(batches)), steps, clock=time.thread_time)


def time_steps(args: argparse.Namespace) -> dict:
    """Median thread-seconds of a step of the config at each channels x cells-per-stage x method."""
    base = api.load_config(CONFIG, [f"data.root={args.images}", *args.set])
    splits = api.load_splits(base)
    rows = []
    for channels, cells, method in itertools.product(args.channels, args.cells, args.methods):
        overrides = [f"data.root={args.images}", *args.set, f"space.options.channels={channels}",
                     f"space.options.cells_per_stage={cells}", *METHODS[method]]
        config = api.load_config(CONFIG, overrides)
        times = step_seconds(config, splits, args.steps)
        epoch_steps = -(-len(splits.train_labels) // config.train.batch_size)
        median = statistics.median(times)
        row = {"channels": channels, "cells_per_stage": cells, "method": method,
               "batch_size": config.train.batch_size, "median_s": round(median, 3),
               "quartiles_s": [round(q, 3) for q in statistics.quantiles(times, n=4)[::2]],
               "epoch_s": round(median * epoch_steps), "epochs_per_hour": round(3600 / (median * epoch_steps), 1)}
        rows.append(row)
        print(f"C={channels} N={cells} {method:8s} batch {row['batch_size']}: {median:.3f} thread-s a step "
              f"(quartiles {row['quartiles_s']}), {row['epoch_s']} s an epoch of {epoch_steps} steps, "
              f"{row['epochs_per_hour']} epochs an hour", flush=True)
    return {"mode": "time", "steps": args.steps, "rows": rows}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.threads_argument(parser, 1)
    modes = parser.add_subparsers(dest="mode", required=True)
    sample = modes.add_parser("sample", help="write (or --check) the fixed sample of distinct networks")
    sample.add_argument("--size", type=int, default=SAMPLE_SIZE)
    sample.add_argument("--seed", type=int, default=SAMPLE_SEED)
    sample.add_argument("--out", type=Path, default=SAMPLE)
    sample.add_argument("--check", action="store_true", help="redraw and compare with --out instead of writing")
    zero = modes.add_parser("zero-cost", help="macs and jacov of the sample archs the committed files lack")
    zero.add_argument("--images", type=Path, required=True, help="an image folder: <class>/*.jpg (CIFAR-10 train/)")
    zero.add_argument("--sample", type=Path, default=SAMPLE)
    commands = modes.add_parser("commands", help="print the nas train command of every seed method and seed")
    commands.add_argument("--images", default="DIR", help="the extracted CIFAR-10 image folder")
    commands.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    commands.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=list(METHODS))
    commands.add_argument("--ranks", type=int, default=1,
                          help="one-thread torchrun processes sharing each step's batch (default 1: plain nas)")
    graded = modes.add_parser("grade", help="rank the sample by each run's supernet against the table")
    graded.add_argument("runs", nargs="+", help="run directories")
    graded.add_argument("--images", type=Path, default=None, help="the image folder (default: the run's data.root)")
    graded.add_argument("--sample", type=Path, default=SAMPLE, help="the sample (its folder receives the results)")
    graded.add_argument("--val-images", type=int, default=1000, help="validation images per arch")
    graded.add_argument("--recal-batches", type=int, default=2, help="BN recalibration batches of 256")
    graded.add_argument("--limit", type=int, default=None, help="grade only the first N sample archs")
    graded.add_argument("--search-score", nargs="+", default=["auto", "supernet"],
                        help="the searches' scores, one search each (default: nas's default, auto, and the supernet)")
    graded.add_argument("--search-trials", type=int, default=50, help="the search's trials (default: nas's)")
    graded.add_argument("--no-search", action="store_true", help="skip the search")
    ceiling_ = modes.add_parser("ceiling", help="sample archs trained alone at the config's size")
    ceiling_.add_argument("--images", type=Path, required=True, help="the extracted CIFAR-10 image folder")
    ceiling_.add_argument("--sample", type=Path, default=SAMPLE)
    ceiling_.add_argument("--archs", type=int, default=8, help="train the sample's archs up to this one")
    ceiling_.add_argument("--start", type=int, default=0, help="and from this one (0: the first)")
    ceiling_.add_argument("--epochs", type=int, default=7)
    ceiling_.add_argument("--workers", type=int, default=1)
    ceiling_.add_argument("--ground-truth", type=Path, default=Path("runs/nb201_ceiling"))
    ceiling_.add_argument("--set", nargs="*", default=[], help="more config overrides")
    ceiling_.add_argument("--out", type=Path, default=None,
                          help="also write each arch's accuracy alone and in the table to this CSV")
    beside = modes.add_parser("beside-ceiling", help="the ceiling's archs ranked by the gradings and macs+jacov")
    beside.add_argument("--ceiling", type=Path, nargs="+", default=sorted(FOLDER.glob("ceiling_c8n1*.csv")),
                        help="`ceiling --out` files (default: the committed ones at 8 channels, one cell)")
    beside.add_argument("--folder", type=Path, default=FOLDER, help="the gradings' and zero-cost scores' folder")
    population = modes.add_parser("populations", help="the gradings' Kendall on spread subsets and the top half")
    population.add_argument("--intervals", type=int, nargs="+", default=[400, 100],
                            help="equal accuracy intervals of each spread subset")
    population.add_argument("--folder", type=Path, default=FOLDER, help="the gradings' and zero-cost scores' folder")
    timing = modes.add_parser("time", help="median thread-seconds of a training step, per size and method")
    timing.add_argument("--images", type=Path, required=True, help="the extracted CIFAR-10 image folder")
    timing.add_argument("--channels", type=int, nargs="+", default=[8, 16])
    timing.add_argument("--cells", type=int, nargs="+", default=[1, 2])
    timing.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=["spos"])
    timing.add_argument("--steps", type=int, default=20, help="timed steps per size (median)")
    timing.add_argument("--set", nargs="*", default=[], help="more config overrides")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    common.use_threads(args.threads)
    if args.mode == "sample":
        archs = draw_sample(paper_space(), args.size, args.seed)
        if args.check:
            if [arch_id(a) for a in read_sample(paper_space(), args.out)] != [arch_id(a) for a in archs]:
                raise NasError(f"--out: {args.out} is not the draw of seed {args.seed} and size {args.size}")
            print(f"{args.out}: the same {len(archs)} networks as drawn now (seed {args.seed})")
            figures = {"mode": "sample", "archs": len(archs), "seed": args.seed, "same": True}
        else:
            write_sample(archs, args.out)
            print(f"{args.out}: {len(archs)} distinct networks (seed {args.seed})")
            figures = {"mode": "sample", "archs": len(archs), "seed": args.seed, "out": str(args.out)}
    elif args.mode == "zero-cost":
        scored = score_missing(args.images, read_sample(paper_space(), args.sample), ZERO_COST)
        figures = {"mode": "zero-cost", "scored_now": scored, "out": str(ZERO_COST)}
    elif args.mode == "commands":
        if args.ranks < 1:
            raise NasError(f"--ranks: {args.ranks} is not a number of processes (1 or more)")
        lines = [train_command(m, s, args.images, args.ranks) for m in args.methods for s in args.seeds]
        print("\n".join(lines))
        figures = {"mode": "commands", "commands": lines}
    elif args.mode == "grade":
        figures = grade(args)
    elif args.mode == "ceiling":
        figures = ceiling(args)
    elif args.mode == "populations":
        figures = {"mode": "populations", **populations(args.intervals, args.folder)}
    elif args.mode == "beside-ceiling":
        figures = {"mode": "beside-ceiling", **beside_ceiling(args.ceiling, args.folder)}
    else:
        figures = time_steps(args)
    return common.emit("nb201_supernets", figures, argv)


if __name__ == "__main__":
    common.run(main)
