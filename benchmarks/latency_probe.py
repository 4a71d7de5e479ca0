"""Latency probe: how well `latency-fit` predicts from the probe's subnets vs random ones.

A planted additive latency (one cost per layer group of `--config`'s space at `--resolution`,
drawn uniformly in [0.05, 1] ms, a 2 ms constant) times N subnets with multiplicative Gaussian
noise (`--noise`); `latency-fit`'s fit on them predicts 1,000 other subnets of the space. The
N subnets are `nas latency-probe`'s (greedy D-optimal) or drawn at random (`--draws` sets);
printed: the rank of each design and the MAPE of the predictions against the planted truth
(the median over `--noise-draws` draws of the noise).

    python -m benchmarks.latency_probe --config imagenet_ofa_mbv3_w10 --resolution 224 --counts 92 120 200
"""
from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

import numpy as np

from benchmarks import common
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.core.registry import SPACES, load_plugins
from nas.engine.latency.fit import fit_table, space_groups
from nas.engine.latency.probe import at_resolution, d_optimal, design_matrix, probe_pool
from nas.engine.latency.timings import Timings


def prediction_mape(space, groups, archs, planted, noise: float, others, seed: int) -> float:
    """MAPE (%) on `others` of a fit to `archs` timed by `planted` with `noise`."""
    costs, constant = planted
    rng = np.random.default_rng(seed)

    def truth(arch) -> float:
        return constant + sum(costs.get(layer.key, 0.0) for layer in space.layers(arch))

    ms = [truth(a) * (1 + noise * rng.standard_normal()) for a in archs]
    table, _ = fit_table(space, Timings(Path("planted.csv"), "latency_ms", list(archs), ms, list(archs)))
    true = np.array([truth(a) for a in others])
    return float(100 * np.mean(np.abs(np.array([table.predict(space, a) for a in others]) - true) / true))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="imagenet_ofa_mbv3_w10")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--counts", type=int, nargs="+", default=[92, 120, 200], help="subnets timed")
    parser.add_argument("--draws", type=int, default=5, help="random sets per count")
    parser.add_argument("--noise", type=float, default=0.02, help="relative timing noise (default 0.02)")
    parser.add_argument("--noise-draws", type=int, default=5, help="noise draws per set (their median MAPE)")
    common.threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    load_plugins()
    entry = SPACES.get("mobilenetv3")
    space, resolution = at_resolution(entry.obj(load_config(args.config).space.options, 3, 1000), args.resolution)
    groups, _ = space_groups(space)
    pool = probe_pool(space)
    x = design_matrix(space, groups, pool)
    rng = random.Random(0)
    planted = ({key: cost for group in groups.groups for cost in [rng.uniform(0.05, 1.0)] for key in group}, 2.0)
    others = [space.sample(random.Random(99)) for _ in range(1000)]
    print(f"{args.config} at {resolution} px: {len(groups.groups)} layer groups, {groups.free} free costs, pool "
          f"{len(pool)} archs of design rank {np.linalg.matrix_rank(x)}; noise {args.noise:.0%}", flush=True)
    results = {}
    draws = np.random.default_rng(0)
    for count in args.counts:
        def median_mape(picked) -> float:
            """Median over `--noise-draws` draws of the timing noise (one draw says little)."""
            try:
                return statistics.median(prediction_mape(space, groups, [pool[i] for i in picked], planted, args.noise,
                                                         others, seed) for seed in range(args.noise_draws))
            except ConfigError:        # a layer group never timed: the fit refuses the set
                return float("inf")

        chosen = d_optimal(x, count)
        probe = {"rank": int(np.linalg.matrix_rank(x[chosen])), "mape_pct": median_mape(chosen)}
        randoms = []
        for _ in range(args.draws):
            picked = draws.choice(len(pool), count, replace=False)
            randoms.append({"rank": int(np.linalg.matrix_rank(x[picked])), "mape_pct": median_mape(picked)})
        results[count] = {"probe": probe, "random": randoms,
                          "random_median_mape_pct": statistics.median(r["mape_pct"] for r in randoms)}
        print(f"N {count:4d}: probe rank {probe['rank']}, MAPE {probe['mape_pct']:.2f}%; random ranks "
              f"{sorted(r['rank'] for r in randoms)}, MAPE median {results[count]['random_median_mape_pct']:.2f}% "
              f"(each: {', '.join(format(r['mape_pct'], '.2f') for r in randoms)})", flush=True)
    return common.emit("latency_probe", {"config": args.config, "resolution": resolution, "free_costs": groups.free,
                                         "pool_rank": int(np.linalg.matrix_rank(x)), "noise": args.noise,
                                         "results": results}, argv)


if __name__ == "__main__":
    common.run(main)
