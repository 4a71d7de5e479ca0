"""`data.sampling: pada`: each epoch's training images drawn by importance (PA&DA data sampling).

Paper: "PA&DA: Jointly Sampling PAth and DAta for Consistent NAS", CVPR 2023. An image's
importance is the norm of its loss gradient; for softmax cross-entropy the gradient w.r.t.
the logits z is `softmax(z) - y`, so its norm costs no extra backward pass.

- Which logits: the strategy hands `StepIO.record_logits` the detached logits of one path it
  trained on the batch, once a step (one-shot training: its first `random` slot, the sampled
  path, else its first slot). The norm is `||softmax(z) - y||_2` with y the one-hot label (the
  mixed target under mixup/cutmix), in [0, sqrt(2)].
- Recording: each step the norms of the whole global batch are summed over ranks (each rank
  fills its own rows of a batch-sized vector), then added per image index with a count; so
  every rank holds the same sums at every step, and a checkpoint rank 0 writes mid-epoch is
  every rank's state (the per-image sums of the paper's epoch, all-reduced step by step).
- Epoch end: an image's norm is the mean of its norms in the epoch (repeats averaged). An
  image the epoch did not draw gets norm 0 under `data.pada.undrawn_norm: zero` (the default,
  as the authors' code, ShunLu91/PA-DA nasbench201/train_panda_201.py, which rebuilds the norms
  from zeros each epoch): next epoch it is drawn only through the uniform part. `keep` (the
  former rule): it keeps its last norm, and one never drawn yet counts with the mean of the
  known ones. `p = tau * norm / sum(norm) + (1 - tau) / n`, tau from `data.pada.mix_schedule`
  (`supernets.pada.mixing_weight`: `published` e / E at the end of epoch e counted from 0,
  so epoch 1 is drawn uniformly too; `shifted` (e + 1) / E). Left as it was: the authors
  average an image's repeats pairwise as they come (`(old + new) / 2`), here their mean.
- Order: epoch 0 is the plain seeded permutation; every later epoch is n draws with
  replacement from its `p` (a generator seeded by (seed, epoch)), so the epoch length is
  unchanged. Losses are not re-weighted (as the paper's code).

The state (p, norms, the epoch's sums and counts, tau) goes into the checkpoint, so a run
resumed mid-epoch continues bit-exactly. Needs in-memory data (checked by `DataConfig`).
"""
from __future__ import annotations

from typing import Callable, Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F

from nas.core.config import RunConfig
from nas.core.errors import ConfigError
from nas.core.rng import torch_generator
from nas.engine.data.batches import epoch_order
from nas.engine.data.sources import DataSource, InMemorySource
from supernets.pada import MixSchedule, mixing_weight


def example_norms(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per example `||softmax(z) - y||_2`: the norm of the gradient of the (unsmoothed)
    cross-entropy w.r.t. the logits. `labels` are class indices or N x classes targets."""
    probs = torch.softmax(logits.detach().float(), dim=1)
    target = F.one_hot(labels, probs.shape[1]).float() if labels.dim() == 1 else labels.float()
    return (probs - target).norm(dim=1)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum of `tensor` over ranks (the tensor itself on one process)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    reduced = tensor.detach().clone()
    dist.all_reduce(reduced)
    return reduced


class DataImportance:
    """Per-image gradient norms of a run and the epoch orders drawn from them (module docstring)."""

    def __init__(self, num_images: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 mix_schedule: MixSchedule = "published", undrawn_norm: Literal["zero", "keep"] = "zero"):
        self.num_images, self.batch_size, self.seed = num_images, batch_size, seed
        self.mix_schedule, self.undrawn_norm = mix_schedule, undrawn_norm
        self.rank, self.world_size = rank, world_size
        self.sums = torch.zeros(num_images, dtype=torch.float64)     # this epoch's norms per image
        self.counts = torch.zeros(num_images, dtype=torch.float64)
        self.norms = torch.zeros(num_images, dtype=torch.float64)    # last epoch mean per image
        self.known = torch.zeros(num_images, dtype=torch.bool)
        self.probs = torch.zeros(0, dtype=torch.float64)             # this epoch's p; empty: permutation
        self.tau = 0.0
        self.recorded = False
        self._order: tuple[int, torch.Tensor] | None = None

    def order(self, epoch: int) -> torch.Tensor:
        """The image indices of `epoch`: a pure function of (seed, epoch) and `probs`."""
        if self._order is None or self._order[0] != epoch:
            if len(self.probs) == 0:
                order = epoch_order(self.num_images, self.seed, epoch)
            else:
                order = torch.multinomial(self.probs, self.num_images, replacement=True,
                                          generator=torch_generator(self.seed, "data.pada", epoch))
            self._order = (epoch, order)
        return self._order[1]

    def recorder(self, epoch: int, step: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
        """`StepIO.record_logits` for in-epoch step `step` of `epoch` (a collective under DDP)."""
        def record(logits: torch.Tensor, labels: torch.Tensor) -> None:
            self.record(epoch, step, example_norms(logits, labels))
        return record

    def record(self, epoch: int, step: int, norms: torch.Tensor) -> None:
        """Add this rank's per-example `norms` of in-epoch step `step` (every rank's, summed)."""
        share = self.batch_size // self.world_size
        if len(norms) != share:
            raise ValueError(f"data.sampling: pada: {len(norms)} norms for a rank's {share} images of a batch")
        batch = torch.zeros(self.batch_size, dtype=norms.dtype, device=norms.device)
        batch[self.rank * share:(self.rank + 1) * share] = norms
        batch = all_reduce_sum(batch).double().cpu()
        index = self.order(epoch)[step * self.batch_size:(step + 1) * self.batch_size]
        self.sums.index_add_(0, index, batch)
        self.counts.index_add_(0, index, torch.ones_like(batch))
        self.recorded = True

    def after_step(self, done: int, steps_per_epoch: int, total_steps: int) -> None:
        """After optimiser step `done - 1`: check it recorded; at an epoch end, the next `p`."""
        if not self.recorded:
            raise ConfigError(f"data.sampling: pada needs the logits of a trained path, and step {done - 1} handed "
                              f"none (the strategy must call StepIO.record_logits once a step); use data.sampling: "
                              f"uniform")
        self.recorded = False
        if done % steps_per_epoch == 0:
            self.end_epoch(mixing_weight(done // steps_per_epoch, steps_per_epoch, total_steps, self.mix_schedule))

    def end_epoch(self, tau: float) -> None:
        """The next epoch's `p` from this epoch's mean norms, mixed with uniform by `tau`."""
        seen = self.counts > 0
        if self.undrawn_norm == "zero":
            self.norms.zero_()
        self.norms[seen] = self.sums[seen] / self.counts[seen]
        self.known |= seen
        norms = self.norms
        if self.undrawn_norm == "keep" and self.known.any():
            norms = torch.where(self.known, self.norms, self.norms[self.known].mean())
        total = norms.sum()
        uniform = torch.full_like(norms, 1.0 / self.num_images)
        self.probs = tau * norms / total + (1 - tau) * uniform if total > 0 else uniform
        self.tau = tau
        self.sums.zero_()
        self.counts.zero_()
        self._order = None

    def state_dict(self) -> dict:
        return {"sums": self.sums.clone(), "counts": self.counts.clone(), "norms": self.norms.clone(),
                "known": self.known.clone(), "probs": self.probs.clone(), "tau": self.tau}

    def load_state_dict(self, state: dict) -> None:
        for name in ("sums", "counts", "norms", "known", "probs"):
            if name != "probs" and state[name].shape != (self.num_images,):
                raise ValueError(f"data sampling state {name} has shape {tuple(state[name].shape)}, "
                                 f"this dataset {self.num_images} images")
            setattr(self, name, state[name].clone())
        self.tau = float(state["tau"])
        self._order = None


def check_sampling(config: RunConfig, source: DataSource) -> None:
    """Raise `ConfigError` naming `data.sampling` when the run's sampling cannot read `source`."""
    if config.data.sampling == "pada" and not isinstance(source, InMemorySource):
        raise ConfigError("data.sampling: pada draws each epoch's images from in-memory data; set "
                          "data.in_memory: true or data.sampling: uniform")


def data_importance(config: RunConfig, source: DataSource, rank: int = 0, world_size: int = 1
                    ) -> DataImportance | None:
    """The run's importance state, its orders attached to `source`; None for `data.sampling: uniform`."""
    if config.data.sampling != "pada":
        return None
    check_sampling(config, source)
    importance = DataImportance(source.num_train, config.train.batch_size, config.train.seed, rank, world_size,
                                config.data.pada.mix_schedule, config.data.pada.undrawn_norm)
    source.order_for = importance.order
    return importance
