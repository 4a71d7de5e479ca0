"""Test-only plugins that exercise the strategy seam: a strategy that splits its model in
`after_step`, and a sampler that learns from `observe`. Importing this module registers them
(`toy_split`, `toy_learning`), so the contract suite covers them like any shipped plugin.
`PlantedSpace` is a space (not registered) whose gradients disagree by construction, for
testing gradient-matching splits against a known answer."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from nas.core.arch import Arch
from nas.core.errors import ArchError
from nas.core.registry import SAMPLERS, STRATEGIES, NoOptions
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace, LayerCost, Supernet
from supernets.base import Restructure, StepIO
from supernets.few_shot import Router
from supernets.one_shot import OneShotOptions, OneShotStrategy
from supernets.samplers import Sampler, Slot, StepFeedback


@dataclass(frozen=True)
class ToySplitOptions(OneShotOptions):
    split_at: int = 4      # the step after which the supernet splits in two


@STRATEGIES.register("toy_split", options=ToySplitOptions)
class ToySplitStrategy(OneShotStrategy):
    """One-shot training that, after `split_at` steps, splits the supernet into two copies on
    the space's first choice with two or more values: the first value, and the rest."""

    def __init__(self, space: ArchSpace, options: ToySplitOptions, sampler: Any, distill: Any, seed: int):
        super().__init__(space, options, sampler, distill, seed)
        always_active = space.active_keys(space.min())
        self.key = next(k for k, v in space.choices().items() if len(v) > 1 and k in always_active)
        self.model = Router([self.supernet])

    @property
    def parts(self) -> list[Supernet]:
        return list(self.model.parts)

    def _split(self) -> Restructure:
        parent = self.model.parts[0]
        values = parent.space.choices()[self.key]
        children = []
        for group in (values[:1], values[1:]):
            child = copy.deepcopy(parent)
            child.space = parent.space.restrict(self.key, group)
            children.append(child)
        copied = {new: old for child in children for new, old in zip(child.parameters(), parent.parameters())}
        self.model.parts = nn.ModuleList(children)
        return Restructure(copied, f"split {self.key}: {list(values[:1])} | {list(values[1:])}")

    def after_step(self, step: int, io: StepIO) -> Restructure | None:
        if step == self.options.split_at and len(self.model.parts) == 1:
            return self._split()
        return None

    def activate(self, arch: Mapping[str, Any]) -> Arch:
        value = self.space.canonical(arch)[self.key]
        for index, part in enumerate(self.model.parts):
            if value in part.space.choices()[self.key]:
                self.model.active = index
                self.supernet = part
                return part.set_active(arch)
        raise ArchError(f"{self.key}: {value!r} belongs to no sub-supernet")

    def subnet_for(self, arch: Mapping[str, Any]) -> Supernet:
        self.activate(arch)
        return self.supernet

    def state_dict(self) -> dict:
        return {**super().state_dict(), "parts": len(self.model.parts)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if state.get("parts", 1) == 2 and len(self.model.parts) == 1:
            self._split()


@SAMPLERS.register("toy_learning", options=NoOptions)
class ToyLearningSampler(Sampler):
    """Max and min every step plus one arch drawn from learnt logits over a fixed pool; the
    logits move (Adam) toward the pool archs with the highest loss, as `observe` reports."""

    trains_max = True
    POOL = 4

    def __init__(self, space: ArchSpace, options: NoOptions, seed: int):
        super().__init__(space, options, seed)
        rng = python_rng(seed, "toy-pool")
        self.pool = [space.sample(rng) for _ in range(self.POOL)]
        self.logits = torch.zeros(self.POOL, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.logits], lr=0.3)

    def _pick(self, step: int) -> int:
        probs = torch.softmax(self.logits.detach(), 0).tolist()
        return python_rng(self.seed, "toy-pick", step).choices(range(self.POOL), weights=probs)[0]

    def anchors(self) -> list[Arch]:
        return [self.space.max(), self.space.min()]

    def slots(self, step: int, score: Any = None) -> list[Slot]:
        return [Slot("max", self.space.max()), Slot("random0", self.pool[self._pick(step)]),
                Slot("min", self.space.min())]

    def observe(self, feedback: StepFeedback) -> None:
        loss = torch.tensor(feedback.losses[1])
        if feedback.io is not None:
            loss = feedback.io.all_reduce_mean(loss)
        picked = self.pool.index(feedback.slots[1].arch)
        self.optimizer.zero_grad()
        (-torch.log_softmax(self.logits, 0)[picked] * loss).backward()
        self.optimizer.step()

    def state_dict(self) -> dict:
        return {"logits": self.logits.detach().clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state:
            with torch.no_grad():
                self.logits.copy_(state["logits"])
            self.optimizer.load_state_dict(state["optimizer"])


class PlantedSpace(ArchSpace):
    """A linear classifier of `FEATURES` inputs with two splittable choices: `sign` multiplies
    the logits by +1 (a), +-0.5 (b), -1 (c) or -0.5 (d), and `gain` by 1, 2 or 3.

    So at a near-zero weight the gradients of the shared weight under a and c are opposite,
    and those of `gain`'s values all point the same way: gradient matching must split `sign`
    into {a, b} | {c, d}. Value b plants a disagreement between batches: it pushes like a on
    inputs whose first feature is positive and like c otherwise.
    """

    name = "planted"
    FEATURES, CLASSES = 16, 4

    def __init__(self) -> None:
        super().__init__({"gain": (1, 2, 3), "sign": ("a", "b", "c", "d")})

    def splittable_keys(self) -> tuple[str, ...]:
        return ("gain", "sign")

    def key_parameters(self, key: str) -> tuple[str, ...]:
        return (f"own_{key}.",)        # neither choice owns a parameter: the weight is shared

    def layers(self, arch: Mapping[str, Any]) -> list[LayerCost]:
        return [LayerCost("linear", self.FEATURES * self.CLASSES, self.FEATURES * self.CLASSES,
                          (self.FEATURES,), ("shared",))]

    def build_supernet(self) -> "PlantedSupernet":
        return PlantedSupernet(self)


class PlantedSupernet(Supernet):
    """The supernet of `PlantedSpace`: one shared weight near zero, scaled per arch."""

    SIGNS = {"a": 1.0, "b": 0.5, "c": -1.0, "d": -0.5}

    def __init__(self, space: PlantedSpace):
        super().__init__(space)
        self.shared = nn.Linear(space.FEATURES, space.CLASSES, bias=False)
        nn.init.normal_(self.shared.weight, std=1e-3)
        self.set_active(space.max())

    def _configure(self, arch: Arch) -> None:
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        value = self.active_arch["sign"]
        sign = torch.full((len(x), 1), self.SIGNS[value])
        if value == "b":
            sign = torch.where(x[:, :1] > 0, 0.5, -0.5)
        return sign * self.active_arch["gain"] * self.shared(x)

    def _build_static(self) -> nn.Module:
        raise NotImplementedError("the planted toy exports nothing")
