"""The few_shot strategy: sub-spaces partition their parent, routing, splits decided from the
gradients, one-shot training before the first split, resume across a split, export per child."""
from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import json
import random
import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nas import api, cli
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.core.rng import derive_seed
from nas.engine.data.datasets import load_dataset
from nas.engine.run_dir import RunDir
from nas.engine.training.schedule import build_scheduler
from nas.engine.training.trainer import Trainer
from supernets import few_shot_probe
from supernets.base import StepIO
from supernets.few_shot import FewShotOptions, FewShotStrategy, SplitOptions
from supernets.few_shot_probe import Decision, decide_split, probe_halves, shared_parameters
from supernets.gradient_matching import best_partition, partitions
from supernets.one_shot import OneShotStrategy
from tests.support.helpers import straight_and_resumed
from tests.support.tiny import tiny_config
from tests.supernets.toys import PlantedSpace

CELL = {"name": "cell201", "options": {"channels": 4, "operations": ["none", "skip_connect", "conv_1x1"]}}
VIT = {"name": "vit", "options": {"embed_dims": [16], "depths": [1, 2], "num_heads": [1], "head_dim": 8,
                                  "mlp_ratios": [1.0, 2.0, 3.0]}}


def _config(space=None, split=None, strategy="few_shot", **train):
    data = tiny_config(distill="none", **{"steps": 8, **train})
    data["data"].update(train_size=256, val_size=256)       # batch 64: 4 steps an epoch
    data["strategy"]["name"] = strategy
    if strategy == "few_shot":
        split = {"at_epochs": [1], "batches": 1, **(split or {})}
        if "at" in split:
            split.pop("at_epochs")
        data["strategy"]["options"] = {"split": split}
    if space is not None:
        data["space"] = space
    return load_config(data)


@pytest.fixture(scope="module")
def splits():
    return load_dataset("fashion_mnist", val_size=256, train_size=256)


def _trainer(config, splits, root) -> Trainer:
    return Trainer(config, api.build_strategy(config), splits, RunDir(root), progress=False)


def _batch(splits, step: int, size: int = 64):
    start = (size * step) % 192
    return splits.train_images[start:start + size].float() / 255, splits.train_labels[start:start + size]


@pytest.mark.parametrize("space", [None, CELL, VIT], ids=["mobilenetv3", "cell201", "vit"])
def test_restricted_children_partition_their_parent(space):
    parent = api.build_space(_config(space))
    archs = parent.enumerate()
    keys = [k for k in parent.splittable_keys() if parent.can_activate(k)]
    assert keys
    for key in keys:
        values = parent.choices()[key]
        for partition in partitions(len(values), 2):
            groups = [[values[i] for i in group] for group in partition]
            children = [parent.restrict(key, group) for group in groups]
            for arch in archs:
                admitting = [i for i, child in enumerate(children) if child.admits(arch)]
                assert admitting == [next(i for i, g in enumerate(groups) if arch[key] in g)], (key, groups, arch)
            assert sum(child.size() for child in children) == parent.size() == len(archs)
            enumerated = [{tuple(a.items()) for a in child.enumerate()} for child in children]
            assert not enumerated[0] & enumerated[1]
            assert enumerated[0] | enumerated[1] == {tuple(a.items()) for a in archs}
            for child in children:
                rng = random.Random(0)
                assert all(child.admits(a) for a in [child.min(), child.max()] + [child.sample(rng) for _ in range(5)])
                assert child.encode(child.max()).shape == parent.encode(parent.max()).shape


def _split_twice(strategy: FewShotStrategy) -> None:
    """Two rounds of splits chosen by hand: the first splittable key, then the next one in each part."""
    keys = [k for k in strategy.space.splittable_keys() if strategy.space.can_activate(k)]
    first = strategy.space.choices()[keys[0]]
    strategy._apply([Decision(0, keys[0], (first[:1], first[1:]), 0.0)], 0)
    decisions = []
    for index, part in enumerate(strategy.parts):
        values = part.space.choices()[keys[1]]
        if part.space.can_activate(keys[1]):
            decisions.append(Decision(index, keys[1], (values[1:], values[:1]), 0.0))
    strategy._apply(decisions, 1)


@pytest.mark.parametrize("space", [None, CELL], ids=["mobilenetv3", "cell201"])
def test_every_arch_routes_to_the_one_sub_supernet_that_admits_it(space):
    strategy = api.build_strategy(_config(space))
    _split_twice(strategy)
    assert len(strategy.parts) >= 3 and len(strategy.model.parts) == len(strategy.parts)
    archs = strategy.space.enumerate()
    assert sum(part.space.size() for part in strategy.parts) == len(archs)
    for arch in archs:
        admitting = [i for i, part in enumerate(strategy.parts) if part.space.admits(arch)]
        assert admitting == [strategy.route(arch)]
        module = strategy.subnet_for(arch)
        assert module is strategy.parts[admitting[0]].supernet and module.active_arch == arch


def test_shared_budget_interleaving_follows_the_sub_space_sizes():
    strategy = api.build_strategy(_config(CELL, split={"budget": "shared"}))
    _split_twice(strategy)
    sizes = [part.space.size() for part in strategy.parts]
    counts = collections.Counter(strategy.part_of_step(step) for step in range(4000))
    for index, size in enumerate(sizes):
        assert counts[index] / 4000 == pytest.approx(size / sum(sizes), abs=0.03)
    assert [strategy.part_of_step(s) for s in range(50)] == [strategy.part_of_step(s) for s in range(50)]


@pytest.mark.parametrize("space", [None, CELL, VIT], ids=["mobilenetv3", "cell201", "vit"])
def test_the_key_s_own_parameters_are_left_out_of_the_gradients(space):
    strategy = api.build_strategy(_config(space))
    part, names = strategy.parts[0], dict(strategy.parts[0].supernet.named_parameters())
    for key in part.space.splittable_keys():
        kept = {id(p) for p in shared_parameters(part, key)}
        left_out = {name for name, p in names.items() if id(p) not in kept}
        # independently: the layer the key configures, by its name in the supernet
        if key.startswith("edge"):
            own = {n for n in names if f".convs.{key[4:]}." in n}
        elif key.endswith("kernel_size"):
            stage, block, _ = key.split(".")
            own = {n for n in names if n.startswith(f"blocks.{stage[5:]}.{block[5:]}.conv_dw.")}
        elif key.endswith("expand_ratio"):
            stage, block, _ = key.split(".")
            own = {n for n in names if n.startswith(f"blocks.{stage[5:]}.{block[5:]}.")}
        else:
            own = {n for n in names if n.startswith(f"blocks.{key.split('.')[0][5:]}.mlp.")}
        assert own and left_out == own, key


def test_a_split_takes_the_key_with_the_largest_cut_and_leaves_training_untouched(splits, tmp_path):
    trainer = _trainer(_config(), splits, tmp_path)
    for step in range(2):
        trainer.train_one_step(*_batch(splits, step))
    strategy = trainer.strategy
    before = {k: v.clone() for k, v in strategy.model_state_dict().items()}
    io = trainer.step_io()
    decision = decide_split(strategy, 0, probe_halves(io.batches("train", 2, "test"), 1), io)
    assert {k: v for k, v in strategy.model_state_dict().items()}.keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in strategy.model_state_dict().items())   # buffers too
    cuts = {key: best_partition(matrix, 2)[1] for key, matrix in decision.matrices.items()}
    assert set(cuts) == {k for k in strategy.space.splittable_keys() if strategy.space.can_activate(k)}
    assert decision.cut == max(cuts.values()) == cuts[decision.key] > 0
    for matrix in decision.matrices.values():
        assert torch.equal(matrix, matrix.T) and matrix.diagonal().abs().max() == 0
        assert 0 <= matrix.min() and matrix.max() <= 2


def test_before_its_first_split_it_trains_exactly_like_one_shot(splits, tmp_path):
    few = _trainer(_config(), splits, tmp_path / "few")
    one = _trainer(_config(strategy="one_shot"), splits, tmp_path / "one")
    for step in range(3):
        assert few.train_one_step(*_batch(splits, step)) == one.train_one_step(*_batch(splits, step))
    a, b = few.strategy.parts[0].supernet.state_dict(), one.strategy.supernet.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)


@pytest.mark.slow
@pytest.mark.parametrize("budget, stop, steps", [("shared", 2, 8), ("per_child", 2, 12), ("per_child", 7, 12)])
def test_split_run_resumes_bit_exactly_across_the_split(tmp_path, monkeypatch, budget, stop, steps):
    def train(name, resume):
        config = load_config(tmp_path / name / "config.yaml") if resume else _config(split={"budget": budget})
        return api.train(config, name=name, resume=resume, runs_dir=tmp_path, progress=False, device="cpu")

    # stopped before the split at step 4, or (per_child) between the two children's turns
    a, b = straight_and_resumed(train, stop, monkeypatch)
    assert a["step"] == b["step"] == steps        # per_child: 4 + 2 children x 4 remaining steps
    assert a["scheduler"] == b["scheduler"] and a["epoch"] == b["epoch"] == 2
    assert [s["key"] for s in a["strategy"]["splits"]] == [s["key"] for s in b["strategy"]["splits"]]
    assert a["model"].keys() == b["model"].keys() and any(k.startswith("parts.1.") for k in a["model"])
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for key, value in a["optimizer"]["state"].items():
        assert torch.equal(value["momentum_buffer"], b["optimizer"]["state"][key]["momentum_buffer"])


@pytest.mark.slow
def test_loaded_split_run_exports_every_sub_supernet_s_archs_exactly(tmp_path, capsys):
    api.train(_config(CELL), name="gm", runs_dir=tmp_path, progress=False, device="cpu")
    run = api.load_run(tmp_path / "gm", device="cpu")
    strategy = run.strategy
    assert len(strategy.parts) == 2 and strategy.history[0]["round"] == 0
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    for index, part in enumerate(strategy.parts):
        arch = part.space.sample(random.Random(index))
        module = run.subnet(arch)
        assert module is part.supernet and module.active_arch == arch
        module.eval()
        with torch.no_grad():
            assert torch.allclose(run.export_model(arch)(x), module(x), atol=1e-5)
        evaluated = api.evaluate(run, arch)
        assert evaluated.arch == arch and 0 <= evaluated.top1 <= 1

    events = EventAccumulator(str(tmp_path / "gm" / "tb"), size_guidance={"images": 0}).Reload()
    keys = [k for k in strategy.space.splittable_keys() if strategy.space.can_activate(k)]
    assert sorted(events.Tags()["images"]) == sorted(f"few_shot/round0/part0/{k}" for k in keys)
    assert events.Scalars("few_shot/cut/round0/part0")[0].value == pytest.approx(strategy.history[0]["cut"])
    assert events.Scalars("few_shot/sub_supernets")[0].value == 2
    agree = strategy.history[0]["probes_agree"]
    for what in ("key", "groups"):    # the two probes' agreement, as the history records it
        assert events.Scalars(f"few_shot/probes_agree_{what}/round0/part0")[0].value == float(agree[what])

    capsys.readouterr()
    assert cli.main(["space", "gm", "--runs-dir", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    split = strategy.history[0]
    assert [p["split"] for p in listed["sub_supernets"]] == [{split["key"]: g} for g in split["groups"]]
    assert [p["size"] for p in listed["sub_supernets"]] == [p.space.size() for p in strategy.parts]
    assert sum(p["size"] for p in listed["sub_supernets"]) == listed["size"]
    assert listed["sub_supernets"][0]["restricted"] == {split["key"]: split["groups"][0]}
    assert cli.main(["space", str(tmp_path / "gm")]) == 0
    assert "2 sub-supernets:" in capsys.readouterr().out


def test_default_splits_are_the_authors_20_and_40_of_90_epochs_with_fresh_last_children():
    options = SplitOptions()
    assert options.split_steps(900, 10) == [200, 400] and options.reinit_children is True
    for name in ("fashion_mnist_cell201_gm", "fashion_mnist_mbv3_gm"):
        split = load_config(name).strategy.options.split
        assert split.split_steps(1800, 1) == [399, 799] and split.reinit_children is True   # 0.2222, 0.4444


def test_bad_split_options_name_their_key():
    with pytest.raises(ConfigError, match=r"strategy\.(options\.)?split\.at_epochs: must be increasing"):
        _config(split={"at_epochs": [2, 1]})
    with pytest.raises(ConfigError, match=r"strategy\.(options\.)?split\.metric"):
        _config(split={"metric": "cosine"})
    with pytest.raises(ConfigError, match=r"strategy\.(options\.)?split\.reinit_children") as error:
        _config(split={"reinit_children": "final"})
    assert "\n" not in str(error.value)


def test_a_sampler_fitted_to_one_space_is_refused_by_name():
    config = _config()
    data = config.to_dict()
    data["strategy"]["sampler"] = {"name": "shiftnas"}
    with pytest.raises(ConfigError, match=r"strategy\.sampler\.name: few_shot cannot split the 'shiftnas' sampler"):
        api.build_strategy(load_config(data))


@pytest.mark.parametrize("name", ["fashion_mnist_cell201", "fashion_mnist_mbv3"])
def test_shipped_gm_configs_differ_from_their_one_shot_counterparts_only_in_strategy(name):
    one, gm = load_config(name).to_dict(), load_config(f"{name}_gm").to_dict()
    assert gm["strategy"]["name"] == "few_shot" and one["strategy"]["name"] == "one_shot"
    for data in (one, gm):
        data["strategy"].pop("name"), data["strategy"].pop("options")
    assert one == gm     # same space, data, sampler, distillation and training steps


# -- the budget: per_child (GM-NAS) and shared ------------------------------------------------
def _train_recording(config, splits, root, monkeypatch):
    """Fit a trainer, recording (step, id of the sub-supernet's strategy, lr) for every step."""
    trained, lrs = [], []
    original_step, original_one = OneShotStrategy.train_step, Trainer.train_one_step

    def step(self, images, labels, step, io):
        trained.append((step, id(self)))
        return original_step(self, images, labels, step, io)

    def one(self, images, labels):
        logs = original_one(self, images, labels)
        lrs.append(logs["lr"])
        return logs

    monkeypatch.setattr(OneShotStrategy, "train_step", step)
    monkeypatch.setattr(Trainer, "train_one_step", one)
    trainer = _trainer(config, splits, root)
    trainer.fit()
    return trainer, trained, lrs


@pytest.mark.slow
@pytest.mark.parametrize("reinit", [True, False])
def test_per_child_budget_gives_every_child_the_rest_of_the_schedule(splits, tmp_path, monkeypatch, reinit):
    config = _config(split={"at": [0.5, 0.75], "reinit_children": reinit}, steps=8)   # T = 8: splits after 4 and 6
    trainer, trained, lrs = _train_recording(config, splits, tmp_path, monkeypatch)
    strategy = trainer.strategy
    assert len(strategy.parts) == 4
    closed_form = 4 + 2 * (6 - 4) + 4 * (8 - 6)                     # s1 + 2 (s2 - s1) + 4 (T - s2)
    assert trainer.state.step == trainer.total_steps == len(trained) == closed_form == 16
    assert [step for step, _ in trained] == list(range(16))
    by_segment = [collections.Counter(who for step, who in trained if lo <= step < hi)
                  for lo, hi in ((0, 4), (4, 8), (8, 16))]
    assert [sorted(c.values()) for c in by_segment] == [[4], [2, 2], [2, 2, 2, 2]]   # each: the remaining steps
    assert set(by_segment[2]) == {id(part) for part in strategy.parts}
    # the learning rate follows the original 8-step schedule: the clock advances 1/parts a step;
    # re-initialised children read it again from its start (the authors' fresh scheduler)
    reference = build_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.05), config.train, 8)

    def lr_at(position):
        reference.step_update(position)
        return reference.optimizer.param_groups[0]["lr"]

    restart = 0 if reinit else 6
    positions = ([t for t in range(4)] + [4 + (t - 4) / 2 for t in range(4, 8)]
                 + [restart + (t - 8) / 4 for t in range(8, 16)])
    assert lrs == pytest.approx([lr_at(p) for p in positions], rel=1e-12)
    checkpoint = torch.load(trainer.run.checkpoints / "last.pt", weights_only=True)
    assert checkpoint["epoch"] == 2 and checkpoint["total_steps"] == 16


def _fresh_supernet_state(space, seed: int) -> dict:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return space.build_supernet().state_dict()


def _has_momentum(trainer, part) -> list[bool]:
    return [p in trainer.optimizer.state for p in part.supernet.parameters() if p.requires_grad]


@pytest.mark.parametrize("reinit", [True, False])
def test_only_the_last_split_reinitialises_its_children(splits, tmp_path, reinit):
    config = _config(split={"at": [0.5, 0.75], "reinit_children": reinit}, steps=8)   # splits after steps 4 and 8
    trainer = _trainer(config, splits, tmp_path)
    for step in range(4):
        trainer.train_one_step(*_batch(splits, step))
    first, second = trainer.strategy.parts              # the first split: copies of one parent, with momentum
    a, b = first.supernet.state_dict(), second.supernet.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(_has_momentum(trainer, first)) and all(_has_momentum(trainer, second))
    for step in range(4, 7):
        trainer.train_one_step(*_batch(splits, step))
    before = [{k: v.clone() for k, v in part.supernet.state_dict().items()} for part in trainer.strategy.parts]
    trainer.train_one_step(*_batch(splits, 7))          # the last split follows this step
    parts = trainer.strategy.parts
    assert len(parts) == 4 and trainer.strategy.rounds == 2
    assert [bool(s.get("reinitialised")) for s in trainer.strategy.history] == [False, reinit, reinit]
    states = [part.supernet.state_dict() for part in parts]
    for index, part in enumerate(parts):
        parent, group = divmod(index, 2)
        if reinit:     # seeded by (seed, round 1, parent, group): four different fresh supernets
            expected = _fresh_supernet_state(trainer.strategy.space,
                                             derive_seed(config.train.seed, "few-shot-reinit", 1, parent, group))
        else:          # copies of their parent (parent 0 did not train step 7; parent 1 did)
            expected = before[0] if parent == 0 else states[2 * parent]
        assert states[index].keys() == expected.keys()
        assert all(torch.equal(states[index][k], expected[k]) for k in expected), index
        assert not any(_has_momentum(trainer, part)) if reinit else all(_has_momentum(trainer, part))
    first_weight = [next(iter(part.supernet.parameters())) for part in parts]
    assert reinit != torch.equal(first_weight[0], first_weight[1])


@pytest.mark.slow
def test_shared_budget_keeps_the_schedule_s_length(splits, tmp_path, monkeypatch):
    config = _config(split={"at": [0.5, 0.75], "budget": "shared"}, steps=8)
    trainer, trained, lrs = _train_recording(config, splits, tmp_path, monkeypatch)
    assert trainer.state.step == trainer.total_steps == len(trained) == 8
    assert len(trainer.strategy.parts) == 4


def test_shared_budget_with_fresh_children_warns_before_training(recwarn):
    reinit = api.build_strategy(_config(split={"at": [0.5, 0.75], "budget": "shared"}, steps=40))
    with pytest.warns(UserWarning, match=r"budget shared with reinit_children true: up to 4 final children start "
                                         r"from fresh weights and share the last 10 steps \(about 2 each\)"):
        reinit.check_schedule(40, 4)
    recwarn.clear()
    for split in ({"at": [0.5, 0.75], "budget": "shared", "reinit_children": False}, {"at": [0.5, 0.75]}):
        api.build_strategy(_config(split=split, steps=40)).check_schedule(40, 4)
    assert not [w for w in recwarn if "reinit_children" in str(w.message)]


@pytest.mark.slow
def test_the_cli_prints_that_warning_in_one_line_and_trains(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(_config(split={"at": [0.5, 0.75], "budget": "shared"}).to_dict()))
    assert cli.main(["train", str(path), "--name", "fresh", "--runs-dir", str(tmp_path / "runs"), "--quiet",
                     "--device", "cpu"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == ["nas train: warning: strategy.split: budget shared with reinit_children true: up to 4 final "
                      "children start from fresh weights and share the last 2 steps (about 0 each); "
                      "reinit_children: false keeps their trained weights (benchmarks/notes/17-default-path.md)"]


def test_per_child_children_take_turns_from_the_split():
    strategy = api.build_strategy(_config(CELL))
    _split_twice(strategy)
    strategy.segment_start = 10
    n = len(strategy.parts)
    assert [strategy.part_of_step(10 + i) for i in range(3 * n)] == [i % n for i in range(3 * n)]


def test_budget_lengthens_the_run_by_the_closed_form():
    from supernets import few_shot_budget as budget

    T, s1, s2 = 100, 50, 75
    for per_child, expected in ((True, s1 + 2 * (s2 - s1) + 4 * (T - s2)), (False, T)):
        segments = budget.plan([s1, s2], [], 2, per_child)
        assert budget.total_steps(segments, T) == expected
        assert budget.schedule_position(segments, expected) == T
    segments = budget.plan([s1, s2], [3], 2, True)        # the first round split into 3, the next into 6
    assert budget.total_steps(segments, T) == s1 + 3 * (s2 - s1) + 6 * (T - s2)
    assert [budget.schedule_position(segments, t) for t in (49, 50, 51, 52, 53, 125, 126)] == \
        [49, 50, 50 + 1 / 3, 50 + 2 / 3, 51, 75, 75 + 1 / 6]


# -- the probe: two disjoint probes, planted (dis)agreement -----------------------------------
def _planted_strategy(**split) -> FewShotStrategy:
    options = FewShotOptions(split=SplitOptions(at=(0.5,), batches=3, **split))
    plugins = _config().strategy
    return FewShotStrategy(PlantedSpace(), options, plugins.sampler, plugins.distill, seed=0)


def _planted_batches(first_feature_signs: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    batches = []
    for sign in first_feature_signs:
        x = torch.randn(32, PlantedSpace.FEATURES, generator=generator)
        x[:, 0] = sign * (x[:, 0].abs() + 0.1)
        batches.append((x, torch.randint(0, PlantedSpace.CLASSES, (32,), generator=generator)))
    return batches


def _io(batches) -> StepIO:
    return StepIO(forward=lambda x: x, pass_context=lambda final: contextlib.nullcontext(),
                  all_reduce_mean=lambda t: t, batches=lambda split, count, key: batches[:count],
                  steps_per_epoch=4, schedule_steps=8)


def test_a_planted_disagreement_is_split_along_its_partition_and_both_probes_agree():
    strategy = _planted_strategy()
    io = _io(_planted_batches([1] * 6))
    assert strategy.after_step(3, io) is None
    change = strategy.after_step(4, io)
    assert strategy.routes == [{"sign": ("a", "b")}, {"sign": ("c", "d")}]    # the planted partition
    assert strategy.history[0]["cut"] == pytest.approx(8.0, abs=1e-3)     # 4 opposed pairs at distance 2
    assert strategy.history[0]["probes_agree"] == {"key": True, "groups": True}
    assert "split part 0 on sign: ['a', 'b'] | ['c', 'd']" in change.reason
    assert "two probes of 3 batches agree" in change.reason
    assert "budget per_child: 2 sub-supernets each train the remaining 4 schedule steps, 12 optimiser steps in " \
           "all instead of 8 (+4)" in change.reason
    assert change.scalars["few_shot/probes_agree_key/round0/part0"] == 1.0
    assert change.scalars["few_shot/probes_agree_groups/round0/part0"] == 1.0
    assert strategy.total_steps(io) == 12 and strategy.segment_start == 4


def test_probes_that_disagree_say_so():
    strategy = _planted_strategy()
    change = strategy.after_step(4, _io(_planted_batches([1, 1, 1, -1, -1, -1])))   # b flips in probe 2
    # probe 1 sees {a, b} | {c, d}, probe 2 {a} | {b, c, d}; their mean still splits {a, b} | {c, d}
    assert strategy.routes == [{"sign": ("a", "b")}, {"sign": ("c", "d")}]
    assert strategy.history[0]["probes_agree"] == {"key": True, "groups": False}
    assert ("two probes of 3 batches DISAGREE: groups ['a', 'b'] | ['c', 'd'] vs ['a'] | ['b', 'c', 'd']"
            in change.reason)
    assert change.scalars["few_shot/probes_agree_groups/round0/part0"] == 0.0


def test_two_ranks_share_the_probe_batches_and_decide_on_the_matrices_of_one_process(monkeypatch):
    halves = probe_halves(_planted_batches([1, 1, 1, -1, -1, -1]), 3)   # the probes disagree: both kept apart
    strategy = _planted_strategy()
    calls = collections.Counter()
    measure = few_shot_probe.value_gradients

    def counted(part, key, *args):
        calls[who] += 1
        return measure(part, key, *args)

    monkeypatch.setattr(few_shot_probe, "value_gradients", counted)
    who = "alone"
    alone = decide_split(copy.deepcopy(strategy), 0, halves, _io([]))
    shares = []                      # rank 1 runs first; a fake all-reduce hands its shares to rank 0
    who, io = 1, dataclasses.replace(_io([]), rank=1, world_size=2, all_reduce_mean=lambda t: shares.append(t) or t)
    decide_split(copy.deepcopy(strategy), 0, halves, io)
    who, io = 0, dataclasses.replace(io, rank=0, all_reduce_mean=lambda t: (t + shares.pop(0)) / 2)
    shared = decide_split(copy.deepcopy(strategy), 0, halves, io)
    keys = len(alone.matrices)
    assert calls["alone"] == 6 * keys and calls[0] == calls[1] == 3 * keys   # each rank: half the 6 batches
    assert not shares
    for key, matrix in alone.matrices.items():
        assert torch.allclose(shared.matrices[key], matrix, rtol=1e-6, atol=1e-9), key
    assert (shared.key, shared.groups, shared.probe_groups) == (alone.key, alone.groups, alone.probe_groups)
    assert shared.probe_groups[0] != shared.probe_groups[1] and shared.cut == pytest.approx(alone.cut, rel=1e-6)


def test_probes_need_two_batches_and_use_disjoint_halves():
    batches = _planted_batches([1] * 5)
    first, second = probe_halves(batches, 50)
    assert len(first) == len(second) == 2 and not {id(b) for b in first} & {id(b) for b in second}
    with pytest.raises(ConfigError, match=r"strategy\.split\.batches: the training split gives 1 probe"):
        probe_halves(batches[:1], 50)


# -- options checked against the schedule ------------------------------------------------------
@pytest.mark.parametrize("split, message", [
    ({"at": [0.75, 0.5]}, r"split\.at: must be strictly increasing fractions of training in \(0, 1\), got \[0.75, 0.5\]"),
    ({"at": [0.5, 1.0]}, r"split\.at: must be strictly increasing fractions"),
    ({"at": [0.0]}, r"split\.at: must be strictly increasing fractions"),
    ({"at": [0.5], "at_epochs": [1]}, r"split\.at: give at \(fractions of training\) or at_epochs, not both"),
    ({"budget": "each"}, r"split\.budget: each is not allowed"),
])
def test_split_fractions_are_checked_with_their_key(split, message):
    data = tiny_config(distill="none", steps=8)
    data["strategy"]["name"] = "few_shot"
    data["strategy"]["options"] = {"split": split}
    with pytest.raises(ConfigError, match=r"strategy\." + message):
        load_config(data)


@pytest.mark.slow
@pytest.mark.parametrize("split, message", [
    ({"at_epochs": [1, 2]}, r"strategy\.split\.at_epochs: \[2\] at or after the end of training \(8 steps, "
                            r"4 an epoch\): the run would never split"),
    ({"at": [0.05]}, r"strategy\.split\.at: \[0.05\] of a 8-step run gives split steps \[0\]; they must be "
                     r"distinct and >= 1"),
    ({"at": [0.5, 0.55]}, r"strategy\.split\.at: \[0.5, 0.55\] of a 8-step run gives split steps \[4, 4\]"),
])
def test_a_split_the_schedule_cannot_hold_is_a_one_line_error(splits, tmp_path, capsys, split, message):
    config = _config(split=split)
    with pytest.raises(ConfigError, match=message):
        _trainer(config, splits, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config.to_dict()))
    code = cli.main(["train", str(path), "--name", "late", "--runs-dir", str(tmp_path / "runs"), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and re.search(message, err[0])
    assert not (tmp_path / "runs" / "late").exists()       # found before the run folder is created
    path.write_text(json.dumps(_config(split={"at_epochs": [1]}).to_dict()))
    assert cli.main(["train", str(path), "--name", "late", "--runs-dir", str(tmp_path / "runs"), "--quiet",
                     "--device", "cpu"]) == 0


def test_splits_at_fractions_fall_on_their_schedule_steps(splits, tmp_path):
    trainer = _trainer(_config(split={"at": [0.6, 0.7]}), splits, tmp_path)   # steps 4 and 5 of 8
    assert trainer.total_steps == 4 + 2 * (5 - 4) + 4 * (8 - 5)
