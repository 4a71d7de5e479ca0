"""Searchers: pick architectures of a trained supernet under a budget (registered by name)."""
from searchers import evolution, optuna_searcher, random_search  # noqa: F401  (registration)
