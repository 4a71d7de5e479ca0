"""The seam later strategies build on: restructuring in `after_step`, samplers that learn from
`observe`, evaluation that leaves the supernet untouched, weight sources bound to the arch."""
from __future__ import annotations

import random
import signal

import pytest
import torch

import tests.supernets.toys  # noqa: F401  (registers toy_split and toy_learning)
from nas import api
from nas.core.config import load_config
from nas.core.errors import Interrupted
from nas.engine.checkpoint import load_checkpoint
from nas.engine.data.datasets import load_dataset
from nas.engine.evaluator import Evaluator
from nas.engine.export import max_abs_difference
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from search_spaces.ops.source import WeightSource
from supernets.base import seeded_supernet
from tests.conftest import make_space, make_supernet
from tests.support.tiny import tiny_config


def _config(strategy: str = "one_shot", sampler: str = "sandwich", steps: int = 10):
    data = tiny_config(sampler=sampler, distill="none", steps=steps)
    data["strategy"]["name"] = strategy
    data["train"]["checkpoint"] = {"every_steps": 3, "every_seconds": 600}
    return load_config(data)


def _train(config, root, name, stop_after: int | None = None, resume: bool = False):
    """Train; with `stop_after`, a SIGTERM arrives during that step (as from a user's kill) and
    training stops with exit code 143 after that step's checkpoint."""
    original = Trainer.train_one_step

    def step(self, images, labels):
        logs = original(self, images, labels)
        if self.state.step == stop_after:
            self._stop_signal = signal.SIGTERM
        return logs

    Trainer.train_one_step = step
    try:
        if stop_after is None:
            return api.train(config, name=name, runs_dir=root, resume=resume, progress=False).dir
        with pytest.raises(Interrupted, match=f"SIGTERM at step {stop_after}, checkpoint saved") as stopped:
            api.train(config, name=name, runs_dir=root, resume=resume, progress=False)
        assert stopped.value.exit_code == 143
        return RunDir(root / name)
    finally:
        Trainer.train_one_step = original


def _resumed_equals_uninterrupted(config, tmp_path, stop_after: int) -> dict:
    whole = _train(config, tmp_path, "whole")
    _train(config, tmp_path, "parts", stop_after=stop_after)
    assert load_checkpoint(tmp_path / "parts" / "checkpoints" / "last.pt")["step"] == stop_after
    parts = _train(config, tmp_path, "parts", resume=True)
    a = load_checkpoint(whole.checkpoints / "last.pt")
    b = load_checkpoint(parts.checkpoints / "last.pt")
    assert a["step"] == b["step"] == config.train.steps
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert repr(a["strategy"]) == repr(b["strategy"])
    return a


@pytest.mark.slow
def test_a_split_in_after_step_trains_on_resumes_and_serves_both_parts(tmp_path):
    config = _config("toy_split", steps=10)
    state = _resumed_equals_uninterrupted(config, tmp_path, stop_after=3)   # stopped before the split
    assert state["strategy"]["parts"] == 2 and any(k.startswith("parts.1.") for k in state["model"])
    _resumed_equals_uninterrupted(config, tmp_path / "late", stop_after=7)   # stopped after it

    run = api.load_run(tmp_path / "whole")
    key, values = run.strategy.key, run.space.choices()[run.strategy.key]
    low, high = dict(run.space.min(), **{key: values[0]}), dict(run.space.max(), **{key: values[-1]})
    parts = {id(run.strategy.subnet_for(arch)) for arch in (low, high)}
    assert len(parts) == 2                                  # each arch routed to its own part
    for i, arch in enumerate((low, high)):
        result = api.evaluate(run, arch, "val")
        assert 0.0 <= result.top1 <= 1.0 and result.n_images == 512
        record = api.export_subnet(run, arch, tmp_path / f"export{i}")
        assert record.record["max_abs_difference"] <= 1e-5


def test_the_split_keeps_optimizer_state_of_copied_parameters(tmp_path):
    config = _config("toy_split", steps=10)
    strategy = api.build_strategy(config)
    splits = load_dataset("fashion_mnist", val_size=512, train_size=1024)
    trainer = Trainer(config, strategy, splits, RunDir(tmp_path / "r"), progress=False)
    x, y = splits.train_images[:64].float() / 255, splits.train_labels[:64]
    for _ in range(3):
        trainer.train_one_step(x, y)
    parent = dict(strategy.model.parts[0].named_parameters())
    old_optimizer = trainer.optimizer
    trainer.train_one_step(x, y)      # step 4: the split happens after this update
    assert len(strategy.model.parts) == 2 and [s for s, _ in trainer.restructures] == [4]
    assert trainer.optimizer is not old_optimizer
    momentum = {name: old_optimizer.state[p]["momentum_buffer"] for name, p in parent.items()
                if p in old_optimizer.state}
    assert len(momentum) > 10
    for child in strategy.model.parts:
        for name, p in child.named_parameters():
            assert p is not parent[name] and torch.equal(p, parent[name])
            if name in momentum:
                assert torch.equal(trainer.optimizer.state[p]["momentum_buffer"], momentum[name])
                assert trainer.optimizer.state[p]["momentum_buffer"] is not momentum[name]
    owned = {p for group in trainer.optimizer.param_groups for p in group["params"]}
    assert owned == set(strategy.model.parameters())      # the old parent is gone
    assert trainer.optimizer.param_groups[0]["lr"] == trainer.scheduler.optimizer.param_groups[0]["lr"]


@pytest.mark.slow
def test_a_sampler_that_learns_from_observe_resumes_exactly(tmp_path):
    state = _resumed_equals_uninterrupted(_config(sampler="toy_learning", steps=10), tmp_path, stop_after=5)
    logits = state["strategy"]["sampler"]["logits"]
    assert not torch.equal(logits, torch.zeros_like(logits))     # it did learn


@pytest.mark.parametrize("space_name", ["mobilenetv3", "vit", "cell201"])
def test_evaluating_an_arch_leaves_the_supernet_untouched(space_name):
    space = make_space(space_name, small=True)
    supernet = seeded_supernet(space, 0).train()
    splits = load_dataset("fashion_mnist", val_size=256, train_size=512)
    before = {k: v.clone() for k, v in supernet.state_dict().items()}
    settings = load_config(tiny_config()).eval
    evaluator = Evaluator(lambda arch: supernet.set_active(arch) and supernet, space.canonical, splits, settings,
                          seed=0, step=0)
    rng = random.Random(0)
    for arch in [space.min(), space.max(), space.sample(rng)]:
        evaluator.evaluate(arch, "val")
    after = supernet.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert supernet.training


class _ArchScaled(WeightSource):
    """A source whose tensor depends on the bound arch: base x (1 + sum of the encoding / 100)."""

    uses_arch = True

    def __init__(self, base: torch.Tensor):
        super().__init__()
        self.base, self.shape, self.scale = base, tuple(base.shape), 1.0
        self.bound: list[torch.Tensor] = []

    def bind(self, encoding: torch.Tensor) -> None:
        self.bound.append(encoding)
        self.scale = 1.0 + float(encoding.sum()) / 100

    def full(self) -> torch.Tensor:
        return self.base * self.scale


def test_set_active_binds_arch_dependent_sources_and_export_uses_the_bound_weights():
    space = make_space("mobilenetv3", small=True)
    supernet = make_supernet(space)          # realistic BN statistics, eval mode
    sources = supernet.weight_sources()
    name = next(n for n in sources if n.endswith("conv_pw.weight"))
    assert list(sources) == list(supernet.weight_sources())            # a stable order
    source = _ArchScaled(sources[name].full().detach().clone())
    supernet.replace_source(name, source)
    assert supernet.weight_sources()[name] is source
    low, high = space.min(), space.max()
    for arch in (low, high):
        size = space.input_size(arch)
        x = torch.randn(2, 1, size, size)     # exports take inputs at the arch's resolution
        supernet.set_active(arch)
        assert torch.equal(source.bound[-1], space.encode(arch))
        static = supernet.export(arch)
        assert max_abs_difference(supernet, static, arch, x) <= 1e-5
    op = dict(supernet.named_modules())[name.rsplit(".", 1)[0]]
    supernet.set_active(high)
    expected = source.base * (1 + float(space.encode(high).sum()) / 100)
    assert torch.allclose(op.active_weight(), expected[: op.out_channels, : op.in_channels])
    with pytest.raises(KeyError, match="no weight source 'conv_pw.weight'"):
        supernet.replace_source("conv_pw.weight", source)
