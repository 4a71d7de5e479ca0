"""`few_shot`: a supernet split into sub-supernets where the gradients of choices disagree (GM-NAS).

Until the first split the strategy trains exactly like `one_shot` (the same supernet, sampler
and distillation). Splits fall at fractions of the learning-rate schedule (`split.at`, default
2/9 and 4/9: the authors' NAS-Bench-201 commands for their random-single-path supernet, the
one that trains like ours, split after epochs 20 and 40 of 90; skhu101/GM-NAS,
WS-GM/nasbench201/README.md and WS-GM/exp_scripts/rsws-ws-201.sh; their DARTS and SNAS runs
split after 15 and 30 of 60, 1/4 and 1/2) or at the ends of epochs (`split.at_epochs`). At
each split every current sub-supernet is split once: for each key the space marks splittable
(`splittable_keys`) that this sub-supernet has not split yet and that has at least `branching`
values, the
gradient-matching distance matrix between the key's values is averaged over probe batches
(gradients of every parameter except the key's own operations, one random arch of the
sub-space per batch with only the key's value changing); the values are grouped by the
partition with the least intra-group distance, and the key with the largest cut between its
groups is split (`edge_selection: random` picks a key at random instead). The probe runs twice,
on two disjoint sets of `split.batches` batches: the decision uses both, and whether each alone
would have chosen the same key and the same groups is logged with the split (a decision the
two disagree on is at noise level). Each child owns `space.restrict(key, group)` and is trained
by its own one-shot strategy. At every split but the last, a child is a copy of the parent's
weights with the parent's optimiser state. At the last split, `split.reinit_children: true`
(the default, the authors' `--restart final` in every published command; train_search.py
builds each final child as a new model with a new optimiser and a new cosine scheduler) gives
each child freshly initialised weights (seeded by (seed, round, part, group)), no optimiser
state, and a learning-rate schedule restarted from its start (warm-up included), read for the
rest of the run (`lr_step`): the earlier training only decides the splits. The authors' fresh
scheduler keeps the whole run's length, so their final children stop partway down the cosine;
ours does the same (it reads the first T - s steps of the T-step schedule). `false` keeps the
copies (this project's former behaviour).

Budget (`split.budget`). `per_child` (GM-NAS): every child trains for the rest of the schedule,
so after a split at schedule step s of a T-step schedule into n sub-supernets the remaining
T - s steps become n (T - s) optimiser steps; the children take turns (step t trains part
(t - t0) mod n, t0 the split's optimiser step), and the schedule's clock advances 1/n per
optimiser step, so each child sees the rest of the original learning-rate schedule (after a
last split with `reinit_children`, the same number of steps read from the schedule's start). `shared`:
the sub-supernets share the remaining T - s steps, each step drawing one in proportion to the
size of its space from (seed, step). The trainer asks `total_steps` for the loop's length and
`schedule_step` for the schedule's position; both are pure functions of the split history.

Routing: an arch belongs to the one sub-supernet whose split values hold the arch's
canonical values (a key that is inactive in an arch carries its first value, so the archs of
a sub-space partition their parent's). Evaluation, search and export go through
`subnet_for`, so they see one space, the union of the sub-spaces.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn

from nas.core.arch import Arch, Value, arch_id
from nas.core.errors import ArchError, ConfigError, int_problems
from nas.core.registry import SAMPLERS, STRATEGIES
from nas.core.rng import derive_seed, python_rng
from search_spaces.base import ArchSpace, Supernet
from supernets.base import Restructure, StepIO, Strategy, seeded_supernet
from supernets import few_shot_budget as budget
from supernets.few_shot_probe import OPTION_PATH, Decision, decide_split, probe_halves
from supernets.gradient_matching import Metric
from supernets.mixture import apply_mixture
from supernets.one_shot import OneShotOptions, OneShotStrategy


DEFAULT_AT = (20 / 90, 40 / 90)     # the authors' random-single-path commands (module docstring)


@dataclass(frozen=True)
class SplitOptions:
    at: tuple[float, ...] | None = None          # fractions of the schedule (default DEFAULT_AT)
    at_epochs: tuple[int, ...] | None = None     # or: the ends of these epochs (not with `at`)
    budget: Literal["per_child", "shared"] = "per_child"   # each child trains the rest, or they share it
    branching: int = 2                  # groups per split
    metric: Metric = "cos"
    batches: int = 50                   # probe batches of each of the two probes
    edge_selection: Literal["max_cut", "random"] = "max_cut"
    reinit_children: bool = True        # the last split's children start from fresh weights and LR schedule

    def __post_init__(self) -> None:
        problems = []
        if self.at is not None and self.at_epochs is not None:
            problems.append("at: give at (fractions of training) or at_epochs, not both")
        if self.at is not None:
            fractions = list(self.at)
            if not fractions or not all(0 < f < 1 for f in fractions) or any(
                    a >= b for a, b in zip(fractions, fractions[1:])):
                problems.append(f"at: must be strictly increasing fractions of training in (0, 1), got {fractions}")
        if self.at_epochs is not None:
            epochs = list(self.at_epochs)
            if not epochs or min(epochs) < 1 or epochs != sorted(set(epochs)):
                problems.append(f"at_epochs: must be increasing epochs >= 1, got {epochs}")
        problems += int_problems(2, branching=self.branching) + int_problems(1, batches=self.batches)
        if problems:
            raise ConfigError(problems)

    def split_steps(self, schedule_steps: int, steps_per_epoch: int) -> list[int]:
        """The schedule steps the splits fall after, for a schedule of `schedule_steps` steps.

        Raises `ConfigError` naming the key when a split falls at or after the end of training
        (it would never happen) or, for fractions, before the first step or on another's step.
        """
        if self.at_epochs is not None:
            steps = [epoch * steps_per_epoch for epoch in self.at_epochs]
            late = [e for e, step in zip(self.at_epochs, steps) if step >= schedule_steps]
            if late:
                raise ConfigError(f"{OPTION_PATH}.at_epochs: {late} at or after the end of training "
                                  f"({schedule_steps} steps, {steps_per_epoch} an epoch): the run would never split")
            return steps
        fractions = self.at if self.at is not None else DEFAULT_AT
        steps = [int(f * schedule_steps) for f in fractions]
        if steps[0] < 1 or len(set(steps)) < len(steps):
            raise ConfigError(f"{OPTION_PATH}.at: {list(fractions)} of a {schedule_steps}-step run gives split steps "
                              f"{steps}; they must be distinct and >= 1")
        return steps


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
        self.segment_start = 0        # optimiser step of the last split (the children's turns count from it)
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
        """The sub-supernet step `step` trains: in turn from the last split (`per_child`), or
        drawn in proportion to the sub-space sizes (`shared`)."""
        if len(self.parts) == 1:
            return 0
        if self.options.split.budget == "per_child":
            return (step - self.segment_start) % len(self.parts)
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

    # -- budget -----------------------------------------------------------------------------
    def _part_counts(self) -> list[int]:
        """Sub-supernets after each split round taken so far."""
        counts, parts = [], 1
        for round_index in range(self.rounds):
            parts += sum(len(s["groups"]) - 1 for s in self.history if s["round"] == round_index)
            counts.append(parts)
        return counts

    def _segments(self, io: StepIO) -> list[budget.Segment]:
        split = self.options.split
        return budget.plan(split.split_steps(io.schedule_steps, io.steps_per_epoch), self._part_counts(),
                    split.branching, split.budget == "per_child")

    def total_steps(self, io: StepIO) -> int:
        return budget.total_steps(self._segments(io), io.schedule_steps)

    def check_schedule(self, schedule_steps: int, steps_per_epoch: int) -> None:
        split = self.options.split
        steps = split.split_steps(schedule_steps, steps_per_epoch)
        if split.budget == "shared" and split.reinit_children:
            children = split.branching ** len(steps)
            remaining = schedule_steps - steps[-1]
            warnings.warn(f"{OPTION_PATH}: budget shared with reinit_children true: up to {children} final children "
                          f"start from fresh weights and share the last {remaining} steps (about "
                          f"{remaining // children} each); reinit_children: false keeps their trained weights "
                          f"(benchmarks/notes/17-default-path.md)", stacklevel=2)

    def schedule_step(self, step: int, io: StepIO) -> float:
        return budget.schedule_position(self._segments(io), step)

    def lr_step(self, step: int, io: StepIO) -> float:
        """The schedule's position, counted from the last split once its children were
        re-initialised (`split.reinit_children`)."""
        segments = self._segments(io)
        position = budget.schedule_position(segments, step)
        last = segments[-1]
        if self._reinitialised(len(segments) - 1) and step >= last.start:
            return position - last.position
        return position

    def _reinitialised(self, split_count: int) -> bool:
        """Whether the last of `split_count` splits has happened and re-initialised its children
        (as its history records: a run resumed from before `reinit_children` existed keeps its rate)."""
        return self.rounds == split_count and any(s["round"] == split_count - 1 and s.get("reinitialised")
                                                  for s in self.history)

    def _budget_line(self, io: StepIO, segment: budget.Segment) -> str:
        remaining, schedule = io.schedule_steps - segment.position, io.schedule_steps
        if self.options.split.budget == "shared":
            return f"budget shared: {len(self.parts)} sub-supernets share the remaining {remaining} steps"
        total = self.total_steps(io)
        return (f"budget per_child: {len(self.parts)} sub-supernets each train the remaining {remaining} schedule "
                f"steps, {total} optimiser steps in all instead of {schedule} (+{total - schedule})")

    # -- splitting ----------------------------------------------------------------------------
    def after_step(self, step: int, io: StepIO) -> Restructure | None:
        segments = self._segments(io)
        if self.rounds + 1 >= len(segments) or step != segments[self.rounds + 1].start:
            return None
        round_index = self.rounds
        batches = io.batches("train", 2 * self.options.split.batches, f"few-shot-round{round_index}")
        halves = probe_halves(batches, self.options.split.batches)
        decisions = [d for d in (decide_split(self, index, halves, io) for index in range(len(self.parts)))
                     if d is not None]
        fresh = self.options.split.reinit_children and round_index == len(segments) - 2
        copied = self._apply(decisions, round_index, fresh)
        self.rounds, self.segment_start = round_index + 1, step
        lines = [d.describe() for d in decisions] or [f"split round {round_index}: nothing left to split"]
        if fresh and decisions:
            lines.append("last split: children re-initialised (fresh weights, optimiser state and learning-rate "
                         "schedule; split.reinit_children)")
        tag = f"round{round_index}/part"
        scalars = {"few_shot/sub_supernets": float(len(self.parts))}
        for d in decisions:
            scalars.update({f"few_shot/cut/{tag}{d.part}": d.cut,
                            f"few_shot/probes_agree_key/{tag}{d.part}": float(d.agrees_on_key),
                            f"few_shot/probes_agree_groups/{tag}{d.part}": float(d.agrees_on_groups)})
        return Restructure(copied, "; ".join(lines + [self._budget_line(io, segments[round_index + 1])]),
                           images={f"few_shot/{tag}{d.part}/{key}": matrix
                                   for d in decisions for key, matrix in d.matrices.items()},
                           scalars=scalars)

    def _apply(self, decisions: Sequence[Decision], round_index: int,
               fresh: bool = False) -> dict[nn.Parameter, nn.Parameter]:
        """Replace each decided part by its children (later parts first, so indices hold); with
        `fresh`, the children's weights and buffers are re-initialised and none is `copied`."""
        copied: dict[nn.Parameter, nn.Parameter] = {}
        for decision in sorted(decisions, key=lambda d: d.part, reverse=True):
            parent, route = self.parts[decision.part], self.routes[decision.part]
            children = []
            for group_index, group in enumerate(decision.groups):
                child_space = parent.space.restrict(decision.key, group)
                supernet = copy.deepcopy(parent.supernet)
                if fresh:
                    supernet.load_state_dict(self._fresh_state(round_index, decision.part, group_index))
                else:
                    copied.update(zip(supernet.parameters(), parent.supernet.parameters()))
                supernet.space = child_space
                child = OneShotStrategy(child_space, self.options, *self._plugins, self.seed, supernet=supernet)
                child.set_cache_dir(self._part_cache_dir(child_space))
                supernet.set_active(child_space.max())   # the parent's last arch may lie outside
                children.append(child)
            self.parts[decision.part:decision.part + 1] = children
            self.routes[decision.part:decision.part + 1] = [{**route, decision.key: tuple(g)} for g in decision.groups]
        self.history += [{**d.plain(round_index), **({"reinitialised": True} if fresh else {})} for d in decisions]
        self.model.parts = nn.ModuleList([part.supernet for part in self.parts])
        self.model.active = 0
        self._sizes = [part.space.size() for part in self.parts]
        return copied

    def _fresh_state(self, round_index: int, part: int, group: int) -> dict[str, torch.Tensor]:
        """Weights and buffers of a newly initialised supernet of the whole space (with the
        run's mixture, if any), seeded by (seed, round, part, group)."""
        seed = derive_seed(self.seed, "few-shot-reinit", round_index, part, group)
        supernet = seeded_supernet(self.space, seed)
        if self.options.mixture is not None:
            apply_mixture(supernet, self.options.mixture, seed)
        return supernet.state_dict()

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"rounds": self.rounds, "segment_start": self.segment_start, "splits": [dict(s) for s in self.history],
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
                         for s in splits if s["round"] == round_index], round_index)   # weights load next
        self.history = [dict(s) for s in splits]      # as recorded (with the probes' agreement)
        self.rounds = state.get("rounds", 0)
        self.segment_start = state.get("segment_start", 0)
        for part, part_state in zip(self.parts, state.get("parts", [])):
            part.load_state_dict(part_state)
