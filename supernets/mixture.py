"""Mixture-of-supernets: each subnet's weights are a learned, arch-routed mixture of experts.

`strategy.mixture: {experts: m, routing: layer|neuron, hidden: 128, ops: ffn|pointwise|conv|all}`
replaces the weight sources of the layers the space declares for `ops`
(`Supernet.mixable_layers`) with `MixtureSource`s: m full-size expert tensors mixed by a
`Router` that reads the active arch's encoding. Layer-wise routing gives every layer one
softmax over the experts (shared by all its ops, weights and biases); neuron-wise routing gives
every op one softmax per output neuron (shared by its weight and bias). The mixed tensor has
the plain tensor's full shape, so each op slices it exactly as it sliced its plain weight, and
an export copies the mixed (folded) weights into the same plain module.

Expert 0 is the supernet's own initial tensor. Experts 1..m-1 are independent draws of the
same initial distribution: a seeded random permutation of expert 0's entries, which keeps
each op's own initialiser (truncated normal, fan-out normal, zero biases) without knowing it.
With one expert no router is built and the source returns its single tensor: the supernet,
its parameter shapes and order, its training and its RNG draws are those of the plain one.
Routers and the extra experts are drawn from generators derived from the seed, never from
the global RNG.

Parity with the plain supernet (`parity`). The router's output layer starts at zero, so at
initialisation every row of weights is 1/m, and the mix of m independent experts of standard
deviation s has standard deviation s / sqrt(m). The mixed tensor is `c * sum_i w_i E_i`, with
experts stored at scale `a * s`, and the two are chosen so that it starts at the plain op's
scale (`c * a / sqrt(m) = 1`) and moves as far per step as the plain tensor would:
- `sgd` (SGD, momentum; the default): the gradient of E_i is `c w_i g`, so one step moves the
  mix by `-lr c^2 (sum_i w_i^2) g = -lr (c^2 / m) g`: parity needs `c = sqrt(m)`, `a = 1`. The
  experts keep the op's own scale and the mix is multiplied by sqrt(m).
- `adam` (Adam, AdamW: steps of about `lr` per entry whatever the gradient's scale): the mix
  moves by `c * lr`, so parity needs `c = 1`, `a = sqrt(m)`: the experts start at sqrt(m)
  times the op's scale and the mix is a plain weighted sum.
Both hold per output neuron under neuron-wise routing (every row starts at 1/m), and a
weight decay shrinks the mix exactly as it shrinks a plain tensor, in both cases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import nn

from nas.core.errors import ConfigError, int_problems
from nas.core.rng import derive_seed, torch_generator
from search_spaces.base import MixableLayer, Supernet
from search_spaces.ops.source import WeightSource
from supernets.router import Router

ROUTER_ATTRIBUTE = "mixture_router"
OPTION_PATH = "strategy.mixture"


@dataclass(frozen=True)
class MixtureOptions:
    """`strategy.mixture` in YAML (an option of the one-shot strategy)."""

    experts: int = 2                                   # m: expert tensors per replaced source
    routing: Literal["layer", "neuron"] = "layer"      # one softmax per layer, or per output neuron
    hidden: int = 128                                  # hidden units of each router MLP
    ops: Literal["ffn", "pointwise", "conv", "all"] = "all"   # which declared layers: by role, or all
    parity: Literal["sgd", "adam"] = "sgd"             # whose step the mix matches at init (module doc)

    def __post_init__(self) -> None:
        problems = int_problems(1, experts=self.experts, hidden=self.hidden)
        if problems:
            raise ConfigError(problems)


class MixtureSource(WeightSource):
    """Full-size tensor `sum_i w_i E_i`, with `w` the router's weights for the bound arch.

    The router (shared with other sources of the same layer or op) is owned, as a registered
    submodule, by the layer or op module; a source only refers to it, so its parameters appear
    once in the state dict, the optimiser and the DDP reduction.
    """

    def __init__(self, experts: Sequence[torch.Tensor], router: Router | None, scale: float = 1.0):
        super().__init__()
        self.experts = nn.ParameterList([nn.Parameter(e) for e in experts])
        self.shape = tuple(experts[0].shape)
        self.scale = scale          # c: the mix's multiplier (module docstring, "Parity")
        self.uses_arch = router is not None
        if router is not None and router.experts != len(experts):
            raise ValueError(f"router mixes {router.experts} experts, source has {len(experts)}")
        if router is not None and router.groups not in (1, self.shape[0]):
            raise ValueError(f"router has {router.groups} rows; needs 1 or {self.shape[0]} (output neurons)")
        object.__setattr__(self, "router", router)   # a reference, not a submodule (see above)

    def bind(self, encoding: torch.Tensor) -> None:
        if self.router is not None:
            self.router.bind(encoding)

    def full(self) -> torch.Tensor:
        if self.router is None:
            return self.experts[0]
        weights = self.router.routes()                      # (1 or neurons, experts)
        shape = (weights.shape[0],) + (1,) * (len(self.shape) - 1)
        mixed = weights[:, 0].view(shape) * self.experts[0]
        for i in range(1, len(self.experts)):
            mixed = mixed + weights[:, i].view(shape) * self.experts[i]
        return mixed * self.scale if self.scale != 1.0 else mixed


def _layers_for(supernet: Supernet, ops: str) -> list[MixableLayer]:
    declared = supernet.mixable_layers()
    roles = sorted({layer.role for layer in declared})
    layers = [layer for layer in declared if ops in ("all", layer.role)]
    name = supernet.space.name
    if not roles:
        raise ConfigError(f"{OPTION_PATH}.ops: space '{name}' declares no layers a mixture can replace "
                          f"(vit, mobilenetv3 and cell201 do)")
    if not layers:
        raise ConfigError(f"{OPTION_PATH}.ops: space '{name}' has no '{ops}' layers; choose "
                          f"{' or '.join(roles + ['all'])}")
    return layers


def _attach_router(owner: nn.Module, router: Router, name: str) -> Router:
    if isinstance(owner, (nn.Sequential, nn.ModuleList, nn.ModuleDict)) or hasattr(owner, ROUTER_ATTRIBUTE):
        raise TypeError(f"cannot attach a router to '{name}' ({type(owner).__name__})")
    owner.add_module(ROUTER_ATTRIBUTE, router)
    return router


def parity_scales(experts: int, parity: str) -> tuple[float, float]:
    """(a, c): the experts' initial scale relative to the op's, and the mix's multiplier, that
    start the mix at the op's scale and move it as far per `parity` step as the op (module doc)."""
    if experts == 1:
        return 1.0, 1.0
    root = math.sqrt(experts)
    return (1.0, root) if parity == "sgd" else (root, 1.0)


def _experts(tensor: torch.Tensor, count: int, generator: torch.Generator, scale: float) -> list[torch.Tensor]:
    """`tensor` (expert 0) and `count - 1` seeded permutations of its entries, times `scale`."""
    flat = tensor.detach().reshape(-1)
    experts = [tensor.detach().clone()] + [flat[torch.randperm(flat.numel(), generator=generator)].view_as(tensor)
                                           for _ in range(count - 1)]
    return experts if scale == 1.0 else [e * scale for e in experts]


def apply_mixture(supernet: Supernet, options: MixtureOptions, seed: int) -> list[str]:
    """Replace the sources of the layers `options.ops` selects by mixtures; returns their names.

    Raises `ConfigError` naming `strategy.mixture.ops` when the space declares no such
    layer. Draws nothing from the global RNG.
    """
    layers = _layers_for(supernet, options.ops)
    encoding_size = supernet.space.encode(supernet.space.min()).numel()
    generator = torch_generator(seed, "mixture-experts")
    sources, replaced = supernet.weight_sources(), []
    expert_scale, mix_scale = parity_scales(options.experts, options.parity)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "mixture-routers"))
        for layer in layers:
            router = None
            if options.experts > 1 and options.routing == "layer":
                router = _attach_router(supernet.get_submodule(layer.name),
                                        Router(encoding_size, options.hidden, options.experts), layer.name)
            for op in layer.ops:
                neurons = sources[op[0]].shape[0]
                op_router = router
                if options.experts > 1 and options.routing == "neuron":
                    owner = op[0].rsplit(".", 1)[0]
                    op_router = _attach_router(supernet.get_submodule(owner),
                                               Router(encoding_size, options.hidden, options.experts, neurons), owner)
                for name in op:
                    experts = _experts(sources[name].full(), options.experts, generator, expert_scale)
                    supernet.replace_source(name, MixtureSource(experts, op_router, mix_scale))
                    replaced.append(name)
    return replaced


def mixture_parameter_count(supernet: Supernet) -> dict[str, int]:
    """Parameters of the routers, of the expert tensors, and of everything else."""
    routers = {id(p) for m in supernet.modules() if isinstance(m, Router) for p in m.parameters()}
    experts = {id(p) for m in supernet.modules() if isinstance(m, MixtureSource) for p in m.experts}
    counts = {"routers": 0, "experts": 0, "other": 0}
    for p in supernet.parameters():
        key = "routers" if id(p) in routers else "experts" if id(p) in experts else "other"
        counts[key] += p.numel()
    return counts
