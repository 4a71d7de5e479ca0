"""The training stage: a supernet trained from a config into a run folder.

- `trainer`: the training loop (`Trainer`), its optimizer, gradient clipping and checkpoints.
- `schedule`: learning-rate schedules and the warm-up cap.
- `train_logging`: the progress line, TensorBoard and the interruption message.
"""
