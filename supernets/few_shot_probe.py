"""Probes for few-shot splitting: the gradients each value of a key gives the shared weights,
and the split a sub-supernet takes from them (see `supernets.few_shot`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from nas.core.arch import Value
from nas.core.rng import python_rng
from supernets.base import Batches, StepIO
from supernets.gradient_matching import Metric, best_partition, distance_matrix
from supernets.one_shot import OneShotStrategy


@dataclass
class Decision:
    """One sub-supernet's split: `key`'s values in `groups`, with the distance matrices seen."""

    part: int
    key: str
    groups: tuple[tuple[Value, ...], ...]
    cut: float
    matrices: dict[str, torch.Tensor] = field(default_factory=dict)

    def plain(self, round_index: int) -> dict:
        return {"round": round_index, "part": self.part, "key": self.key,
                "groups": [list(g) for g in self.groups], "cut": self.cut}


def shared_parameters(part: OneShotStrategy, key: str) -> list[torch.nn.Parameter]:
    """Every parameter of the part's supernet except those of `key`'s own operations."""
    own = part.space.key_parameters(key)
    return [p for name, p in part.supernet.named_parameters() if not name.startswith(own)]


def value_gradients(part: OneShotStrategy, key: str, arch: Mapping[str, Any], images: torch.Tensor,
                    labels: torch.Tensor, params: Sequence[torch.nn.Parameter]) -> list[list[torch.Tensor]]:
    """Per value of `key` (all others as in `arch`), the label-loss gradient of `params`.

    Gradients are returned, not accumulated (`.grad` is untouched), and every buffer (batch-norm
    statistics) is restored, so the probe leaves no trace on training.
    """
    supernet = part.supernet
    buffers = {name: b.clone() for name, b in supernet.named_buffers()}
    previous = supernet.active_arch
    gradients = []
    try:
        for value in part.space.choices()[key]:
            supernet.set_active({**arch, key: value})
            loss = part._label_loss(supernet(images), labels)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            gradients.append([g.detach() if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)])
    finally:
        for name, b in supernet.named_buffers():
            b.copy_(buffers[name])
        supernet.set_active(previous)
    return gradients


def key_distances(part: OneShotStrategy, key: str, batches: Batches, metric: Metric, seed: int,
                  tag: str) -> torch.Tensor:
    """The key's distance matrix averaged over `batches`, each with its own random arch of the
    part's space in which `key` is active."""
    values = part.space.choices()[key]
    active_space = part.space.restrict(key, values[1:])   # archs where the key changes the network
    params = shared_parameters(part, key)
    total = torch.zeros(len(values), len(values), dtype=torch.float64)
    for index, (images, labels) in enumerate(batches):
        arch = active_space.sample(python_rng(seed, "few-shot-probe", tag, key, index))
        total += distance_matrix(value_gradients(part, key, arch, images, labels, params), metric)
    return total / max(len(batches), 1)


def candidate_keys(part: OneShotStrategy, route: Mapping[str, Sequence[Value]], branching: int) -> list[str]:
    """Splittable keys the part has not split yet, with enough values, active in some arch."""
    choices = part.space.choices()
    return [key for key in part.space.splittable_keys()
            if key not in route and len(choices[key]) >= branching and part.space.can_activate(key)]


def decide_split(strategy: Any, index: int, batches: Batches, io: StepIO):
    """The `Decision` for sub-supernet `index` of a few-shot strategy, or None if nothing can split.

    Distance matrices are averaged over ranks first, so every rank decides alike.
    """
    options, part = strategy.options.split, strategy.parts[index]
    keys = candidate_keys(part, strategy.routes[index], options.branching)
    if not keys:
        return None
    tag = f"round{strategy.rounds}-part{index}"
    matrices, best = {}, []
    for key in keys:
        matrix = key_distances(part, key, batches, options.metric, strategy.seed, tag)
        device = next(part.supernet.parameters()).device      # NCCL reduces device tensors only
        matrices[key] = io.all_reduce_mean(matrix.float().to(device)).cpu().double()
        partition, cut = best_partition(matrices[key], options.branching)
        best.append((key, partition, cut))
    if options.edge_selection == "random":
        key, partition, cut = python_rng(strategy.seed, "few-shot-edge", tag).choice(best)
    else:
        key, partition, cut = max(best, key=lambda item: item[2])   # first of equal cuts
    values = part.space.choices()[key]
    groups = tuple(tuple(values[i] for i in group) for group in partition)
    return Decision(index, key, groups, cut, matrices)
