"""Fixed archs inside one or several trained runs: inherited, then fine-tuned, test top-1 of each.

Compares training methods on the same members: for every RUN, each `--arch` file (plus the min and
max subnets) is evaluated on its inherited weights (BN recalibrated, as `nas eval RUN --arch A
--split test` does), then fine-tuned alone from them at each of `--lengths` and evaluated again
(as `nas export RUN --arch A --finetune LENGTH` does). Lengths are best given in steps (`257`), so
that runs of different lengths fine-tune their members equally: `P%` is a share of each run's own
length. `--teacher` also evaluates a progressive-shrinking run's frozen teacher (the full network).
Rows are appended to `--out` (CSV) as they finish, so a killed sweep keeps what it measured.

    python -m benchmarks.fixed_members RUN [RUN ...] --arch A.json [--arch B.json ...]
        [--lengths 257 536] [--teacher] [--out CSV] [--runs-dir runs] [--threads 1]
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any, Iterator

from benchmarks import common
from nas import api
from nas.core.arch import arch_id
from nas.core.config import FinetuneConfig
from nas.core.errors import NasError
from nas.engine.export.finetune import finetune_subnet
from nas.engine.run import Run, resolve_arch
from nas.engine.run_dir import DEFAULT_RUNS_DIR

FIELDS = ("run", "arch_id", "label", "macs", "length", "steps", "val_top1", "test_top1", "thread_seconds")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="trained runs (directories or names under --runs-dir)")
    parser.add_argument("--arch", action="append", default=[], metavar="FILE",
                        help="a YAML/JSON arch file (repeat); the min and max subnets are always included")
    parser.add_argument("--lengths", nargs="*", default=[], metavar="LENGTH",
                        help="fine-tune lengths, as `nas export --finetune` takes them (default: none)")
    parser.add_argument("--teacher", action="store_true",
                        help="also evaluate the run's progressive-shrinking teacher (the frozen full network)")
    parser.add_argument("--out", default=None, metavar="CSV", help="append one row per measurement here")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    common.threads_argument(parser, default=1)
    return parser.parse_args(argv)


def members(run: Run, files: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, arch) of each arch file, then of the min and max subnets, in the run's space."""
    for file in files:
        yield Path(file).stem, resolve_arch(run.space, file)
    yield "min", run.space.min()
    yield "max", run.space.max()


def teacher_row(run: Run) -> dict[str, Any]:
    """The test top-1 of the run's progressive-shrinking teacher: its weights in the supernet, max active.
    Last on a run, since it overwrites the supernet's weights."""
    teacher = getattr(run.strategy, "teacher", None)
    if teacher is None:
        raise NasError(f"{run.dir.root}: has no teacher (not a progressive-shrinking run, or distill: none)",
                       param="--teacher")
    run.strategy.supernet.load_state_dict(teacher.state_dict())
    run.evaluator.forget()
    result = api.evaluate(run, "max", "test")
    return {"arch_id": result.arch_id, "label": "teacher", "macs": result.macs, "length": "0", "steps": 0,
            "val_top1": None, "test_top1": result.top1, "thread_seconds": 0.0}


def run_rows(run: Run, files: list[str], lengths: list[str], with_teacher: bool) -> Iterator[dict[str, Any]]:
    """One row per (member, length): length "0" is the inherited weights."""
    for label, arch in members(run, files):
        val, test = api.evaluate(run, arch, "val"), api.evaluate(run, arch, "test")
        yield {"arch_id": arch_id(arch), "label": label, "macs": test.macs, "length": "0", "steps": 0,
               "val_top1": val.top1, "test_top1": test.top1, "thread_seconds": 0.0}
        for length in lengths:
            tuned = finetune_subnet(run, arch, FinetuneConfig(length=length), progress=False)
            yield {"arch_id": arch_id(arch), "label": label, "macs": test.macs, "length": length,
                   "steps": tuned.record["steps"], "val_top1": tuned.val_top1, "test_top1": tuned.test_top1,
                   "thread_seconds": round(tuned.record["seconds"] * tuned.record["threads"], 1)}
    if with_teacher:
        yield teacher_row(run)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.use_threads(args.threads)
    out = Path(args.out) if args.out else None
    if out is not None and not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(",".join(FIELDS) + "\n")
    rows = []
    for name in args.runs:
        run = api.load_run(name, args.runs_dir)
        for row in run_rows(run, args.arch, args.lengths, args.teacher):
            row = {"run": run.dir.root.name, **row}
            rows.append(row)
            print(f"{row['run']} {row['label']:>10} {row['macs'] / 1e6:6.2f}M {row['length']:>5} "
                  f"test {100 * row['test_top1']:.2f} ({row['thread_seconds']:.0f} s)", flush=True)
            if out is not None:
                with out.open("a", newline="") as f:
                    csv.DictWriter(f, FIELDS).writerow(row)
    return common.emit("fixed_members", {"runs": args.runs, "rows": rows}, argv)


if __name__ == "__main__":
    common.run(main)
