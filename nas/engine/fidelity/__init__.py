"""The fidelity stage: how well a supernet (and each estimator) ranks subnets against their
standalone training (`nas fidelity`, `nas ground-truth`).

- `runner`: the measurement: plan, ground truth, scores, summary.
- `arch_selection`: the MACs-stratified archs measured.
- `recipe`: the standalone training recipe.
- `standalone`: one standalone training (resumable).
- `ground_truth`: the cached standalone trainings, run in worker processes.
- `estimators`: the estimators scored beside the supernet.
- `rank_stats`: rank correlations and their confidence.
- `report`: the summary, its files and its printout.
"""
