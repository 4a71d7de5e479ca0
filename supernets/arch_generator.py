"""The ShiftNAS architecture generator: a network that answers a MACs budget with an arch.

`ArchGenerator` maps (target MACs scaled to [0, 1] over the space's range, a noise vector) to
logits of every choice. Open choices (the paper is silent or we depart from it):
- an MLP (two hidden layers of `generator_hidden`) instead of the paper's sequential LSTM:
  every choice is emitted at once, conditioned on the same input;
- per-choice costs `b` (the expected MACs is `b_0 + sum_i a_i sum_j b_ij p_ij`, `a_i` the
  probability that choice i is active under the depth choices) are a least-squares fit of the
  MACs on the one-hot encoding of 512 uniformly drawn archs plus the min and max: MACs are
  not additive over choices (resolution scales every layer), so the fit is approximate; the
  logged cost error and `generate`'s feasibility use exact MACs;
- the training target C is drawn uniformly inside the MACs bin the sampler drew for the
  step's first random slot (under `generator: train`, the very (C, noise) whose proposal that
  slot trained); noise is 4 standard normals; both from seeded generators;
- the task loss is the label loss of the relaxed subnet on one seeded training batch, through
  the supernet's prefix masks (`Supernet.set_soft`: widths, depths, expand ratios); kernel
  sizes and resolution get no task gradient (only the cost term);
- loss = task + `cost_weight` * ((expected MACs - C) / (max MACs - min MACs))^2, the cost term
  averaged over C and `cost_batch - 1` more targets drawn uniformly over the whole MACs range
  (with their own noise; no task term for those): one target a step learnt the budget-to-arch
  map too slowly to meet budgets after a few hundred steps. Adam on the generator only (the
  supernet's weights and gradients are untouched; the generator's gradients are averaged over
  DDP ranks);
- `generate(budget)`: attempt a asks for `budget - a / attempts * (budget - min MACs)` with
  fresh noise and keeps the first arch that fits; `ArchSpace.shrink` is only the last resort.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from nas.core.arch import Arch
from nas.core.rng import python_rng, torch_generator
from search_spaces.base import ArchSpace
from supernets.base import preserved_buffers

NOISE = 4            # noise inputs of the generator
COST_SAMPLE = 512    # archs behind the linear cost fit


class ArchGenerator(nn.Module):
    """MLP: (scaled target, noise) -> concatenated logits of every choice."""

    def __init__(self, sizes: list[int], hidden: int):
        super().__init__()
        self.sizes = sizes
        self.net = nn.Sequential(nn.Linear(1 + NOISE, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, sum(sizes)))

    def forward(self, target: torch.Tensor, noise: torch.Tensor) -> list[torch.Tensor]:
        """Logits of every choice for one `target` (a 0-d tensor) and `noise` (`[NOISE]`)."""
        logits = self.net(torch.cat([target.reshape(1), noise]))
        return list(torch.split(logits, self.sizes))


def gumbel_softmax(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """Straight-through Gumbel-softmax with seeded noise: a one-hot forward, soft gradients."""
    uniform = torch.rand(logits.shape, generator=generator).clamp_(1e-10, 1.0 - 1e-7)
    soft = torch.softmax((logits - torch.log(-torch.log(uniform))) / temperature, -1)
    hard = F.one_hot(soft.argmax(-1), soft.shape[-1]).to(soft.dtype)
    return hard + soft - soft.detach()


class CostModel:
    """Linear MACs model over the space's one-hot encoding, and its relaxed (expected) form."""

    def __init__(self, space: ArchSpace, seed: int):
        self.space = space
        rng = python_rng(seed, "shiftnas-cost")
        archs = [space.sample(rng) for _ in range(COST_SAMPLE)] + [space.min(), space.max()]
        features = torch.stack([self._with_bias(space.encode(a)) for a in archs]).double()
        macs = torch.tensor([float(space.macs(a)) for a in archs], dtype=torch.float64)
        self.coef = torch.linalg.lstsq(features, macs[:, None]).solution[:, 0]
        self.low, self.high = float(space.macs(space.min())), float(space.macs(space.max()))

    @staticmethod
    def _with_bias(code: torch.Tensor) -> torch.Tensor:
        return torch.cat([code, torch.ones(1)])

    def soft_encoding(self, weights: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """`space.encode` of relaxed choices: each choice's weights times the probability it
        is active (its gating depth exceeds its index); equal to `encode` for one-hots."""
        gates, choices, parts = self.space.gates(), self.space.choices(), []
        for key in choices:
            active = 1.0
            if key in gates:
                depths = choices[gates[key].depth_key]
                above = torch.tensor([float(d > gates[key].index) for d in depths])
                active = weights[gates[key].depth_key] @ above.to(weights[key].dtype)
            parts.append(weights[key] * active)
        return torch.cat(parts)

    def expected(self, weights: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The fitted MACs of relaxed choices."""
        return self._with_bias(self.soft_encoding(weights)).double() @ self.coef

    def scaled(self, macs: float | torch.Tensor) -> float | torch.Tensor:
        """MACs in units of the space's range (0 = min arch, 1 = max arch)."""
        return (macs - self.low) / (self.high - self.low)


class GeneratorTrainer:
    """The generator, its Adam optimiser and cost model; trained from a sampler's `observe`."""

    def __init__(self, space: ArchSpace, options: Any, seed: int):
        self.space, self.options, self.seed = space, options, seed
        self.keys = list(space.choices())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = ArchGenerator([len(v) for v in space.choices().values()], options.generator_hidden)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=options.generator_lr)
        self.cost = CostModel(space, seed)
        self.last_cost_error: float | None = None

    def relaxed(self, target: float, generator: torch.Generator, temperature: float | None = None
                ) -> tuple[dict[str, torch.Tensor], Arch]:
        """Straight-through one-hots of every choice for `target` MACs, and their hard arch."""
        noise = torch.randn(NOISE, generator=generator)
        logits = self.net(torch.tensor(float(self.cost.scaled(target))), noise)
        tau = temperature if temperature is not None else self.options.temperature
        weights = {key: gumbel_softmax(logit, tau, generator) for key, logit in zip(self.keys, logits)}
        choices = self.space.choices()
        arch = self.space.canonical({key: choices[key][int(w.argmax())] for key, w in weights.items()})
        return weights, arch

    @torch.no_grad()
    def sample(self, target: float, generator: torch.Generator) -> Arch:
        """The hard arch `relaxed(target, generator)` gives (the same draws, no graph)."""
        return self.relaxed(target, generator)[1]

    @torch.no_grad()
    def propose(self, target: float, generator: torch.Generator, sample: bool, temperature: float = 1.0) -> Arch:
        """An arch for `target` MACs: the most likely value of every choice, or (`sample`) a
        Gumbel draw at `temperature` from the generator's logits."""
        noise = torch.randn(NOISE, generator=generator)
        logits = self.net(torch.tensor(float(self.cost.scaled(target))), noise)
        choices = self.space.choices()
        picks = [int(gumbel_softmax(logit, temperature, generator).argmax()) if sample else int(logit.argmax())
                 for logit in logits]
        return self.space.canonical({key: choices[key][i] for key, i in zip(self.keys, picks)})

    def cost_term(self, weights: Mapping[str, torch.Tensor], target: float) -> torch.Tensor:
        """`cost_weight * ((expected MACs - target) / MACs range)^2`: zero iff the expected cost
        of the relaxed choices equals the target."""
        return self.options.cost_weight * (self.cost.scaled(self.cost.expected(weights))
                                           - self.cost.scaled(target)) ** 2

    def generate(self, max_macs: float, seed: int, attempts: int = 16) -> tuple[Arch, int, bool]:
        """An arch within `max_macs`, conditioned on that budget: attempt `a` asks for
        `max_macs - a / attempts * (max_macs - min MACs)` with fresh seeded noise and takes the
        most likely choices, so a generator that overshoots a little ends at a fitting arch near
        the budget; the first that fits is returned, else the first one shrunk to fit
        (`ArchSpace.shrink`). Returns (arch, attempts used, whether it was shrunk)."""
        first = None
        for attempt in range(attempts):
            target = max_macs - attempt / attempts * max(max_macs - self.cost.low, 0.0)
            arch = self.propose(target, torch_generator(seed, "generate", attempt), sample=False)
            if self.space.macs(arch) <= max_macs:
                return arch, attempt + 1, False
            first = first if first is not None else arch
        return self.space.shrink(first, max_macs), attempts, True

    def loss(self, feedback: Any, restore: ExitStack, target: float, generator: torch.Generator
             ) -> tuple[torch.Tensor, Arch]:
        """Task loss of the relaxed subnet (when the supernet has soft choices) plus the cost term
        (`restore` gives the supernet's buffers back when the caller's backward pass is done)."""
        weights, arch = self.relaxed(target, generator)
        cost = self.cost_term(weights, target)
        for _ in range(self.options.cost_batch - 1):    # more targets over the whole range
            extra = self.cost.low + (self.cost.high - self.cost.low) * float(torch.rand(1, generator=generator))
            cost = cost + self.cost_term(self.relaxed(extra, generator)[0], extra)
        cost = cost / self.options.cost_batch
        supernet = feedback.subnet_for(arch) if feedback.subnet_for is not None else None
        if supernet is None or feedback.io is None or not supernet.soft_keys():
            return cost.float(), arch
        restore.enter_context(preserved_buffers(supernet))
        images, labels = feedback.io.batches("train", 1, f"shiftnas-generator-{feedback.step}")[0]
        try:
            supernet.set_soft(arch, {key: weights[key].to(images.device) for key in supernet.soft_keys()})
            task = F.cross_entropy(supernet(images).float(), labels)
        finally:
            feedback.subnet_for(feedback.slots[-1].arch)   # its own part under a split strategy
        return task + cost.float(), arch

    def train_step(self, feedback: Any, target: float, generator: torch.Generator) -> None:
        """One Adam step toward `target` MACs, its noise and Gumbel draws from `generator`."""
        params = list(self.net.parameters())
        # batch norm's backward reads the running statistics: restore them only after it
        with ExitStack() as restore:
            loss, arch = self.loss(feedback, restore, target, generator)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        flat = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])
        flat = feedback.all_reduce_mean(flat)
        offset = 0
        for p in params:
            p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        self.optimizer.step()
        self.last_cost_error = (self.space.macs(arch) - target) / max(target, 1.0)

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
