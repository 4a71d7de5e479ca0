"""`few_shot`: a supernet split into sub-supernets where the gradients of choices disagree (GM-NAS).

Until the first split epoch the strategy trains exactly like `one_shot` (the same supernet,
sampler and distillation). At the end of each epoch listed in `split.at_epochs` every current
sub-supernet is split once: for each key the space marks splittable (`splittable_keys`) that
this sub-supernet has not split yet and that has at least `branching` values, the
gradient-matching distance matrix between the key's values is averaged over `split.batches`
probe batches (gradients of every parameter except the key's own operations, one random arch
of the sub-space per batch with only the key's value changing); the values are grouped by the
partition with the least intra-group distance, and the key with the largest cut between its
groups is split (`edge_selection: random` picks a key at random instead). Each child is a
copy of the parent's weights (with the parent's optimiser state and the same learning-rate
schedule) owning `space.restrict(key, group)`, trained by its own one-shot strategy.

Routing: an arch belongs to the one sub-supernet whose split values hold the arch's
canonical values (a key that is inactive in an arch carries its first value, so the archs of
a sub-space partition their parent's). Evaluation, search and export go through
`subnet_for`, so they see one space, the union of the sub-spaces.

Interleaving: each training step trains one sub-supernet, drawn with probability proportional
to the size of its space by a generator seeded from (seed, step): a pure function of the step
and the split tree, so resumed runs and DDP ranks agree.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn

from nas.core.arch import Arch, Value, arch_id
from nas.core.errors import ArchError, ConfigError
from nas.core.registry import SAMPLERS, STRATEGIES
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace, Supernet
from supernets.base import Restructure, StepIO, Strategy
from supernets.few_shot_probe import Decision, decide_split
from supernets.gradient_matching import Metric
from supernets.one_shot import OneShotOptions, OneShotStrategy


@dataclass(frozen=True)
class SplitOptions:
    at_epochs: tuple[int, ...] = (1,)   # split every sub-supernet at the end of these epochs
    branching: int = 2                  # groups per split
    metric: Metric = "cos"
    batches: int = 4                    # probe batches per distance matrix
    edge_selection: Literal["max_cut", "random"] = "max_cut"

    def __post_init__(self) -> None:
        problems = []
        epochs = list(self.at_epochs)
        if not epochs or min(epochs) < 1 or epochs != sorted(set(epochs)):
            problems.append(f"at_epochs: must be increasing epochs >= 1, got {list(self.at_epochs)}")
        if self.branching < 2:
            problems.append(f"branching: must be >= 2, got {self.branching}")
        if self.batches < 1:
            problems.append(f"batches: must be >= 1, got {self.batches}")
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class FewShotOptions(OneShotOptions):
    split: SplitOptions = field(default_factory=SplitOptions)


class Router(nn.Module):
    """Sub-supernets behind one forward: runs the one the strategy activated last."""

    def __init__(self, parts: Sequence[Supernet]):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.active = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.parts[self.active](x)


@STRATEGIES.register("few_shot", options=FewShotOptions)
class FewShotStrategy(Strategy):
    """Sub-supernets split by gradient matching, each trained one-shot over its sub-space."""

    def __init__(self, space: ArchSpace, options: FewShotOptions, sampler: Any, distill: Any, seed: int):
        if not SAMPLERS.get(sampler.name).obj.splittable:
            raise ConfigError(f"strategy.sampler.name: few_shot cannot split the '{sampler.name}' sampler (its "
                              "state is fitted to one space); use sandwich, uniform or attentive")
        self.space, self.options, self.seed = space, options, seed
        self._plugins = (sampler, distill)
        root = OneShotStrategy(space, options, sampler, distill, seed)
        self.parts: list[OneShotStrategy] = [root]
        self.routes: list[dict[str, tuple[Value, ...]]] = [{}]   # per part: split key -> its values
        self.history: list[dict] = []
        self.rounds = 0
        self.cache_dir: Path | None = None
        self.model = Router([root.supernet])
        self._sizes = [space.size()]
        self._monitored = root.monitored_archs()

    # -- routing --------------------------------------------------------------------------
    def route(self, arch: Mapping[str, Any]) -> int:
        """Index of the sub-supernet that admits `arch`."""
        canonical = self.space.canonical(arch)
        for index, route in enumerate(self.routes):
            if all(canonical[key] in values for key, values in route.items()):
                return index
        raise ArchError(f"arch {canonical} belongs to no sub-supernet")   # unreachable for a partition

    def activate(self, arch: Mapping[str, Any]) -> Arch:
        index = self.route(arch)
        self.model.active = index
        return self.parts[index].activate(arch)

    def subnet_for(self, arch: Mapping[str, Any]) -> Supernet:
        self.activate(arch)
        return self.parts[self.model.active].supernet

    def part_of_step(self, step: int) -> int:
        """The sub-supernet step `step` trains (drawn in proportion to the sub-space sizes)."""
        if len(self.parts) == 1:
            return 0
        return python_rng(self.seed, "few-shot-part", step).choices(range(len(self.parts)), weights=self._sizes)[0]

    def monitored_archs(self) -> dict[str, Arch]:
        return dict(self._monitored)

    def trained_archs(self, step: int) -> Sequence[Arch]:
        return self.parts[self.part_of_step(step)].trained_archs(step)

    def set_cache_dir(self, path: Path | None) -> None:
        self.cache_dir = path
        for part in self.parts:
            part.set_cache_dir(self._part_cache_dir(part.space))

    def _part_cache_dir(self, space: ArchSpace) -> Path | None:
        """The run directory for the whole space; a folder per sub-space (by fingerprint) for
        the children, so their samplers' cached tables do not overwrite each other."""
        if self.cache_dir is None or space.fingerprint() == self.space.fingerprint():
            return self.cache_dir
        folder = Path(self.cache_dir) / "sub_supernets" / space.fingerprint()
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def anchor_archs(self) -> list[Arch]:
        """Every sub-supernet's anchors (its own min and max under the sandwich rule), once each:
        before a split they are trained at every step, after it at every step of their sub-supernet."""
        anchors: dict[str, Arch] = {}
        for part in self.parts:
            for arch in part.anchor_archs():
                anchors.setdefault(arch_id(arch), arch)
        return list(anchors.values())

    def sub_spaces(self) -> list[tuple[dict[str, tuple[Value, ...]], ArchSpace]]:
        """(split values, space) of every sub-supernet, in routing order."""
        return [(dict(route), part.space) for route, part in zip(self.routes, self.parts)]

    # -- training -------------------------------------------------------------------------
    def train_step(self, images: torch.Tensor, labels: torch.Tensor, step: int, io: StepIO) -> dict[str, float]:
        index = self.part_of_step(step)
        self.model.active = index
        return self.parts[index].train_step(images, labels, step, io)

    def after_step(self, step: int, io: StepIO) -> Restructure | None:
        at_epochs = self.options.split.at_epochs
        if self.rounds >= len(at_epochs) or step != at_epochs[self.rounds] * io.steps_per_epoch:
            return None
        batches = io.batches("train", self.options.split.batches, f"few-shot-round{self.rounds}")
        decisions = [d for d in (decide_split(self, index, batches, io) for index in range(len(self.parts)))
                     if d is not None]
        round_index = self.rounds
        copied = self._apply(decisions, round_index)
        self.rounds += 1
        reason = "; ".join(f"split part {d.part} on {d.key}: " + " | ".join(str(list(g)) for g in d.groups)
                           + f" (cut {d.cut:.4f})" for d in decisions)
        return Restructure(copied, reason or f"split round {round_index}: nothing left to split",
                           images={f"few_shot/round{round_index}/part{d.part}/{key}": matrix
                                   for d in decisions for key, matrix in d.matrices.items()},
                           scalars={**{f"few_shot/cut/round{round_index}/part{d.part}": d.cut for d in decisions},
                                    "few_shot/sub_supernets": float(len(self.parts))})

    def _apply(self, decisions: Sequence[Decision], round_index: int) -> dict[nn.Parameter, nn.Parameter]:
        """Replace each decided part by its children (later parts first, so indices hold)."""
        copied: dict[nn.Parameter, nn.Parameter] = {}
        for decision in sorted(decisions, key=lambda d: d.part, reverse=True):
            parent, route = self.parts[decision.part], self.routes[decision.part]
            children = []
            for group in decision.groups:
                child_space = parent.space.restrict(decision.key, group)
                supernet = copy.deepcopy(parent.supernet)
                supernet.space = child_space
                child = OneShotStrategy(child_space, self.options, *self._plugins, self.seed, supernet=supernet)
                child.set_cache_dir(self._part_cache_dir(child_space))
                supernet.set_active(child_space.max())   # the parent's last arch may lie outside
                copied.update(zip(supernet.parameters(), parent.supernet.parameters()))
                children.append(child)
            self.parts[decision.part:decision.part + 1] = children
            self.routes[decision.part:decision.part + 1] = [{**route, decision.key: tuple(g)} for g in decision.groups]
        self.history += [d.plain(round_index) for d in decisions]
        self.model.parts = nn.ModuleList([part.supernet for part in self.parts])
        self.model.active = 0
        self._sizes = [part.space.size() for part in self.parts]
        return copied

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"rounds": self.rounds, "splits": [dict(s) for s in self.history],
                "parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state: dict) -> None:
        """Replay the recorded splits on a fresh strategy (weights load afterwards)."""
        if not state:
            return
        if self.history:
            raise RuntimeError("few_shot: load_state_dict needs a freshly built strategy")
        splits = state.get("splits", [])
        for round_index in sorted({s["round"] for s in splits}):
            self._apply([Decision(s["part"], s["key"], tuple(tuple(g) for g in s["groups"]), s["cut"])
                         for s in splits if s["round"] == round_index], round_index)
        self.rounds = state.get("rounds", 0)
        for part, part_state in zip(self.parts, state.get("parts", [])):
            part.load_state_dict(part_state)
