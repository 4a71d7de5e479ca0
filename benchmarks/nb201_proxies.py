"""Zero-cost proxies on NAS-Bench-201: parity with NASLib's own scores, and rank agreement with
the benchmark's CIFAR-10 test accuracies, on a sample of the 725 archs of NASLib's file.

For `--archs N` archs drawn (seeded) from NASLib's file, every proxy of `--proxies` is computed
by the product's estimators on the paper-scale network (`cifar10_nb201`'s space) with one batch
of 64 CIFAR-10 training images (NASLib's setting) read from an image folder (`--images DIR`,
`DIR/<class>/*.jpg`, e.g. `train/` of the shared JPEGs), `--init-seeds` initialisations. Prints
per proxy: Spearman between our score and NASLib's score of the same arch (all archs, and those
without dead edges, which nas prunes and NASLib's network runs), and Spearman of each with the
table's test accuracy; then one JSON line.

    python -m benchmarks.nb201_proxies --images /tmp/cifar/train [--archs 100] [--init-seeds 1]
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import common
from benchmarks.nb201_data import TABLE, naslib_arch, naslib_records, paper_space
from estimators import EstimatorContext, build_estimator
from estimators.table import read_table
from nas.core.ranks import average_ranks
from nas.engine.data.datasets import CIFAR10_MEAN, CIFAR10_STD
from search_spaces.cell201 import to_nb201_string

NASLIB_NAMES = {"synflow": "synflow", "snip": "snip", "grad_norm": "grad_norm", "jacov": "jacov",
                "naswot": "nwot", "macs": "flops", "params": "params"}


def spearman(x, y) -> float:
    return float(np.corrcoef(average_ranks(np.asarray(x, float)), average_ranks(np.asarray(y, float)))[0, 1])


def cifar_batch(folder: Path, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` images drawn (seeded) from `folder/<class>/*`, normalised with CIFAR-10's statistics."""
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor

    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files = [(f, label) for label, c in enumerate(classes) for f in sorted((folder / c).iterdir())]
    chosen = random.Random(seed).sample(files, size)
    images = torch.stack([pil_to_tensor(Image.open(f).convert("RGB")).float() / 255 for f, _ in chosen])
    mean, std = torch.tensor(CIFAR10_MEAN).view(3, 1, 1), torch.tensor(CIFAR10_STD).view(3, 1, 1)
    return (images - mean) / std, torch.tensor([label for _, label in chosen])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, required=True, help="an image folder: <class>/*.jpg")
    parser.add_argument("--archs", type=int, default=100)
    parser.add_argument("--init-seeds", type=int, default=1)
    parser.add_argument("--proxies", default="macs,params,synflow,snip,grad_norm,jacov,naswot")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    space, records = paper_space(), naslib_records()
    keys = random.Random(args.seed).sample(sorted(records), args.archs)
    raw = [naslib_arch(k) for k in keys]
    archs = [space.canonical(a) for a in raw]
    live = [a == c for a, c in zip(raw, archs)]
    table = read_table(f"table:{TABLE}", space)
    from nas.core.arch import arch_id
    accuracy = [table[arch_id(a)] for a in archs]
    context = EstimatorContext(space, [cifar_batch(args.images, 64, args.seed)], init_seeds=args.init_seeds,
                               seed=args.seed)
    rows = {}
    for name in args.proxies.split(","):
        start = time.process_time()
        ours = build_estimator(name).scores(archs, context)
        theirs = [records[k][NASLIB_NAMES[name]]["score"] for k in keys]
        alive = [i for i, ok in enumerate(live) if ok]
        rows[name] = {"parity": spearman(ours, theirs),
                      "parity_live": spearman([ours[i] for i in alive], [theirs[i] for i in alive]),
                      "ours_vs_accuracy": spearman(ours, accuracy), "naslib_vs_accuracy": spearman(theirs, accuracy),
                      "cpu_seconds": round(time.process_time() - start, 1)}
        r = rows[name]
        print(f"{name:10s} parity {r['parity']:.3f} (live {r['parity_live']:.3f}, {len(alive)} archs)  "
              f"vs accuracy: ours {r['ours_vs_accuracy']:.3f}, NASLib's {r['naslib_vs_accuracy']:.3f}  "
              f"[{r['cpu_seconds']} CPU s]", flush=True)
    common.emit("nb201_proxies", {"archs": args.archs, "live": sum(live), "init_seeds": args.init_seeds, "rows": rows,
                                   "example": to_nb201_string(raw[0])}, argv)
    return rows


if __name__ == "__main__":
    common.run(main)
