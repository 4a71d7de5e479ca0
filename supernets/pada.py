"""`pada`: path importance sampling by operation gradient norms (PA&DA).

Paper: "PA&DA: Jointly Sampling PAth and DAta for Consistent NAS", CVPR 2023. Supernet
gradient variance hurts ranking consistency; the variance-optimal probability of drawing an
item is proportional to its normalised gradient norm. For paths:

1. Distributions: one operation distribution `ip` per *group* of choice keys, keys of the same
   kind (the key with its numbers removed: `edge{to}<-{from}`, `stage{i}.block{j}.kernel_size`)
   and the same tuple of values. On cell201 every edge shares one distribution over its
   operations (the paper's single `ip`); on mobilenetv3 the kernel sizes share one, the expand
   ratios another, each stage's depths another... Every key of a path draws its value
   independently from its group's `ip` (redrawn until the space admits the arch), a pure
   function of (seed, step, slot) and `ip`, so DDP ranks and resumed runs agree.
2. Gradient norm of a value in a path, read after the step's passes (before clipping and the
   optimiser step), all-reduced over ranks so every rank learns alike:
   - operations with weights of their own (cell201's convolutions, the parameters under
     `ArchSpace.key_parameters(key)` + `<value>.`): the L2 norm of the gradient of those
     parameters (convolution and batch-norm weight and bias), summed over the cells;
     operations without weights (`none`, `skip_connect`, `avg_pool_3x3`) get 0, so their
     probability decays to 0 as tau -> 1, as in the paper's code;
   - entangled values (a kernel size or expand ratio slicing one shared tensor,
     `key_parameters(key)` without per-value modules): the L2 norm of the gradient of the
     key's parameters. Only the slice the value uses gets gradient on its path, so this is
     the norm over its prefix slice (a wider value's slice contains the narrower ones');
   - keys owning no parameters of their own (resolution, depth, stage width, embedding width,
     heads: every key that is not in `splittable_keys`): the L2 norm of the whole path's
     gradient, credited to the value the path took.
   Per path and group, each value's norms are summed over the keys that took it and divided
   by their count, then folded into the running value `g <- (g + new) / 2` (the first
   observation sets it).
3. At each epoch end, `ip = tau * g / sum(g) + (1 - tau) * uniform` per group, with `tau`
   from `mix_schedule` (`mixing_weight`): `published` (the default), the authors' code
   (ShunLu91/PA-DA, nasbench201/train_panda_201.py: tau = epoch / epochs is set before each
   epoch and mixes the distribution drawn from in the next one), so at the end of epoch e
   (from 0) of E, tau = e / E in steps: (steps done - one epoch) / total steps. The first two
   epochs sample uniformly and tau never reaches 1. `shifted` (this project's former rule):
   tau = steps done / total steps = (e + 1) / E. A group whose g is all zero stays uniform,
   and a value with weights that no path has taken yet counts with its group's mean g. A
   sampler that does not train every step (a few-shot sub-supernet's) updates at its first
   step after the epoch end.
   Left as they were (differences from the authors' code a reader may look for): their `g`
   restarts from zero each epoch and their first fold halves the first norm (`(0 + new) / 2`);
   here `g` carries over epochs and the first observation sets it.

`sandwich: false` (the default, the paper's single path per step) trains `num_random` pada
paths; `sandwich: true` trains max, `num_random` pada paths, then min. With several paths in a
step the gradient read is their sum (max and min included under the sandwich rule), credited
to the values of every pada path. `state_dict` holds `ip`, `g`, the observation counts and
tau, so a resumed run continues bit-exactly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import torch

from nas.core.arch import Arch
from nas.core.errors import check_int
from nas.core.registry import SAMPLERS
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace
from supernets.samplers import Sampler, ScoreFn, Slot, StepFeedback

Value = Any


@dataclass(frozen=True)
class PADAOptions:
    num_random: int = 1       # pada paths per step (between max and min with `sandwich`)
    sandwich: bool = False    # also train the max and min subnets every step
    mix_schedule: Literal["published", "shifted"] = "published"   # tau at epoch e's end: e/E or (e+1)/E

    def __post_init__(self) -> None:
        check_int("num_random", self.num_random, 1)


MixSchedule = Literal["published", "shifted"]


def mixing_weight(epochs_done: int, steps_per_epoch: int, total_steps: int, schedule: MixSchedule) -> float:
    """PA&DA's tau after `epochs_done` (>= 1) epochs of `steps_per_epoch` steps, of `total_steps`.

    `published`: the authors' epoch / epochs with the finished epoch counted from 0, so the
    first epoch end gives 0; `shifted`: steps done / total steps. Capped at 1.
    """
    epochs = epochs_done - 1 if schedule == "published" else epochs_done
    return min(1.0, epochs * steps_per_epoch / total_steps)


def group_name(key: str) -> str:
    """The kind of a choice key: its numbers replaced by `*` (`stage*.block*.kernel_size`)."""
    return re.sub(r"\d+", "*", key)


def pick(probs: Sequence[float], u: float) -> int:
    """Index of `u` in [0, 1) under the cumulative `probs` (a zero-probability index never)."""
    total = 0.0
    for index, p in enumerate(probs):
        total += p
        if u < total:
            return index
    return max(i for i, p in enumerate(probs) if p > 0)   # rounding left u above the last sum


@SAMPLERS.register("pada", options=PADAOptions)
class PADASampler(Sampler):
    """Paths drawn from per-group operation distributions fed by gradient norms (module docstring)."""

    def __init__(self, space: ArchSpace, options: PADAOptions, seed: int):
        super().__init__(space, options, seed)
        self.trains_max = options.sandwich
        self.groups: list[tuple[str, tuple[Value, ...]]] = []    # (kind, values) of each distribution
        self.group_of: dict[str, int] = {}
        for key, values in space.choices().items():
            if len(values) > 1:
                group = (group_name(key), tuple(values))
                if group not in self.groups:
                    self.groups.append(group)
                self.group_of[key] = self.groups.index(group)
        self.ip = [torch.full((len(v),), 1.0 / len(v), dtype=torch.float64) for _, v in self.groups]
        self.g = [torch.zeros(len(v), dtype=torch.float64) for _, v in self.groups]
        self.counts = [torch.zeros(len(v), dtype=torch.int64) for _, v in self.groups]
        self.tau = 0.0
        self.epochs_done = 0     # epoch ends this sampler has updated `ip` at
        self._layout: list[tuple[str, Value | None, tuple[str, ...]]] | None = None

    # -- drawing --------------------------------------------------------------------------
    def draw(self, step: int, slot: int) -> Arch:
        """The arch of pada slot `slot` at `step`: a pure function of (seed, step, slot) and `ip`."""
        rng = python_rng(self.seed, "pada", step, slot)
        probs = [p.tolist() for p in self.ip]
        choices = self.space.choices()
        for _ in range(1000):
            arch = {key: (values[pick(probs[self.group_of[key]], rng.random())] if key in self.group_of
                          else values[0]) for key, values in choices.items()}
            if self.space.admits(arch):
                return self.space.canonical(arch)
        return self.space.sample(rng)    # the space admits almost nothing `ip` favours

    def anchors(self) -> list[Arch]:
        """Max and min with `sandwich` (trained every step), else none."""
        return [self.space.max(), self.space.min()] if self.options.sandwich else []

    def slots(self, step: int, score: ScoreFn | None = None) -> list[Slot]:
        paths = [Slot(f"random{i}", self.draw(step, i)) for i in range(self.options.num_random)]
        if not self.options.sandwich:
            return paths
        return [Slot("max", self.space.max()), *paths, Slot("min", self.space.min())]

    # -- learning -------------------------------------------------------------------------
    def layout(self, names: Sequence[str]) -> list[tuple[str, Value | None, tuple[str, ...]]]:
        """(key, value or None, parameter names) of every gradient norm a step measures: one
        per value for keys whose values own separate modules (an empty tuple for a value
        without weights), one per key for entangled ones, then (`""`, None, every name) for
        the whole path. Cached: names survive restructuring."""
        if self._layout is None:
            self._layout = [*self._key_layout(names), ("", None, tuple(names))]
        return self._layout

    def _key_layout(self, names: Sequence[str]) -> list[tuple[str, Value | None, tuple[str, ...]]]:
        layout = []
        for key in (k for k in self.space.splittable_keys() if k in self.group_of):
            try:
                prefixes = self.space.key_parameters(key)
            except NotImplementedError:
                continue
            # the module name right under the key's prefix: a value's own module, or a shared one
            heads = {n: n[len(next(p for p in prefixes if n.startswith(p))):].split(".")[0]
                     for n in names if n.startswith(prefixes)}
            values = self.space.choices()[key]
            if heads and set(heads.values()) <= {str(v) for v in values}:
                layout += [(key, v, tuple(n for n, head in heads.items() if head == str(v))) for v in values]
            elif heads:
                layout.append((key, None, tuple(heads)))
        return layout

    def path_norms(self, supernet: torch.nn.Module) -> torch.Tensor:
        """The gradient norm of every `layout` entry (float64, CPU)."""
        params = dict(supernet.named_parameters())
        layout = self.layout(list(params))
        squares = {name: p.grad.detach().double().pow(2).sum() for name, p in params.items() if p.grad is not None}
        zero = torch.zeros((), dtype=torch.float64, device=next(iter(params.values())).device)
        sums = [sum((squares[n] for n in names if n in squares), zero) for _, _, names in layout]
        return torch.stack(sums).sqrt().cpu()

    def fold(self, arch: Arch, norms: torch.Tensor) -> None:
        """Fold the `path_norms` of one path into `g`: per group, each value's norms summed over
        the keys that took it, divided by their count, then averaged with the running value."""
        layout = self._layout
        index = {(key, value): i for i, (key, value, _) in enumerate(layout)}
        totals = [torch.zeros(len(v), dtype=torch.float64) for _, v in self.groups]
        taken = [torch.zeros(len(v), dtype=torch.int64) for _, v in self.groups]
        for key in self.space.active_keys(arch):
            if key not in self.group_of:
                continue
            value, group = arch[key], self.group_of[key]
            entry = index.get((key, value), index.get((key, None), len(layout) - 1))
            slot = self.groups[group][1].index(value)
            totals[group][slot] += norms[entry]
            taken[group][slot] += 1
        for group, (total, count) in enumerate(zip(totals, taken)):
            seen = count > 0
            new = total[seen] / count[seen]
            first = self.counts[group][seen] == 0
            self.g[group][seen] = torch.where(first, new, (self.g[group][seen] + new) / 2)
            self.counts[group] += seen.long()

    def observe(self, feedback: StepFeedback) -> None:
        paths = [slot.arch for slot in feedback.slots if slot.role.startswith("random")]
        if feedback.subnet_for is not None and paths:
            norms = feedback.all_reduce_mean(self.path_norms(feedback.subnet_for(paths[0])))
            feedback.subnet_for(feedback.slots[-1].arch)
            for arch in paths:
                self.fold(arch, norms)
        io = feedback.io
        if io is not None and io.total_steps > 0:
            epochs = (feedback.step + 1) // io.steps_per_epoch
            if epochs > self.epochs_done:       # an epoch ended (since this sampler's last step)
                self.epochs_done = epochs
                self.update(mixing_weight(epochs, io.steps_per_epoch, io.total_steps, self.options.mix_schedule))

    def update(self, tau: float) -> None:
        """`ip = tau * g / sum(g) + (1 - tau) * uniform` per group (uniform where g is all zero).

        A value no path has taken yet counts with its group's mean g (it has no norm yet, and
        0 would bar it for good), unless it owns no weights (`none`, pooling): those stay at 0.
        """
        self.tau = tau
        weightless = self.weightless()
        for group, (g, count) in enumerate(zip(self.g, self.counts)):
            uniform = torch.full_like(g, 1.0 / len(g))
            seen = count > 0
            g = torch.where(~seen & ~weightless[group], g[seen].mean() if seen.any() else 0.0, g)
            total = g.sum()
            self.ip[group] = tau * g / total + (1 - tau) * uniform if total > 0 else uniform

    def weightless(self) -> list[torch.Tensor]:
        """Per group, the values whose per-value modules hold no parameter on any key."""
        owning: dict[tuple[int, int], bool] = {}
        for key, value, names in self._layout or []:
            if value is not None:
                slot = (self.group_of[key], self.groups[self.group_of[key]][1].index(value))
                owning[slot] = owning.get(slot, False) or bool(names)
        return [torch.tensor([owning.get((group, i), True) is False for i in range(len(values))])
                for group, (_, values) in enumerate(self.groups)]

    def probabilities(self) -> dict[str, dict[Value, float]]:
        """`ip` of every group, by group kind and value (for logs and tests)."""
        return {f"{kind}{list(values)}": dict(zip(values, p.tolist()))
                for (kind, values), p in zip(self.groups, self.ip)}

    def logs(self) -> dict[str, float]:
        logs = {"pada/tau": self.tau}
        for (kind, values), p in zip(self.groups, self.ip):
            logs.update({f"pada/p_{kind}={value}": prob for value, prob in zip(values, p.tolist())})
        return logs

    def state_dict(self) -> dict:
        return {"ip": [p.clone() for p in self.ip], "g": [g.clone() for g in self.g],
                "counts": [c.clone() for c in self.counts], "tau": self.tau, "epochs_done": self.epochs_done}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        if len(state["ip"]) != len(self.groups) or any(len(p) != len(v) for p, (_, v) in zip(state["ip"], self.groups)):
            raise ValueError(f"pada sampler state has {len(state['ip'])} distributions, this space {len(self.groups)}")
        self.ip = [p.clone().double() for p in state["ip"]]
        self.g = [g.clone().double() for g in state["g"]]
        self.counts = [c.clone().long() for c in state["counts"]]
        self.tau = float(state["tau"])
        self.epochs_done = int(state["epochs_done"])

