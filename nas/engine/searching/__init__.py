"""The search stage: the best subnet of a trained run within budgets.

- `stage`: `search` (the stage in one place: request, lock, loop, finalists, files).
- `request`: `SearchRequest`, every argument checked and resolved once (budgets, score, folder).
- `loop`: the search loop, once for every searcher: ask, check, evaluate, tell; and resume.
- `outputs`: the files of the answer, each written once (ranked.jsonl, pareto, best.yaml,
  summary.json).
- `finalists`: the K best by the score fine-tuned alone, the best of them answered.
- `summary`: a finished search folder's answer for people (`nas summary`).
- `score`: what ranks the candidates (the supernet or an estimator), and `auto`'s choice.
- `costs`: the budgets (MACs, parameters, latency) and the costs of each candidate.
- `results`: the search's `results.jsonl`.
- `pareto_report`: the Pareto front's files and figure.

Latency tables, timings and fits are the latency stage's (`nas.engine.latency`); the costs read them.
"""
