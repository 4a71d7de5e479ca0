"""Probes for few-shot splitting: the gradients each value of a key gives the shared weights,
and the split a sub-supernet takes from them (see `supernets.few_shot`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from nas.core.arch import Value
from nas.core.errors import ConfigError
from nas.core.rng import python_rng
from supernets.base import Batches, StepIO
from supernets.gradient_matching import Metric, best_partition, distance_matrix
from supernets.one_shot import OneShotStrategy

OPTION_PATH = "strategy.split"
Groups = tuple[tuple[Value, ...], ...]


@dataclass
class Decision:
    """One sub-supernet's split: `key`'s values in `groups`, with the distance matrices seen.

    `probe_keys` and `probe_groups` are what each of the two probes alone would have chosen
    (the key of largest cut; the groups of `key`), from `probe_batches` batches each.
    """

    part: int
    key: str
    groups: Groups
    cut: float
    matrices: dict[str, torch.Tensor] = field(default_factory=dict)
    probe_keys: tuple[str, ...] = ()
    probe_groups: tuple[Groups, ...] = ()
    probe_batches: int = 0

    @property
    def agrees_on_key(self) -> bool:
        return len(set(self.probe_keys)) == 1

    @property
    def agrees_on_groups(self) -> bool:
        return len(set(self.probe_groups)) == 1

    def plain(self, round_index: int) -> dict:
        record = {"round": round_index, "part": self.part, "key": self.key,
                  "groups": [list(g) for g in self.groups], "cut": self.cut}
        if self.probe_keys:
            record["probes_agree"] = {"key": self.agrees_on_key, "groups": self.agrees_on_groups}
        return record

    def describe(self) -> str:
        """The split in one phrase, with whether the two probes agree."""
        def show(groups: Groups) -> str:
            return " | ".join(str(list(g)) for g in groups)

        probes = f"two probes of {self.probe_batches} batches"
        if self.agrees_on_key and self.agrees_on_groups:
            verdict = f"{probes} agree"
        else:
            differ = ([f"key {' vs '.join(self.probe_keys)}"] if not self.agrees_on_key else []) + (
                [f"groups {' vs '.join(show(g) for g in self.probe_groups)}"] if not self.agrees_on_groups else [])
            verdict = f"{probes} DISAGREE: {', '.join(differ)}"
        return f"split part {self.part} on {self.key}: {show(self.groups)} (cut {self.cut:.4f}; {verdict})"


def probe_halves(batches: Batches, per_probe: int) -> tuple[Batches, Batches]:
    """Two disjoint probes of up to `per_probe` batches each (as many as `batches` allows, equal).

    Raises `ConfigError` naming `split.batches` when fewer than two batches are available.
    """
    size = min(per_probe, len(batches) // 2)
    if size < 1:
        raise ConfigError(f"{OPTION_PATH}.batches: the training split gives {len(batches)} probe batch(es); two "
                          f"probes need at least 2 (use more training images or a smaller train.batch_size)")
    return batches[:size], batches[size:2 * size]


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


def key_distances(part: OneShotStrategy, key: str, halves: Sequence[Batches], metric: Metric, seed: int,
                  tag: str, rank: int = 0, world_size: int = 1) -> list[torch.Tensor]:
    """The key's distance matrix averaged over the batches of each probe in `halves`, every
    batch with its own random arch of the part's space in which `key` is active.

    With several ranks this rank measures only every `world_size`-th batch (from `rank`) and
    returns its share of each mean (its sum over the probe's whole batch count): the ranks'
    shares summed are the means one process computes, for 1/`world_size` of the work.
    """
    values = part.space.choices()[key]
    active_space = part.space.restrict(key, values[1:])   # archs where the key changes the network
    params = shared_parameters(part, key)
    shares, index = [], 0
    for batches in halves:
        total = torch.zeros(len(values), len(values), dtype=torch.float64)
        for images, labels in batches:
            if index % world_size == rank:
                arch = active_space.sample(python_rng(seed, "few-shot-probe", tag, key, index))
                total += distance_matrix(value_gradients(part, key, arch, images, labels, params), metric)
            index += 1
        shares.append(total / max(len(batches), 1))
    return shares


def candidate_keys(part: OneShotStrategy, route: Mapping[str, Sequence[Value]], branching: int) -> list[str]:
    """Splittable keys the part has not split yet, with enough values, active in some arch."""
    choices = part.space.choices()
    return [key for key in part.space.splittable_keys()
            if key not in route and len(choices[key]) >= branching and part.space.can_activate(key)]


def _largest_cut(cuts: Sequence[tuple[str, Any, float]]) -> tuple[str, Any, float]:
    return max(cuts, key=lambda item: item[2])   # the first of equal cuts


def decide_split(strategy: Any, index: int, halves: tuple[Batches, Batches], io: StepIO) -> Decision | None:
    """The `Decision` for sub-supernet `index` of a few-shot strategy, or None if nothing can split.

    The decision uses both probes' batches (`halves`, equal in number); each probe's own choice
    is recorded beside it. The ranks share the probes' batches out and sum their shares of the
    distance matrices, so every rank decides alike on the matrices one process would measure.
    """
    options, part = strategy.options.split, strategy.parts[index]
    keys = candidate_keys(part, strategy.routes[index], options.branching)
    if not keys:
        return None
    tag = f"round{strategy.rounds}-part{index}"
    device = next(part.supernet.parameters()).device      # NCCL reduces device tensors only
    matrices, probes, best = {}, {}, []
    for key in keys:
        shares = torch.stack(key_distances(part, key, halves, options.metric, strategy.seed, tag,
                                           io.rank, io.world_size))
        probes[key] = (io.all_reduce_mean(shares.float().to(device)) * io.world_size).cpu().double()
        matrices[key] = probes[key].mean(dim=0)
        best.append((key, *best_partition(matrices[key], options.branching)))
    if options.edge_selection == "random":
        key, partition, cut = python_rng(strategy.seed, "few-shot-edge", tag).choice(best)
    else:
        key, partition, cut = _largest_cut(best)
    values = part.space.choices()[key]

    def named(groups: Sequence[Sequence[int]]) -> Groups:
        return tuple(tuple(values[i] for i in group) for group in groups)

    probe_keys = tuple(_largest_cut([(k, None, best_partition(probes[k][h], options.branching)[1]) for k in keys])[0]
                       for h in range(2))
    probe_groups = tuple(named(best_partition(probes[key][h], options.branching)[0]) for h in range(2))
    return Decision(index, key, named(partition), cut, matrices, probe_keys, probe_groups, len(halves[0]))
