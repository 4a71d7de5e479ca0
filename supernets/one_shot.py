"""`one_shot`: weight-sharing training with a sampler and in-place distillation (BigNAS).

The strategy builds one supernet from the space, seeded by `train.seed`; with
`strategy.mixture` its declared layers get arch-routed mixture-of-experts weights (routers
and experts are then ordinary parameters of the model: optimised, checkpointed and
all-reduced like the rest). Per step the
sampler names the subnets; a `max` subnet, when the sampler trains one, learns from the
labels (label-smoothed cross-entropy) and, with a distillation loss, its detached output
becomes the soft target of every other subnet of the step; without a teacher, or with
`distill: none`, every subnet learns from the labels. Gradients are summed over the subnets,
then the sampler observes the step's losses. Where the run samples its data by importance, the
logits of the first `random` slot (the sampled path; else the first slot) go to
`StepIO.record_logits`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import DISTILL_LOSSES, SAMPLERS, STRATEGIES
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace, Supernet
from supernets.base import StepIO, Strategy, preserved_buffers, seeded_supernet
from supernets.mixture import MixtureOptions, apply_mixture
from supernets.samplers import Slot, StepFeedback


@dataclass(frozen=True)
class OneShotOptions:
    label_smoothing: float = 0.1   # on label-trained subnets (the max subnet under the sandwich rule)
    mixture: MixtureOptions | None = None   # mixture-of-supernets weights (supernets/mixture.py); null: plain

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing}")


@STRATEGIES.register("one_shot", options=OneShotOptions)
class OneShotStrategy(Strategy):
    """One supernet; each step trains the sampler's subnets on the same batch.

    `supernet`, when given, is trained instead of a freshly seeded one (a few-shot strategy
    hands each sub-supernet it splits off to a one-shot strategy over the sub-space).
    """

    def __init__(self, space: ArchSpace, options: OneShotOptions, sampler: Any, distill: Any, seed: int,
                 supernet: Supernet | None = None):
        self.space, self.options, self.seed = space, options, seed
        self.model = self.supernet = supernet if supernet is not None else seeded_supernet(space, seed)
        if options.mixture is not None and supernet is None:   # a few-shot child inherits its parent's mixture
            apply_mixture(self.supernet, options.mixture, seed)
        self.sampler = SAMPLERS.get(sampler.name).obj(space, sampler.options, seed)
        self.distill = DISTILL_LOSSES.get(distill.name).obj(distill.options)   # None: labels only
        if self.distill is not None and not self.sampler.trains_max:
            raise ConfigError(f"strategy.distill.name: '{distill.name}' distils from the max subnet, which "
                              f"sampler '{sampler.name}' does not train; use distill: none or a sampler that "
                              f"trains it (sandwich, attentive)")
        self._monitored = {"min": space.min(), "mid": space.sample(python_rng(seed, "monitored-mid")),
                           "max": space.max()}

    def activate(self, arch: Mapping[str, Any]) -> Arch:
        return self.supernet.set_active(arch)

    def set_cache_dir(self, path: Path | None) -> None:
        self.sampler.cache_dir = path

    def subnet_for(self, arch: Mapping[str, Any]) -> Supernet:
        self.activate(arch)
        return self.supernet

    def monitored_archs(self) -> dict[str, Arch]:
        return dict(self._monitored)

    def trained_archs(self, step: int) -> Sequence[Arch]:
        return [slot.arch for slot in self.sampler.slots(step)]

    def _label_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels, label_smoothing=self.options.label_smoothing)

    def train_step(self, images: torch.Tensor, labels: torch.Tensor, step: int, io: StepIO) -> dict[str, float]:
        slots: list[Slot] = self.sampler.slots(step, score=self.scorer(images, labels, io))
        teacher, logs, losses = None, {}, []
        recorded = next((i for i, slot in enumerate(slots) if slot.role.startswith("random")), 0)
        for i, slot in enumerate(slots):
            with io.pass_context(i == len(slots) - 1):
                self.activate(slot.arch)
                logits = io.forward(images)
                if teacher is None:
                    loss, extra = self._label_loss(logits, labels), {}
                else:
                    loss, extra = self.distill(logits, teacher, labels)
                if slot.role == "max" and self.distill is not None:
                    teacher = logits.detach()
                if i == recorded and io.record_logits is not None:   # data.sampling: pada
                    io.record_logits(logits.detach(), labels)
                loss.backward()
            losses.append(loss.item())
            logs[f"loss/{slot.role}"] = losses[-1]
            logs.update({f"{key}/{slot.role}": value for key, value in extra.items()})
        self.sampler.observe(StepFeedback(step, slots, losses, self.probe, io, self.subnet_for))
        logs.update(self.sampler.logs())
        return logs

    def probe(self, arch: Mapping[str, Any], images: torch.Tensor, labels: torch.Tensor) -> float:
        """Label loss of `arch` on a batch, leaving weights and every buffer untouched (local)."""
        return self._losses([arch], images, labels, self.supernet)[0].item()

    def _losses(self, archs: Sequence[Arch], images: torch.Tensor, labels: torch.Tensor,
                forward: Any) -> list[torch.Tensor]:
        losses = []
        with preserved_buffers(self.supernet), torch.no_grad():
            for arch in archs:
                self.activate(arch)
                losses.append(self._label_loss(forward(images), labels))
        return losses

    def scorer(self, images: torch.Tensor, labels: torch.Tensor, io: StepIO):
        """Loss of candidate archs on this batch, leaving weights and every buffer untouched.

        Under DDP the losses are all-reduced (a collective), so every rank must call the
        returned function equally often, with the same number of candidates.
        """

        def score(candidates: Sequence[Arch]) -> list[float]:
            if not candidates:
                return []
            losses = self._losses(candidates, images, labels, io.forward)
            return io.all_reduce_mean(torch.stack(losses)).tolist()

        return score

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state.get("sampler", {}))
