"""`progressive_shrinking`: Once-for-All's training method (Cai et al., ICLR 2020).

The full network trains first, alone, on the labels; then the phases of
`supernets/progressive_phases.py` open the space one dimension at a time (kernel, depth,
expand ratio, then stage widths), each step training `subnets` archs drawn uniformly from what
is open so far, with gradients summed. Each phase has its own peak rate and warm-up
(`Strategy.lr_factor`) and starts with fresh optimiser state, as every OFA phase is a new
training. Before each expand phase the expanded channels are sorted by importance, and before
the width phase the stage outputs (`supernets/channel_order.py`).

With a distillation loss (`strategy.distill`, default `kl`), a frozen copy of the full network
as the first phase left it is the teacher of every later step: each subnet learns from
label-smoothed labels plus `kd_ratio` times the loss against the teacher's output (OFA: the
teacher in train mode, 1.0 x soft-target cross-entropy). `distill: none` trains on labels only.

The phase in progress, the teacher's weights and the phases' entry (sorting, teacher copy)
are checkpointed with the strategy, so a run resumes bit-exactly, also across a phase boundary.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import DISTILL_LOSSES, STRATEGIES
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace, Supernet
from search_spaces.mobilenetv3 import MobileNetV3Supernet
from search_spaces.vit import ViTSupernet
from supernets.base import Restructure, StepIO, Strategy, seeded_supernet
from supernets.channel_order import sort_middle_channels, sort_stage_widths
from supernets.channel_order_vit import sort_block_expansions, sort_embedding
from supernets.progressive_phases import (
    OFA_PHASES, Phase, PhaseOptions, check_phases, phase_at, plan_phases, space_dimensions)


@dataclass(frozen=True)
class ProgressiveShrinkingOptions:
    phases: tuple[PhaseOptions, ...] = OFA_PHASES   # in order; shares in OFA's epochs
    kd_ratio: float = 1.0          # weight of the distillation loss beside the label loss (OFA: 1.0)
    label_smoothing: float = 0.1   # on the label loss of every subnet (OFA: 0.1)

    def __post_init__(self) -> None:
        check_phases(self.phases)
        if not self.kd_ratio > 0:
            raise ConfigError(f"kd_ratio: must be > 0 (distill: none trains on labels only), got {self.kd_ratio}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing}")


@STRATEGIES.register("progressive_shrinking", options=ProgressiveShrinkingOptions)
class ProgressiveShrinkingStrategy(Strategy):
    """One supernet trained by progressive shrinking; `strategy.sampler` is not used."""

    def __init__(self, space: ArchSpace, options: ProgressiveShrinkingOptions, sampler: Any, distill: Any,
                 seed: int):
        if sampler.name != "sandwich":
            raise ConfigError(f"strategy.sampler.name: progressive_shrinking draws its own subnets per phase, "
                              f"'{sampler.name}' would not be used", fix="leave strategy.sampler out")
        self.space, self.options, self.seed = space, options, seed
        space_dimensions(space.choices())   # refuses a space it cannot shrink
        self.model = self.supernet = seeded_supernet(space, seed)
        self.distill = DISTILL_LOSSES.get(distill.name).obj(distill.options)   # None: labels only
        self.teacher: Supernet | None = None
        self.entered = 0               # phases whose entry (sorting, teacher copy) is done
        self.phases: list[Phase] = []
        self.skipped: list[str] = []
        self._planned_for: int | None = None
        self._monitored = {"min": space.min(), "mid": space.sample(python_rng(seed, "monitored-mid")),
                           "max": space.max()}

    # -- the plan -------------------------------------------------------------------------
    def _plan(self, total_steps: int) -> list[Phase]:
        if self._planned_for != total_steps:
            self.phases, self.skipped = plan_phases(self.space.choices(), self.options.phases, total_steps)
            self._planned_for = total_steps
        return self.phases

    def check_schedule(self, schedule_steps: int, steps_per_epoch: int) -> None:
        self._plan(schedule_steps)

    def total_steps(self, io: StepIO) -> int:
        self._plan(io.schedule_steps)
        return io.schedule_steps

    def phase(self, step: int) -> Phase:
        """The phase optimiser step `step` belongs to (once the trainer told the run's length)."""
        if not self.phases:
            raise RuntimeError("progressive_shrinking: the run's length is not known yet (Trainer asks total_steps)")
        return self.phases[phase_at(self.phases, step)]

    def describe(self) -> str:
        phases = ", ".join(f"{p.name} (steps {p.start}-{p.end - 1}, {p.options.subnets} a step, peak "
                           f"{p.options.lr:.3g} x lr)" for p in self.phases)
        skipped = f"; left out, no such choice in space {self.space.name}: {', '.join(self.skipped)}" \
            if self.skipped else ""
        teacher = "a frozen copy of the full network" if self.distill is not None else "none (labels only)"
        return f"progressive shrinking: {phases}{skipped}; teacher: {teacher}"

    # -- the strategy protocol -------------------------------------------------------------
    def activate(self, arch: Mapping[str, Any]) -> Arch:
        return self.supernet.set_active(arch)

    def subnet_for(self, arch: Mapping[str, Any]) -> Supernet:
        self.activate(arch)
        return self.supernet

    def monitored_archs(self) -> dict[str, Arch]:
        return dict(self._monitored)

    def _archs(self, phase: Phase, step: int) -> list[Arch]:
        largest = self.space.max()
        if phase.options.dimension == "full":
            return [largest]
        rng = python_rng(self.seed, "progressive_shrinking", step)
        return [self.space.canonical({key: rng.choice(phase.open[key]) if key in phase.open else value
                                      for key, value in largest.items()})
                for _ in range(phase.options.subnets)]

    def trained_archs(self, step: int) -> Sequence[Arch]:
        return self._archs(self.phase(step), step)

    def lr_factor(self, step: int, io: StepIO) -> float:
        self._plan(io.schedule_steps)
        return self.phase(step).rate(step)

    def train_step(self, images: torch.Tensor, labels: torch.Tensor, step: int, io: StepIO) -> dict[str, float]:
        self._plan(io.schedule_steps)
        phase = self.phase(step)
        archs = self._archs(phase, step)
        soft = None
        if self.teacher is not None:
            self.teacher.to(images.device)   # a no-op once there (restored on the CPU, trained elsewhere)
            self.teacher.train()      # OFA: the teacher in train mode (batch statistics), no gradients
            with torch.no_grad():
                soft = self.teacher(images).detach()
        logs: dict[str, float] = {}
        for i, arch in enumerate(archs):
            with io.pass_context(i == len(archs) - 1):
                self.activate(arch)
                logits = io.forward(images)
                loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.options.label_smoothing)
                if soft is not None:
                    kd, extra = self.distill(logits, soft, labels)
                    loss = loss + self.options.kd_ratio * kd
                    logs.update({f"{key}/subnet{i}": value for key, value in extra.items()})
                if i == 0 and io.record_logits is not None:   # data.sampling: pada
                    io.record_logits(logits.detach(), labels)
                loss.backward()
            logs[f"loss/subnet{i}"] = loss.item()
        logs["phase"] = float(self.phases.index(phase))
        return logs

    def after_step(self, step: int, io: StepIO) -> Restructure | None:
        """At the first step of a phase: copy the teacher (leaving the full network), sort
        channels (entering an expand or width phase), and drop the optimiser's state."""
        phases = self._plan(io.schedule_steps)
        index = phase_at(phases, step) if step < phases[-1].end else len(phases)
        if index <= self.entered or index >= len(phases):
            return None
        reasons = []
        while self.entered < index:
            self.entered += 1
            reasons.append(self._enter(phases, self.entered))
        return Restructure(copied={}, reset_state=True, reason="; ".join(reasons))

    def _enter(self, phases: list[Phase], index: int) -> str:
        phase, previous = phases[index], phases[index - 1]
        said = [f"phase {phase.name} ({index + 1}/{len(phases)}) from step {phase.start}"]
        if previous.options.dimension == "full" and self.distill is not None:
            self.teacher = copy.deepcopy(self.supernet)
            self.teacher.set_active(self.space.max())
            self.teacher.requires_grad_(False)
            said.append("teacher: the full network as trained so far")
        said.append(self._sort(phases, index))
        said.append("optimiser state reset")
        return ", ".join(s for s in said if s)

    def _sort(self, phases: list[Phase], index: int) -> str:
        """Sort the channels a phase opens (MobileNetV3 and ViT); what was sorted, in words."""
        phase = phases[index]
        if phase.options.dimension not in ("expand", "width"):
            return ""
        opened = {key: phase.open[key] for key in phase.open if phases[index - 1].open.get(key) != phase.open[key]}
        if not opened:
            return ""
        if isinstance(self.supernet, ViTSupernet):
            return self._sort_vit(phase, opened)
        if not isinstance(self.supernet, MobileNetV3Supernet):
            return f"channels not sorted ({self.space.name} has no channel sorting)"
        if phase.options.dimension == "width":
            stages = [int(key.split(".")[0][len("stage"):]) for key in opened]
            streams = sort_stage_widths(self.supernet, stages)
            return f"stage outputs sorted by L1 importance ({len(streams)} streams)"
        ratios = {(int(key.split(".")[0][len("stage"):]), int(key.split(".")[1][len("block"):])): values
                  for key, values in opened.items()}
        tier = max(len(values) for values in ratios.values()) - 2
        blocks = sort_middle_channels(self.supernet, ratios, tier)
        return f"expanded channels of {blocks} blocks sorted by L1 importance (OFA stage {tier})"

    def _sort_vit(self, phase: Phase, opened: dict[str, Sequence[float]]) -> str:
        """Sort a ViT's embedding (width phase) or the heads and MLP units a phase opens."""
        if phase.options.dimension == "width":
            sort_embedding(self.supernet)
            return "embedding features sorted by L1 importance"
        tier = max(len(values) for values in opened.values()) - 2
        layers = sort_block_expansions(self.supernet, opened, tier)
        return f"heads and MLP hidden units of {layers} layers sorted by L1 importance (OFA stage {tier})"

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state: dict = {"entered": self.entered}
        if self.teacher is not None:
            state["teacher"] = {k: v.detach().clone() for k, v in self.teacher.state_dict().items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.entered = int(state.get("entered", 0))
        self.teacher = None
        if "teacher" in state:
            self.teacher = copy.deepcopy(self.supernet)
            self.teacher.load_state_dict(state["teacher"])
            self.teacher.set_active(self.space.max())
            self.teacher.requires_grad_(False)
