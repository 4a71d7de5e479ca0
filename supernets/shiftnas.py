"""`shiftnas`: complexity-aware sampling by learnt MACs-bin probabilities (ShiftNAS).

Paper: "ShiftNAS: Improving One-shot NAS via Probability Shift", ICCV 2023 (no official code;
where the paper is silent, the choice made here is marked "open:"). Uniform per-choice
sampling concentrates subnets in the middle of the MACs range (a sum of many independent
terms), so the middle gets most updates. ShiftNAS instead draws a MACs bin from learnt
probabilities, then an arch inside that bin:

1. Bins: `bins` equal-width MACs intervals between the min and max archs (open: the paper
   steps 0.1 GFLOPs, far coarser than a Fashion-MNIST space's whole range). Archs inside a bin
   come from the per-bin choice distributions of the table attentive sampling builds
   (`supernets.attentive_table`) plus the min and max archs. Bins no table arch reaches are
   masked (probability 0).
2. Probabilities `softmax(theta)` over the reachable bins; `theta = 0` (uniform over bins,
   not over archs) for the first `warmup_epochs`. Each slot draws its bin with the Gumbel-max
   trick from a seeded generator: a pure function of (seed, step, slot) and `theta`, so every
   DDP rank draws the same bins.
3. Shift criterion: every `update_every` steps after warm-up, one arch per reachable bin is
   probed on `probe_batches` seeded validation batches; `g_k` = squared L2 norm of the
   gradient of its label loss w.r.t. the supernet weights (large: bin k is still far from
   trained). Open: the paper minimises the expected validation-gradient magnitude after a
   weight update with a finite-difference look-ahead. Our reading: after one expected update
   `w - eta * sum_k p_k grad_k`, with the Hessian replaced by the identity and cross-bin
   gradient products dropped, the summed squared validation gradients fall by
   `2 eta sum_k p_k g_k`; so `theta` ascends `sum_k p_k g_k / mean(g)` with Adam (`lr`). The
   gradient norms are all-reduced over ranks first. Cost per update: one forward and backward
   per reachable bin per probe batch (8 bins, update_every 100, a 3-pass sandwich step: about
   3% more passes).
4. With `generator: true`, an architecture generator (`supernets.arch_generator`) is trained
   alongside every `generator_every` steps; it answers a MACs budget with an arch
   (`nas generate`, `nas search --searcher generator`).

With `sandwich: true` (the default) every step trains max, `num_random` shiftnas subnets,
then min (the sandwich rule with shiftnas in its random slots); `sandwich: false` trains only
the shiftnas subnets. `logs()` puts the bin probabilities (`shiftnas/p_bin{k}`) and the
generator's relative cost error in TensorBoard.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import SAMPLERS
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace
from supernets.attentive_table import ArchTable, BinnedTable, Row
from supernets.base import preserved_buffers
from supernets.samplers import Sampler, ScoreFn, Slot, StepFeedback


@dataclass(frozen=True)
class ShiftNASOptions:
    num_random: int = 1          # shiftnas subnets per step (between max and min with `sandwich`)
    sandwich: bool = True        # also train the max and min subnets every step
    bins: int = 8                # equal-width MACs bins between the min and max archs
    update_every: int = 100      # steps between bin-probability updates (the paper's 100)
    warmup_epochs: float = 1.0   # uniform bins, no shift, for this many epochs (the paper: 50 of its run)
    lr: float = 0.05             # Adam on the bin logits (open: the paper's 1e-3 moves nothing in 5 epochs)
    probe_batches: int = 1       # validation batches per bin per update
    tries: int = 100             # draws per subnet to land in its bin
    table_size: int = 2000       # the per-bin choice table (as the attentive sampler's)
    table_fill: int = 20
    table_tries: int = 500
    generator: bool = True       # train an architecture generator alongside
    generator_every: int = 1     # steps between generator updates
    generator_lr: float = 1.0e-2  # Adam (open: the paper's 1e-3 learns the cost too slowly in a few epochs)
    generator_hidden: int = 64   # hidden width (the paper's LSTM hidden size)
    cost_weight: float = 1.0     # lambda of (expected MACs - target)^2, MACs in units of the space's range
    temperature: float = 1.0     # Gumbel-softmax temperature of the generator's choices

    def __post_init__(self) -> None:
        minimums = {"num_random": 1, "bins": 2, "update_every": 1, "probe_batches": 1, "tries": 1,
                    "table_size": 1, "table_fill": 0, "table_tries": 0, "generator_every": 1,
                    "generator_hidden": 1}
        problems = [f"{key}: must be >= {low}, got {getattr(self, key)}"
                    for key, low in minimums.items() if getattr(self, key) < low]
        positive = ("lr", "generator_lr", "temperature")
        problems += [f"{key}: must be > 0, got {getattr(self, key)}" for key in positive
                     if not getattr(self, key) > 0]
        problems += [f"{key}: must be >= 0, got {getattr(self, key)}" for key in ("warmup_epochs", "cost_weight")
                     if not getattr(self, key) >= 0]
        if problems:
            raise ConfigError(problems)


def gumbel_max(probs: Sequence[float], rng) -> int:
    """Index drawn from `probs` by the Gumbel-max trick with `rng` (zero-probability entries never)."""
    keys = [math.log(p) - math.log(-math.log(max(rng.random(), 1e-300))) if p > 0 else -math.inf
            for p in probs]
    return max(range(len(keys)), key=keys.__getitem__)


@SAMPLERS.register("shiftnas", options=ShiftNASOptions)
class ShiftNASSampler(BinnedTable, Sampler):
    """MACs bins drawn from learnt probabilities, archs drawn inside the bin (module docstring)."""

    trains_max = True
    splittable = False     # bins and generator are fitted to the whole space

    def __init__(self, space: ArchSpace, options: ShiftNASOptions, seed: int):
        super().__init__(space, options, seed)
        self.trains_max = options.sandwich
        self.logits = torch.zeros(options.bins, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.logits], lr=options.lr)
        self.generator = None
        if options.generator:
            from supernets.arch_generator import GeneratorTrainer
            self.generator = GeneratorTrainer(space, options, seed)

    @property
    def table(self) -> ArchTable:
        """The attentive table with the min and max archs added (non-uniform rows), so the end
        bins, which uniform sampling rarely reaches, can be drawn."""
        if self._table is None:
            base = BinnedTable.table.fget(self)
            ends = [Row(arch, self.space.macs(arch), False) for arch in (self.space.min(), self.space.max())]
            self._table = ArchTable(self.space, base.bins, [*base.rows, *ends])
        return self._table

    def reachable(self) -> torch.Tensor:
        """Bins that hold at least one table arch (the others are never drawn)."""
        table = self.table
        return torch.tensor([table.sizes[b] > 0 for b in range(self.options.bins)])

    def probabilities(self) -> torch.Tensor:
        """Bin probabilities: softmax of the logits over the reachable bins (0 elsewhere)."""
        masked = torch.where(self.reachable(), self.logits, torch.tensor(-math.inf))
        return torch.softmax(masked, 0)

    def draw_bin(self, step: int, slot: int) -> int:
        """The bin of shiftnas slot `slot` at `step` (a pure function of seed, step, slot, logits)."""
        probs = self.probabilities().detach().tolist()
        return gumbel_max(probs, python_rng(self.seed, "shiftnas-bin", step, slot))

    def random_archs(self, step: int) -> list[Arch]:
        archs = []
        for slot in range(self.options.num_random):
            target = self.draw_bin(step, slot)
            archs.append(self.table.draw_in(target, python_rng(self.seed, "shiftnas", step, slot),
                                            self.options.tries))
        return archs

    def anchors(self) -> list[Arch]:
        """Max and min with `sandwich` (trained every step), else none."""
        return [self.space.max(), self.space.min()] if self.options.sandwich else []

    def slots(self, step: int, score: ScoreFn | None = None) -> list[Slot]:
        randoms = [Slot(f"random{i}", arch) for i, arch in enumerate(self.random_archs(step))]
        if not self.options.sandwich:
            return randoms
        return [Slot("max", self.space.max()), *randoms, Slot("min", self.space.min())]

    # -- learning -----------------------------------------------------------------------
    def observe(self, feedback: StepFeedback) -> None:
        if self.generator is not None and feedback.step % self.options.generator_every == 0:
            target = self.table.bins.bounds(self.draw_bin(feedback.step, 0))
            self.generator.train_step(feedback, target)
        if self._shift_due(feedback):
            self.update_logits(feedback.all_reduce_mean(self.bin_scores(feedback)))

    def _shift_due(self, feedback: StepFeedback) -> bool:
        done = feedback.step + 1
        per_epoch = feedback.io.steps_per_epoch if feedback.io is not None else 1
        warmup = round(self.options.warmup_epochs * per_epoch)
        return done % self.options.update_every == 0 and done > warmup and feedback.subnet_for is not None

    def bin_scores(self, feedback: StepFeedback) -> torch.Tensor:
        """`g_k`: squared gradient norm of the validation loss of one arch per reachable bin (0
        for masked bins), on seeded validation batches; weights, gradients and buffers are left
        as they were."""
        reachable = self.reachable().tolist()
        batches = feedback.io.batches("val", self.options.probe_batches, f"shiftnas-{feedback.step}")
        scores = torch.zeros(self.options.bins, dtype=torch.float64)
        for b in (b for b in range(self.options.bins) if reachable[b]):
            arch = self.table.draw_in(b, python_rng(self.seed, "shiftnas-probe", feedback.step, b), self.options.tries)
            supernet = feedback.subnet_for(arch)
            params = [p for p in supernet.parameters() if p.requires_grad]
            with preserved_buffers(supernet):
                for images, labels in batches:
                    loss = F.cross_entropy(supernet(images).float(), labels)
                    grads = torch.autograd.grad(loss, params, allow_unused=True)
                    scores[b] += sum(g.double().pow(2).sum() for g in grads if g is not None).item()
        feedback.subnet_for(feedback.slots[-1].arch)
        return scores / max(len(batches), 1)

    def update_logits(self, scores: torch.Tensor) -> None:
        """One Adam step of the logits up `sum_k p_k s_k`, with `s = scores / mean(reachable
        scores)`: probability moves to the bins with above-average scores."""
        reachable = self.reachable()
        mean = scores[reachable].mean()
        if not mean > 0:
            return
        normalised = (scores / mean).float().detach()
        self.optimizer.zero_grad()
        (-(self.probabilities() * torch.where(reachable, normalised, 0.0)).sum()).backward()
        self.optimizer.step()

    def logs(self) -> dict[str, float]:
        logs = {f"shiftnas/p_bin{k}": p for k, p in enumerate(self.probabilities().detach().tolist())}
        if self.generator is not None and self.generator.last_cost_error is not None:
            logs["shiftnas/generator_cost_error"] = self.generator.last_cost_error
        return logs

    def state_dict(self) -> dict:
        state = {"logits": self.logits.detach().clone(), "optimizer": self.optimizer.state_dict()}
        if self.generator is not None:
            state["generator"] = self.generator.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        with torch.no_grad():
            self.logits.copy_(state["logits"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.generator is not None and "generator" in state:
            self.generator.load_state_dict(state["generator"])
