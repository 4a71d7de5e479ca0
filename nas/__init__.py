"""nas: a weight-sharing neural architecture search engine.

Train one supernet from YAML, search it under a budget, export the subnet as plain PyTorch::

    import random

    import nas

    config = nas.load_config("fashion_mnist_mbv3", overrides=["train.epochs=1"])
    supernet = nas.build_supernet(config)
    arch = supernet.space.sample(random.Random(0))
    model = supernet.export(arch)

The package has two floors: `nas.core` is the small vocabulary every plugin imports (arch,
errors, registry, rng, config...), and `nas.engine` runs the stages and imports the plugins
(`search_spaces`, `supernets`, `searchers`). `nas.api` wires them together and `nas.cli` sits
on top. The public functions below load `nas.api` on first use, so a plugin that imports
`nas.core` never pulls in the engine.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Run", "build_space", "build_supernet", "evaluate", "export_family", "export_subnet", "fidelity",
           "ground_truth", "latency_table", "load_config", "load_run", "search", "search_family", "space_summary",
           "train", "train_summary"]

if TYPE_CHECKING:
    from nas.api import (
        Run,
        build_space,
        build_supernet,
        evaluate,
        export_family,
        export_subnet,
        fidelity,
        ground_truth,
        latency_table,
        load_config,
        load_run,
        search,
        search_family,
        space_summary,
        train,
        train_summary,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nas import api
        return getattr(api, name)
    raise AttributeError(f"module 'nas' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
