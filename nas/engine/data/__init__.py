"""Where training and evaluation images come from, one concept a module.

- `datasets`: files read into memory (`load_dataset` -> `ImageSplits` of uint8 tensors), the
  fixed validation split, ImageFolder listing and decoding.
- `batches`: in-memory batching: epoch order, crop/flip augmentation, evaluation and BN
  calibration batches, each DDP rank's share; all pure functions of seeds.
- `augment`: timm per-image transforms and mixup/cutmix made reproducible.
- `images`: per-image access for the streaming path (inside DataLoader workers).
- `sources`: the `DataSource` interface and its in-memory implementation.
- `streaming`: the `DataLoader`-backed source.
- `workers`: DataLoader worker processes stopped when their pass ends or is abandoned.
- `build`: `build_source`, the source a config asks for (in memory or streamed).
"""
