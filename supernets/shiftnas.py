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
2. Probabilities `p = floor * uniform + (1 - floor) * softmax(theta)` over the reachable bins:
   `floor` (default 0.2) of the mass is spread evenly, so no bin falls below `floor / K` (K
   reachable bins) and none starves (open: the paper has no floor). `theta = 0` (uniform over
   bins, not over archs) for the first `warmup_epochs`. Each slot draws its bin with the
   Gumbel-max trick from a seeded generator: a pure function of (seed, step, slot) and `theta`,
   so every DDP rank draws the same bins.
3. Shift: every `update_every` steps after warm-up, `theta` takes one Adam step (`lr`) down the
   look-ahead hypergradient of `supernets.shiftnas_lookahead` (open: the paper's criterion,
   read as DARTS-like): the normalised validation loss of every bin after a virtual weight
   step `w - lookahead_lr * sum_k p_k g_k`, differentiated w.r.t. `p` by finite differences.
   Each bin is probed through one fixed arch (drawn once from the seed) on `probe_batches`
   seeded training and validation batches. Normalisation: each bin's validation loss is
   weighted by 1 / (its squared validation-gradient norm at the first update), so a bin's
   score is, to first order, its squared gradient norm relative to its own starting value
   plus what training it does for the other bins. A raw squared norm mostly measures the
   arch's size (it sums over more, and differently scaled, parameters); dividing by the same
   arch's own earlier value cancels every per-arch factor exactly, whereas a parameter-count
   or weight-norm divisor removes it only if per-parameter gradients do not scale with width,
   which they do, differently for depthwise, pointwise and linear layers. Scores and norms are
   all-reduced over ranks before `theta` moves or the reference is stored. Cost per update:
   two backward and two forward passes per reachable bin per probe batch (8 bins, one batch,
   update_every 100, a 3-pass sandwich step: about 7% more compute).
   Open: `lr` 0.2, because the default run makes about 17 updates; 17 x 0.2 is about the
   logit movement the paper's 1e-3 allows over its ~3,750 updates.
4. Architecture generator (`supernets.arch_generator`), option `generator`: `off` (none),
   `alongside` (trained every `generator_every` steps toward a target in the bin of the first
   random slot, but never choosing a training arch; the old `generator: true`) or `train` (as
   in the paper: each random slot's arch is the generator's proposal for a target inside the
   drawn bin, so the supernet trains the archs the generator proposes and the generator's task
   loss follows; a proposal outside the drawn bin is redrawn with fresh noise and target up to
   `generator_attempts` times, then the slot falls back to the table's arch for that bin, so
   every slot keeps its bin's cost). `true`/`false` are still read as `alongside`/`off`. The
   generator answers a MACs budget with an arch (`nas generate`, `--searcher generator`).

With `sandwich: true` (the default) every step trains max, `num_random` shiftnas subnets,
then min (the sandwich rule with shiftnas in its random slots); `sandwich: false` trains only
the shiftnas subnets. `logs()` puts the bin probabilities (`shiftnas/p_bin{k}`), the last
scores (`shiftnas/score_bin{k}`, at update steps), the generator's relative cost error and, under `generator:
train`, the share of random slots the generator chose in TensorBoard.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import SAMPLERS
from nas.core.rng import python_rng, torch_generator
from search_spaces.base import ArchSpace
from supernets.attentive_table import ArchTable, BinnedTable, Row
from supernets.samplers import Sampler, ScoreFn, Slot, StepFeedback
from supernets.shiftnas_lookahead import lookahead_scores

GENERATOR_MODES = ("off", "alongside", "train")
LEGACY_GENERATOR = {True: "alongside", False: "off"}


@dataclass(frozen=True)
class ShiftNASOptions:
    num_random: int = 1          # shiftnas subnets per step (between max and min with `sandwich`)
    sandwich: bool = True        # also train the max and min subnets every step
    bins: int = 8                # equal-width MACs bins between the min and max archs
    update_every: int = 100      # steps between bin-probability updates (the paper's 100)
    warmup_epochs: float = 1.0   # uniform bins, no shift, for this many epochs (the paper: 50 of its run)
    lr: float = 0.2              # Adam on the bin logits (module docstring, 3)
    lookahead_lr: float = 0.1    # xi of the virtual weight step (the default run's SGD lr)
    floor: float = 0.2           # share of the bin probability spread evenly over the reachable bins
    probe_batches: int = 1       # training and validation batches per bin per update
    tries: int = 100             # draws per subnet to land in its bin
    table_size: int = 2000       # the per-bin choice table (as the attentive sampler's)
    table_fill: int = 20
    table_tries: int = 500
    generator: bool | Literal["off", "alongside", "train"] = "alongside"   # module docstring, 4
    generator_every: int = 1     # steps between generator updates
    generator_attempts: int = 4  # `generator: train`: proposals per slot before the table's arch
    generator_lr: float = 1.0e-2  # Adam (open: the paper's 1e-3 learns the cost too slowly in a few epochs)
    generator_hidden: int = 64   # hidden width (the paper's LSTM hidden size)
    cost_weight: float = 1.0     # lambda of (expected MACs - target)^2, MACs in units of the space's range
    cost_batch: int = 16         # targets the cost term averages a step (`supernets.arch_generator`)
    temperature: float = 1.0     # Gumbel-softmax temperature of the generator's choices

    def __post_init__(self) -> None:
        object.__setattr__(self, "generator", LEGACY_GENERATOR.get(self.generator, self.generator))
        infinite = [f.name for f in dataclasses.fields(self)
                    if f.type == "float" and not math.isfinite(getattr(self, f.name))]
        problems = [f"{key}: must be finite, got {getattr(self, key)}" for key in infinite]
        minimums = {"num_random": 1, "bins": 2, "update_every": 1, "probe_batches": 1, "tries": 1,
                    "table_size": 1, "table_fill": 0, "table_tries": 0, "generator_every": 1,
                    "generator_attempts": 1, "generator_hidden": 1, "cost_batch": 1}
        problems += [f"{key}: must be >= {low}, got {getattr(self, key)}"
                     for key, low in minimums.items() if getattr(self, key) < low]
        positive = ("lr", "lookahead_lr", "generator_lr", "temperature")
        problems += [f"{key}: must be > 0, got {getattr(self, key)}" for key in positive
                     if key not in infinite and not getattr(self, key) > 0]
        problems += [f"{key}: must be >= 0, got {getattr(self, key)}" for key in ("warmup_epochs", "cost_weight")
                     if key not in infinite and not getattr(self, key) >= 0]
        if "floor" not in infinite and not 0 <= self.floor < 1:
            problems.append(f"floor: must be in [0, 1), got {self.floor}")
        if self.generator not in GENERATOR_MODES:
            problems.append(f"generator: {self.generator!r} is not allowed; choose one of "
                            f"{', '.join(GENERATOR_MODES)}")
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
        self.reference = torch.zeros(options.bins, dtype=torch.float64)   # 0: not measured yet
        self.last_scores: torch.Tensor | None = None
        self.generated_share: float | None = None
        self.generator = None
        if options.generator != "off":
            from supernets.arch_generator import GeneratorTrainer
            self.generator = GeneratorTrainer(space, options, seed)
        self._probe_archs: list[Arch | None] | None = None

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
        """Bin probabilities: `floor` spread evenly over the reachable bins plus `1 - floor`
        times the softmax of their logits (0 on the other bins); differentiable in the logits."""
        reachable = self.reachable()
        masked = torch.where(reachable, self.logits, torch.tensor(-math.inf))
        uniform = reachable.float() / reachable.sum()
        return self.options.floor * uniform + (1 - self.options.floor) * torch.softmax(masked, 0)

    def draw_bin(self, step: int, slot: int) -> int:
        """The bin of shiftnas slot `slot` at `step` (a pure function of seed, step, slot, logits)."""
        probs = self.probabilities().detach().tolist()
        return gumbel_max(probs, python_rng(self.seed, "shiftnas-bin", step, slot))

    def generator_draw(self, step: int, slot: int, attempt: int, b: int) -> tuple[float, torch.Generator]:
        """A target drawn uniformly in bin `b`'s MACs interval, and the seeded generator (past that
        draw) that gives the generator its noise and Gumbel draws for (step, slot, attempt)."""
        generator = torch_generator(self.seed, "shiftnas-generator", step, slot, attempt)
        low, high = self.table.bins.bounds(b)
        return low + (high - low) * float(torch.rand(1, generator=generator)), generator

    def proposal(self, step: int, slot: int) -> tuple[Arch, int | None]:
        """The arch of random slot `slot` at `step` and, under `generator: train`, the attempt
        whose proposal it is (None: the table's arch for the drawn bin, the fallback)."""
        b = self.draw_bin(step, slot)
        if self.options.generator == "train":
            for attempt in range(self.options.generator_attempts):
                arch = self.generator.sample(*self.generator_draw(step, slot, attempt, b))
                if self.table.bin_of(arch) == b:
                    return arch, attempt
        return self.table.draw_in(b, python_rng(self.seed, "shiftnas", step, slot), self.options.tries), None

    def random_archs(self, step: int) -> list[Arch]:
        proposals = [self.proposal(step, slot) for slot in range(self.options.num_random)]
        if self.options.generator == "train":
            self.generated_share = sum(attempt is not None for _, attempt in proposals) / len(proposals)
        return [arch for arch, _ in proposals]

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
        self.last_scores = None     # logged at the update step only
        if self.generator is not None and feedback.step % self.options.generator_every == 0:
            self.train_generator(feedback)
        if self._shift_due(feedback):
            self.shift(feedback)

    def train_generator(self, feedback: StepFeedback) -> None:
        """One generator step toward the target behind random slot 0: under `generator: train`
        the (target, noise) that proposed the arch the supernet just trained (attempt 0 when
        the slot fell back to the table)."""
        attempt = self.proposal(feedback.step, 0)[1] if self.options.generator == "train" else None
        target, generator = self.generator_draw(feedback.step, 0, attempt or 0, self.draw_bin(feedback.step, 0))
        self.generator.train_step(feedback, target, generator)

    def _shift_due(self, feedback: StepFeedback) -> bool:
        done = feedback.step + 1
        per_epoch = feedback.io.steps_per_epoch if feedback.io is not None else 1
        warmup = round(self.options.warmup_epochs * per_epoch)
        return done % self.options.update_every == 0 and done > warmup and feedback.subnet_for is not None

    def probe_archs(self) -> list[Arch | None]:
        """The fixed probe arch of every reachable bin (None for masked bins), drawn once from the seed."""
        if self._probe_archs is None:
            self._probe_archs = [
                self.table.draw_in(b, python_rng(self.seed, "shiftnas-probe", b), self.options.tries)
                if reachable else None for b, reachable in enumerate(self.reachable().tolist())]
        return self._probe_archs

    def shift(self, feedback: StepFeedback) -> None:
        """Score every bin by the look-ahead (its bins shared out over ranks), store the first update's
        squared gradient norms as the reference, and move the logits."""
        key, io = f"shiftnas-{feedback.step}", feedback.io
        result = lookahead_scores(feedback.subnet_for, self.probe_archs(), self.probabilities().detach(),
                                  self.reference, self.options.lookahead_lr,
                                  io.batches("train", self.options.probe_batches, key),
                                  io.batches("val", self.options.probe_batches, key),
                                  io.rank, io.world_size, feedback.all_reduce_mean)   # the ranks share the bins
        if feedback.slots:
            feedback.subnet_for(feedback.slots[-1].arch)
        scores, norms = result.scores, result.val_sq_norms
        if not torch.any(self.reference > 0):
            self.reference = norms.clone()
        self.update_logits(scores)

    def update_logits(self, scores: torch.Tensor) -> None:
        """One Adam step of the logits down `Phi`, whose derivative w.r.t. `p_j` is
        `-lookahead_lr * scores[j]`: probability moves to the bins with above-average scores."""
        self.last_scores = scores.detach().clone()
        reachable = self.reachable()
        gradient = torch.where(reachable, -self.options.lookahead_lr * scores, 0.0).float().detach()
        self.optimizer.zero_grad()
        (self.probabilities() * gradient).sum().backward()
        self.optimizer.step()

    def logs(self) -> dict[str, float]:
        logs = {f"shiftnas/p_bin{k}": p for k, p in enumerate(self.probabilities().detach().tolist())}
        if self.last_scores is not None:
            logs.update({f"shiftnas/score_bin{k}": s for k, s in enumerate(self.last_scores.tolist())})
        if self.generator is not None and self.generator.last_cost_error is not None:
            logs["shiftnas/generator_cost_error"] = self.generator.last_cost_error
        if self.generated_share is not None:
            logs["shiftnas/generator_share"] = self.generated_share
        return logs

    def state_dict(self) -> dict:
        state = {"logits": self.logits.detach().clone(), "optimizer": self.optimizer.state_dict(),
                 "reference": self.reference.clone()}
        if self.generator is not None:
            state["generator"] = self.generator.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        with torch.no_grad():
            self.logits.copy_(state["logits"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "reference" in state:        # runs from before the look-ahead measured none
            self.reference = state["reference"].clone().to(torch.float64)
        if self.generator is not None and "generator" in state:
            self.generator.load_state_dict(state["generator"])
