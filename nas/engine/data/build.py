"""The data source a config asks for: in memory (`nas.engine.data.sources`) or streamed
(`nas.engine.data.streaming`); above both, so neither imports the other back."""
from __future__ import annotations

from nas.core.config import DataConfig
from nas.engine.data.datasets import load_dataset
from nas.engine.data.sources import DataSource, in_memory_source
from nas.engine.data.streaming import streaming_source


def build_source(config: DataConfig, pin_memory: bool = False) -> DataSource:
    """The data source a config asks for (`data.in_memory`, see `DataConfig.streams`).

    Args:
        config: The `data` section.
        pin_memory: Hand out batches in pinned memory (for fast copies to a CUDA device);
            only the streaming path pins.
    """
    if config.streams:
        return streaming_source(config, pin_memory)
    splits = load_dataset(config.name, config.root, config.val_size, config.train_size, config.split_seed,
                          config.image_size)
    return in_memory_source(splits, config)
