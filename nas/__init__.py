"""nas: a weight-sharing neural architecture search engine.

Train one supernet from YAML, search it under a budget, export the subnet as plain PyTorch::

    import nas
    config = nas.load_config("fashion_mnist_mbv3", overrides=["train.epochs=1"])
    supernet = nas.build_supernet(config)
    arch = supernet.space.sample(random.Random(0))
    model = supernet.export(arch)
"""
from nas.api import (Run, build_space, build_supernet, evaluate, export_subnet, load_config, load_run,
                     space_summary, train)

__all__ = ["Run", "build_space", "build_supernet", "evaluate", "export_subnet", "load_config", "load_run",
           "space_summary", "train"]
__version__ = "0.1.0"
