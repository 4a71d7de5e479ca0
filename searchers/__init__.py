"""Searchers: pick architectures of a trained supernet under a budget (registered by name)."""
from searchers import evolution, generator_search, optuna_searcher, random_search  # noqa: F401  (registration)
