"""nas: a weight-sharing neural architecture search engine.

Train one supernet from YAML, search it under a budget, export the subnet as plain PyTorch::

    import nas
    config = nas.load_config("fashion_mnist_mbv3", overrides=["train.epochs=1"])
    supernet = nas.build_supernet(config)
    arch = supernet.space.sample(random.Random(0))
    model = supernet.export(arch)
"""
from nas.api import build_space, build_supernet, load_config, space_summary

__all__ = ["build_space", "build_supernet", "load_config", "space_summary"]
__version__ = "0.1.0"
