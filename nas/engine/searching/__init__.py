"""The search stage: the best subnet of a trained run within budgets.

- `stage`: `search`, `latency_table` and the budgets they read (what `nas.api` re-exports).
- `runner`: one search in a folder: searcher, score, constraints, results and resume.
- `score`: what ranks the candidates (the supernet or an estimator).
- `costs`: the budgets (MACs, parameters, latency) and the costs of each candidate.
- `results`: the search's `results.jsonl`.
- `pareto_report`: the Pareto front's files and figure.
- `latency`: per-layer latency tables and their measurement.
"""
