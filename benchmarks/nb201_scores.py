"""Every zero-cost proxy of `nas` on NAS-Bench-201's paper-scale network, per arch, into a CSV.

The archs: NASLib's 725 (`--naslib`) and `--random N` more drawn (seeded) from the benchmark's
15,625, canonical and distinct from each other and from NASLib's. Each is scored by every proxy
of `--proxies` on a freshly initialised network (init seed `--init-seed`, one initialisation, as
NASLib scores) with two batches of 64 CIFAR-10 training images drawn with `--batch-seed` from an
image folder (`--images DIR`, `DIR/<class>/*.jpg`, e.g. `train/` of the shared JPEGs); every
proxy reads the first batch, `zico` both. One row per arch (`arch_id`, NAS-Bench-201 string,
`source`, one column per proxy) is appended as soon as it is scored, so a killed run resumes
where it stopped (`--out` is read first; archs already there are skipped).

    python -m benchmarks.nb201_scores --images /tmp/cifar/train --out benchmarks/nb201/scores_b0_i0.csv
    python -m benchmarks.nb201_scores --images /tmp/cifar/train --random 0 --limit 100 \\
        --batch-seed 1 --out benchmarks/nb201/scores_b1_i0.csv      # the batch's share of the noise

Two processes can share the work: `--out FIRST.csv --done SECOND.csv` and
`--reverse --out SECOND.csv --done FIRST.csv` score the list from both ends and stop where they meet.
`benchmarks.nb201_proxies` analyses the files (it merges files by arch).
"""
from __future__ import annotations

import argparse
import csv
import random
import time
from pathlib import Path

import torch

from benchmarks import common
from benchmarks.nb201_data import TABLE, naslib_arch, naslib_records, paper_space
from estimators import EstimatorContext, build_estimator
from nas.core.arch import Arch, arch_id
from nas.engine.data.datasets import CIFAR10_MEAN, CIFAR10_STD
from search_spaces.cell201 import from_nb201_string, to_nb201_string

PROXIES = ("macs", "params", "synflow", "snip", "grad_norm", "jacov", "naswot", "zico")
BATCH_SIZE = 64


def cifar_batches(folder: Path, count: int, size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`count` batches of `size` images drawn (seeded, without replacement) from `folder/<class>/*`,
    normalised with CIFAR-10's statistics."""
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor

    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files = [(f, label) for label, c in enumerate(classes) for f in sorted((folder / c).iterdir())]
    chosen = random.Random(seed).sample(files, count * size)
    mean, std = torch.tensor(CIFAR10_MEAN).view(3, 1, 1), torch.tensor(CIFAR10_STD).view(3, 1, 1)
    batches = []
    for start in range(0, count * size, size):
        part = chosen[start:start + size]
        images = torch.stack([pil_to_tensor(Image.open(f).convert("RGB")).float() / 255 for f, _ in part])
        batches.append(((images - mean) / std, torch.tensor([label for _, label in part])))
    return batches


def benchmark_archs(space, random_count: int, seed: int, naslib: bool = True) -> list[tuple[str, Arch]]:
    """(source, canonical arch): NASLib's archs (file order), then `random_count` distinct others
    drawn from the table's 15,625 rows with `seed`."""
    chosen: dict[str, tuple[str, Arch]] = {}
    naslib_ids = set()
    for key in naslib_records():
        arch = space.canonical(naslib_arch(key))
        naslib_ids.add(arch_id(arch))
        if naslib:
            chosen.setdefault(arch_id(arch), ("naslib", arch))
    with TABLE.open(newline="") as f:
        strings = [row["arch"] for row in csv.DictReader(f)]
    random.Random(seed).shuffle(strings)
    drawn = 0
    for text in strings:
        if drawn >= random_count:
            break
        arch = space.canonical(from_nb201_string(text))
        if arch_id(arch) in naslib_ids or arch_id(arch) in chosen:
            continue
        chosen[arch_id(arch)] = ("random", arch)
        drawn += 1
    return list(chosen.values())


def done_ids(path: Path) -> set[str]:
    """Arch ids already in `path` (complete rows only)."""
    if not path.is_file():
        return set()
    with path.open(newline="") as f:
        return {row["arch_id"] for row in csv.DictReader(f) if row.get(PROXIES[-1]) not in (None, "")}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, required=True, help="an image folder: <class>/*.jpg")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write (appended; resumes)")
    parser.add_argument("--random", type=int, default=1000, help="archs drawn beyond NASLib's")
    parser.add_argument("--no-naslib", action="store_true", help="only the random archs")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N archs of the list")
    parser.add_argument("--batch-seed", type=int, default=0)
    parser.add_argument("--init-seed", type=int, default=0)
    parser.add_argument("--draw-seed", type=int, default=0, help="seed of the random archs' draw")
    parser.add_argument("--reverse", action="store_true",
                        help="score the list from its end (a second process, writing its own --out)")
    parser.add_argument("--done", type=Path, nargs="*", default=[],
                        help="other score files whose archs to skip (e.g. the first process's); re-read "
                             "before each arch, so the two processes stop where they meet")
    common.threads_argument(parser, 1)
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    space = paper_space()
    archs = benchmark_archs(space, args.random, args.draw_seed, naslib=not args.no_naslib)[:args.limit]
    done = done_ids(args.out).union(*(done_ids(path) for path in args.done))
    todo = [(source, arch) for source, arch in archs if arch_id(arch) not in done]
    if args.reverse:
        todo.reverse()
    context = EstimatorContext(space, cifar_batches(args.images, 2, BATCH_SIZE, args.batch_seed), init_seeds=1,
                               seed=args.init_seed)
    estimators = [build_estimator(name) for name in PROXIES]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fresh = not args.out.is_file() or args.out.stat().st_size == 0
    start = time.time()
    with args.out.open("a", newline="") as f:
        writer = csv.writer(f)
        if fresh:
            writer.writerow(["arch_id", "arch", "source", *PROXIES])
        for n, (source, arch) in enumerate(todo, 1):
            if args.done and arch_id(arch) in set().union(*(done_ids(path) for path in args.done)):
                break  # the other process got here first: the two met, the list is done
            scores = [estimator.scores([arch], context)[0] for estimator in estimators]
            writer.writerow([arch_id(arch), to_nb201_string(arch), source, *(f"{s:.10g}" for s in scores)])
            f.flush()
            if n % 25 == 0:
                print(f"{n}/{len(todo)} archs scored ({time.time() - start:.0f} s)", flush=True)
    return common.emit("nb201_scores", {"archs": len(archs), "scored_now": len(todo), "out": str(args.out),
                                        "batch_seed": args.batch_seed, "init_seed": args.init_seed,
                                        "seconds": round(time.time() - start, 1)}, argv)


if __name__ == "__main__":
    common.run(main)
