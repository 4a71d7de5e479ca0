"""Progressive shrinking's phases: which choices each opens, for how long, at what rate.

Once-for-All (`mit-han-lab/once-for-all`, `train_ofa_net.py`) trains the full network, then
opens one dimension of the space at a time: elastic kernel (120 epochs, peak rate 3e-2, 5
warm-up epochs, 1 subnet a step), depth {4,3} (25 epochs, 2.5e-3, no warm-up, 2 subnets) then
{4,3,2} (120, 7.5e-3, 5 warm-up, 2 subnets), expand ratio {6,4} (25, 2.5e-3, 4 subnets) then
{6,4,3} (120, 7.5e-3, 5 warm-up, 4 subnets). Its script loads the full network from a file
rather than training it: here that phase is as long as OFA's ImageNet run config trains a
network alone (`n_epochs=150`), at the run's own peak rate. `fashion_mnist_mbv3`'s stage widths
open last, in a phase shaped like the expand ratio's second (`width`).

A phase's `share` is its length in OFA's epochs: the run's steps are divided in proportion to
the shares of the phases the space has. `lr` is the phase's peak as a fraction of
`train.optimizer.lr` (OFA's rates divided by its kernel phase's 3e-2; the full network at the
run's rate); `warmup` the fraction of the phase that ramps linearly from 0 (OFA's 5 of 120
epochs), then the rate follows a cosine to 0 over the rest of the phase, as OFA's per-phase
schedule does.

Choices are grouped into dimensions by the last part of their key: `kernel_size`;
`depth`; `expand_ratio` and a transformer's per-layer `mlp_ratio` and `num_heads`; a stage's
`width` and a transformer's `embed_dim`. `resolution` opens with the first phase after the full
network (OFA draws the input size per batch throughout). A phase whose dimension the space
lacks (a ViT has no kernel) is left out, and `describe` says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

from nas.core.errors import ConfigError

Dimension = Literal["full", "kernel", "depth", "expand", "width"]
PhaseName = Literal["full", "kernel", "depth_partial", "depth", "expand_partial", "expand", "width"]

DIMENSION_KEYS: dict[str, tuple[str, ...]] = {
    "kernel": ("kernel_size",),
    "depth": ("depth",),
    "expand": ("expand_ratio", "mlp_ratio", "num_heads"),
    "width": ("width", "embed_dim"),
}
OPENED_WITH_FIRST_PHASE = ("resolution",)


@dataclass(frozen=True)
class PhaseOptions:
    """One phase (`strategy.phases` in YAML): which values it opens and how it trains."""

    name: PhaseName
    share: float          # length in OFA's epochs (shares are relative)
    subnets: int = 1      # subnets drawn and trained per step (gradients summed)
    lr: float = 1.0       # peak rate, a fraction of train.optimizer.lr
    warmup: float = 0.0   # fraction of the phase warming up linearly from 0

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.share) and self.share > 0):
            problems.append(f"share: must be a positive number, got {self.share}")
        if self.subnets < 1:
            problems.append(f"subnets: must be >= 1, got {self.subnets}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            problems.append(f"lr: must be a positive number, got {self.lr}")
        if not 0.0 <= self.warmup < 1.0:
            problems.append(f"warmup: must be in [0, 1), got {self.warmup}")
        if problems:
            raise ConfigError(problems)

    @property
    def dimension(self) -> str:
        return self.name.split("_")[0]

    @property
    def partial(self) -> bool:
        """Opens only the two largest values of its dimension (OFA's D{4,3}, E{6,4})."""
        return self.name.endswith("_partial")


OFA_PHASES: tuple[PhaseOptions, ...] = (
    PhaseOptions("full", 150, subnets=1, lr=1.0, warmup=5 / 150),
    PhaseOptions("kernel", 120, subnets=1, lr=1.0, warmup=5 / 120),
    PhaseOptions("depth_partial", 25, subnets=2, lr=2.5e-3 / 3e-2),
    PhaseOptions("depth", 120, subnets=2, lr=7.5e-3 / 3e-2, warmup=5 / 120),
    PhaseOptions("expand_partial", 25, subnets=4, lr=2.5e-3 / 3e-2),
    PhaseOptions("expand", 120, subnets=4, lr=7.5e-3 / 3e-2, warmup=5 / 120),
    PhaseOptions("width", 120, subnets=4, lr=7.5e-3 / 3e-2, warmup=5 / 120),
)


def dimension_of(key: str) -> str | None:
    """The dimension a choice key belongs to (None: `resolution`, opened with the first phase)."""
    last = key.split(".")[-1]
    for dimension, suffixes in DIMENSION_KEYS.items():
        if last in suffixes:
            return dimension
    if last in OPENED_WITH_FIRST_PHASE:
        return None
    raise KeyError(key)


@dataclass(frozen=True)
class Phase:
    """A phase placed in the run: steps [start, end), and the values each choice may take."""

    options: PhaseOptions
    start: int
    end: int
    open: dict[str, tuple]       # choice key -> values a subnet of this phase draws from

    @property
    def name(self) -> str:
        return self.options.name

    def rate(self, step: int) -> float:
        """The learning rate at `step` as a fraction of `train.optimizer.lr`: linear warm-up
        from 0, then a cosine to 0 over the rest of the phase (OFA's per-phase schedule)."""
        length = self.end - self.start
        position = step - self.start
        warmup = int(self.options.warmup * length)
        if position < warmup:
            return self.options.lr * (position + 1) / warmup
        return self.options.lr * 0.5 * (1 + math.cos(math.pi * (position - warmup) / max(length - warmup, 1)))


def check_phases(phases: Sequence[PhaseOptions]) -> None:
    """Raise `ConfigError` naming `phases` unless they start with `full`, name each phase once,
    and put every partial phase right before its dimension's full one."""
    names = [p.name for p in phases]
    problems = []
    if not names or names[0] != "full":
        problems.append(f"phases: must start with full (the network the others shrink), got {names}")
    if len(set(names)) != len(names):
        problems.append(f"phases: each phase at most once, got {names}")
    for i, name in enumerate(names):
        if name.endswith("_partial") and (i + 1 == len(names) or names[i + 1] != name[:-len("_partial")]):
            problems.append(f"phases: {name} must come right before {name[:-len('_partial')]}")
    if problems:
        raise ConfigError(problems)


def space_dimensions(choices: dict[str, tuple]) -> dict[str, list[str]]:
    """Elastic choice keys (more than one value) of each dimension; `ConfigError` for a key
    that belongs to none (progressive shrinking needs choices that shrink a largest network)."""
    dimensions: dict[str, list[str]] = {d: [] for d in (*DIMENSION_KEYS, "resolution")}
    unknown = []
    for key, values in choices.items():
        if len(values) < 2:
            continue
        try:
            dimension = dimension_of(key)
        except KeyError:
            unknown.append(key)
            continue
        dimensions[dimension or "resolution"].append(key)
    if unknown:
        raise ConfigError(f"strategy.name: progressive_shrinking shrinks kernels, depths, expand ratios and "
                          f"widths from a largest network; this space's choices {unknown[:3]}"
                          f"{' ...' if len(unknown) > 3 else ''} are none of them",
                          fix="train this space with strategy.name: one_shot")
    return dimensions


def plan_phases(choices: dict[str, tuple], phases: Sequence[PhaseOptions],
                total_steps: int) -> tuple[list[Phase], list[str]]:
    """The phases the space has, placed over `total_steps` steps in proportion to their shares,
    and the names of those left out (their dimension has no elastic choice here).

    Raises:
        ConfigError: a phase would get no step.
    """
    dimensions = space_dimensions(choices)
    kept = [p for p in phases if p.dimension == "full" or dimensions[p.dimension]]
    skipped = [p.name for p in phases if p not in kept]
    unopened = [d for d in DIMENSION_KEYS if dimensions[d] and d not in {p.dimension for p in kept}]
    if unopened:
        raise ConfigError(f"strategy.phases: no phase opens this space's {', '.join(unopened)} choices "
                          f"(e.g. {dimensions[unopened[0]][0]}), whose smaller values would never train",
                          fix=f"add a phase named {unopened[0]}")
    total_share = sum(p.share for p in kept)
    opened: dict[str, tuple] = {}
    placed, cumulative, start = [], 0.0, 0
    for index, p in enumerate(kept):
        cumulative += p.share
        end = round(total_steps * cumulative / total_share)
        if end <= start:
            raise ConfigError(f"strategy.phases: phase {p.name} gets no step of the run's {total_steps}",
                              fix="lengthen the run or raise the phase's share")
        if index == 1:
            opened.update({key: choices[key] for key in dimensions["resolution"]})
        if p.dimension != "full":
            for key in dimensions[p.dimension]:
                opened[key] = choices[key][-2:] if p.partial else choices[key]
        placed.append(Phase(p, start, end, dict(opened)))
        start = end
    return placed, skipped


def phase_at(phases: Sequence[Phase], step: int) -> int:
    """Index of the phase optimiser step `step` belongs to (the last phase past the end)."""
    for index, phase in enumerate(phases):
        if step < phase.end:
            return index
    return len(phases) - 1
