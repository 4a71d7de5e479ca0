"""The benchmarks: one module each, run from the repository root as `python -m benchmarks.NAME`.

`BENCHMARKS` lists every benchmark with the commands BENCHMARKS.md runs and the cost class of
each on the reference machine (2 vCPUs, no GPU): "seconds" (under a minute), "minutes" (under
half an hour), "hours". `python -m benchmarks` prints the list; `python -m benchmarks --run`
(`make bench`) prints it, then runs every seconds- and minutes-class command that needs nothing
a fresh clone lacks (a trained run, a GPU). `benchmarks/common.py` holds what they share.
A new benchmark adds its module and its entry here (tests/test_benchmarks.py checks both).
"""
from __future__ import annotations

from dataclasses import dataclass

COSTS = ("seconds", "minutes", "hours")
QUICK = ("seconds", "minutes")      # what `make bench` runs


@dataclass(frozen=True)
class Command:
    """One way to run a benchmark: the arguments after `python -m benchmarks.NAME`, its cost class,
    and what it needs that a fresh clone lacks ("" when nothing: `make bench` may run it)."""

    cost: str
    args: str = ""
    needs: str = ""

    def __post_init__(self) -> None:
        if self.cost not in COSTS:
            raise ValueError(f"cost: {self.cost!r} is not one of {', '.join(COSTS)}")

    @property
    def quick(self) -> bool:
        return self.cost in QUICK and not self.needs


RUN = "a trained run (RUN)"
NB201 = "the shared NAS-Bench-201 data"
NB201_IMAGES = "the shared NAS-Bench-201 data and CIFAR-10 images"
NB201_SCORES = "benchmarks/nb201"     # the committed per-arch scores
OFA = "the ofa package (Once-for-All's code: pip install ofa)"

BENCHMARKS: dict[str, tuple[Command, ...]] = {
    "elastic_overhead": (Command("minutes", "--space mobilenetv3"), Command("minutes", "--space vit"),
                         Command("minutes", "--space cell201")),
    "ddp_overhead": (Command("minutes"),),
    "mixture_overhead": (Command("minutes", "--config fashion_mnist_vit_mos --steps 10"),),
    "few_shot_overhead": (Command("minutes", "--config fashion_mnist_cell201_gm --steps 10"),),
    "estimator_cost": (Command("minutes"),),
    "estimator_ranking": (Command("minutes", "--ground-truth benchmarks/ground_truth --config fashion_mnist_cell201 "
                                             "--archs 24 --seeds 2"),),
    "default_score": (Command("minutes", "--ground-truth benchmarks/ground_truth"),
                      Command("minutes", "--ground-truth benchmarks/ground_truth --run cell201=RUN", needs=RUN)),
    "data_throughput": (Command("minutes", "--skip memory"), Command("minutes", "--skip throughput")),
    "reliability": (Command("minutes", "--parts inputs"),
                    Command("minutes", "--kills 6 --seed 0 --parts train,search,export")),
    "shiftnas_probe": (Command("minutes"),),
    "gpu_check": (Command("minutes", needs="a CUDA GPU"),),
    "search_quality": (Command("hours", "RUN", needs=RUN),),
    "finalists_gain": (Command("hours", "RUN benchmarks/ground_truth/cell201-1c4fd9d48cb1/9c00f91f87-e4 "
                                        "--out rows.jsonl", needs=RUN),),
    "search_regret": (Command("hours", "RUN --budget 50%", needs=RUN),
                      Command("hours", "RUN --crowd benchmarks/ground_truth --budget 35%,50%,75% --search-seeds 0,1 "
                                       "--scores auto,supernet --finalists 4 --workers 2", needs=RUN)),
    "subnet_vs_standalone": (Command("hours", "RUN --arch max --arch min", needs=RUN),),
    "family_value": (Command("hours", "RUN runs/RUN/search/FAMILY --ground-truth benchmarks/ground_truth --seeds 2",
                             needs=RUN),),
    "family_finetune": (Command("minutes", "RUN runs/RUN/search/FAMILY --lengths 6% 12% --variants plain kd", needs=RUN),),
    "fixed_members": (Command("hours", "RUN [RUN ...] --arch A.json --lengths 257 536 --teacher", needs=RUN),),
    "shipped_accuracy": (Command("hours", "RUN --ground-truth benchmarks/ground_truth --ground-truth "
                                          "benchmarks/ground_truth_searched --finetune-archs 500f88c52b", needs=RUN),),
    "latency_fit": (Command("minutes", "--ks 10 20 50 100", needs=NB201),),
    "latency_probe": (Command("minutes", "--config imagenet_ofa_mbv3_w10 --resolution 224 --counts 92 120 200"),),
    "ofa_beside": (Command("minutes", "--threads 2 --batch 32 --resolution 128 --steps 10", needs=OFA),
                   Command("minutes", "--tiny", needs=OFA)),
    "nb201_costs": (Command("minutes", needs=NB201),),
    "nb201_searchers": (Command("hours", needs=NB201),
                        Command("minutes", "--queries 50,100,300 --searchers evolution "
                                           "--option evolution.population=20", needs=NB201)),
    "nb201_scores": tuple(Command(cost, f"--images DIR/train --out {NB201_SCORES}/{args}", needs=NB201_IMAGES)
                          for cost, args in [
                              ("hours", "scores_naslib_b0_i0.csv --random 0"),
                              ("hours", f"scores_random_b0_i0.csv --no-naslib "
                                        f"--done {NB201_SCORES}/scores_random_b0_i0_rev.csv"),
                              ("hours", f"scores_random_b0_i0_rev.csv --no-naslib --reverse "
                                        f"--done {NB201_SCORES}/scores_random_b0_i0.csv"),
                              ("minutes", "scores_naslib_b1_i0.csv --random 0 --limit 100 --batch-seed 1"),
                              ("minutes", "scores_naslib_b0_i1.csv --random 0 --limit 100 --init-seed 1")]),
    "nb201_proxies": (Command("minutes", f"--scores {NB201_SCORES}/scores_naslib_b0_i0.csv "
                                         f"{NB201_SCORES}/scores_random_b0_i0.csv "
                                         f"{NB201_SCORES}/scores_random_b0_i0_rev.csv "
                                         f"--other-batch {NB201_SCORES}/scores_naslib_b1_i0.csv "
                                         f"--other-init {NB201_SCORES}/scores_naslib_b0_i1.csv",
                              needs=NB201),),
    "nb201_default_answer": (Command("hours", "--images DIR", needs=NB201_IMAGES),),
    "nb201_supernets": (Command("seconds", "sample --check"),
                        Command("minutes", "time --images DIR --steps 20", needs=NB201_IMAGES),
                        Command("minutes", "zero-cost --images DIR/train", needs=NB201_IMAGES),
                        Command("seconds", "commands --images DIR --seeds 0 1"),
                        Command("hours", "grade runs/nb201cpu-spos-s0 runs/nb201cpu-spos-s1 runs/nb201cpu-sandwich-s0 "
                                         "runs/nb201cpu-sandwich-s1 runs/nb201cpu-pada-s0 runs/nb201cpu-pada-s1 "
                                         "runs/nb201cpu-gm-s0 runs/nb201cpu-gm-s1", needs=f"{RUN}, {NB201}"),
                        Command("hours", "ceiling --images DIR --archs 16 --set space.options.channels=8 "
                                         "space.options.cells_per_stage=1 --out benchmarks/nb201/ceiling_c8n1.csv",
                                needs=NB201_IMAGES),
                        Command("seconds", "beside-ceiling"),
                        Command("seconds", "populations", needs=NB201)),
    "ranking": (Command("hours", "--ground-truth DIR --config fashion_mnist_cell201 --workers 2"),),
    "standalone_speed": (Command("hours"),),
    "bf16_speed": (Command("minutes"),),
    "train_quality": (Command("hours"),),
    "distill_ablation": (Command("hours"),),
    "alphanet_equivalence": (Command("minutes", "--attentivenas DIR --alphanet DIR --random 20",
                                     needs="checkouts of facebookresearch/AttentiveNAS and AlphaNet (DIR)"),),
    "ofa_equivalence": (Command("hours", needs="the ofa package (the dev extra)"),
                        Command("minutes", "--subnets 4 --widths 1.0", needs="the ofa package (the dev extra)")),
}
