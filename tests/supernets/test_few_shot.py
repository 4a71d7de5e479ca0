"""The few_shot strategy: sub-spaces partition their parent, routing, splits decided from the
gradients, one-shot training before the first split, resume across a split, export per child."""
from __future__ import annotations

import collections
import json
import random

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nas import api, cli
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.data.datasets import load_dataset
from nas.engine.run_dir import RunDir
from nas.engine.trainer import Trainer
from supernets.few_shot import FewShotStrategy
from supernets.few_shot_probe import Decision, decide_split, shared_parameters
from supernets.gradient_matching import best_partition, partitions
from tests.nas.helpers import straight_and_resumed
from tests.nas.tiny import tiny_config

CELL = {"name": "cell201", "options": {"channels": 4, "operations": ["none", "skip_connect", "conv_1x1"]}}
VIT = {"name": "vit", "options": {"embed_dims": [16], "depths": [1, 2], "num_heads": [1], "head_dim": 8,
                                  "mlp_ratios": [1.0, 2.0, 3.0]}}


def _config(space=None, split=None, strategy="few_shot", **train):
    data = tiny_config(distill="none", **{"steps": 8, **train})
    data["data"].update(train_size=256, val_size=256)       # batch 64: 4 steps an epoch
    data["strategy"]["name"] = strategy
    if strategy == "few_shot":
        data["strategy"]["options"] = {"split": {"at_epochs": [1], "batches": 1, **(split or {})}}
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


def test_interleaving_follows_the_sub_space_sizes():
    strategy = api.build_strategy(_config(CELL))
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
    decision = decide_split(strategy, 0, io.batches("train", 2, "test"), io)
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


def test_split_run_resumes_bit_exactly_across_the_split(tmp_path, monkeypatch):
    def train(name, resume):
        config = load_config(tmp_path / name / "config.yaml") if resume else _config()
        return api.train(config, name=name, resume=resume, runs_dir=tmp_path, progress=False, device="cpu")

    a, b = straight_and_resumed(train, 2, monkeypatch)      # stopped before the split at step 4
    assert a["step"] == b["step"] == 8
    assert [s["key"] for s in a["strategy"]["splits"]] == [s["key"] for s in b["strategy"]["splits"]]
    assert a["model"].keys() == b["model"].keys() and any(k.startswith("parts.1.") for k in a["model"])
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for key, value in a["optimizer"]["state"].items():
        assert torch.equal(value["momentum_buffer"], b["optimizer"]["state"][key]["momentum_buffer"])


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
        assert evaluated["arch"] == arch and 0 <= evaluated["top1"] <= 1

    events = EventAccumulator(str(tmp_path / "gm" / "tb"), size_guidance={"images": 0}).Reload()
    keys = [k for k in strategy.space.splittable_keys() if strategy.space.can_activate(k)]
    assert sorted(events.Tags()["images"]) == sorted(f"few_shot/round0/part0/{k}" for k in keys)
    assert events.Scalars("few_shot/cut/round0/part0")[0].value == pytest.approx(strategy.history[0]["cut"])
    assert events.Scalars("few_shot/sub_supernets")[0].value == 2

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


def test_bad_split_options_name_their_key():
    with pytest.raises(ConfigError, match=r"strategy\.(options\.)?split\.at_epochs: must be increasing"):
        _config(split={"at_epochs": [2, 1]})
    with pytest.raises(ConfigError, match=r"strategy\.(options\.)?split\.metric"):
        _config(split={"metric": "cosine"})


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
