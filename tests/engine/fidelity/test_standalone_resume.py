"""A standalone training killed midway resumes from its saved state to the uninterrupted result."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from nas import api
from nas.core.config import load_config
from nas.engine.fidelity import ground_truth, standalone
from nas.engine.checkpoint import load_checkpoint, save_checkpoint
from nas.engine.data.build import build_source
from nas.engine.fidelity.recipe import load_recipe
from tests.support.tiny import tiny_config

STEPS = 6


@pytest.fixture(scope="module")
def setup():
    config = load_config(tiny_config())
    recipe = load_recipe(config, epochs=1)
    # a learning rate that varies every step and momentum: a resume that lost either would differ
    recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, epochs=None, steps=STEPS))
    space = api.build_space(config)
    arch = space.max()
    return config, recipe, arch, space.input_size(arch), build_source(recipe.data)


def _train(setup, **kwargs):
    config, recipe, arch, resolution, source = setup
    model = api.standalone_model(config, arch, 11)
    result = standalone.train_standalone(model, recipe, source, 3, resolution=resolution, **kwargs)
    return result, {name: t.detach().clone() for name, t in model.state_dict().items()}


def _killed_after(steps: int, monkeypatch):
    """Make the optimiser step after `steps` steps die as a killed process would."""
    real, calls = standalone.clip_gradients, []

    def clip(model, cfg):
        calls.append(1)
        if len(calls) > steps:
            raise KeyboardInterrupt
        return real(model, cfg)

    monkeypatch.setattr(standalone, "clip_gradients", clip)


def test_a_killed_training_resumes_to_the_uninterrupted_result(setup, tmp_path, monkeypatch):
    whole, whole_weights = _train(setup)
    partial = tmp_path / "a-s0.partial.pt"
    _killed_after(4, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _train(setup, partial=partial, save_every_s=0)
    assert load_checkpoint(partial)["step"] == 4
    monkeypatch.undo()

    resumed, resumed_weights = _train(setup, partial=partial)
    assert (resumed.test_top1, resumed.test_top5, resumed.steps) == (whole.test_top1, whole.test_top5, STEPS)
    assert resumed_weights.keys() == whole_weights.keys()
    assert all(torch.equal(resumed_weights[k], whole_weights[k]) for k in whole_weights)
    # resumed from step 4, not retrained from the start: the weights saved there are not the final ones
    saved = load_checkpoint(partial)["model"]
    assert not all(torch.equal(saved[k], whole_weights[k]) for k in saved)


def test_an_unreadable_saved_state_is_said_and_training_starts_over(setup, tmp_path, capsys):
    whole, whole_weights = _train(setup)
    partial = tmp_path / "a-s0.partial.pt"
    partial.write_bytes(b"not a checkpoint")
    again, weights = _train(setup, partial=partial)
    assert again.test_top1 == whole.test_top1
    assert all(torch.equal(weights[k], whole_weights[k]) for k in whole_weights)
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{partial}: not resumed, training from the start (")


@pytest.fixture(scope="module")
def stopped_at_4(setup, tmp_path_factory):
    """(the uninterrupted training's result and weights, the state a training killed after 4 steps saved)."""
    whole = _train(setup)
    partial = tmp_path_factory.mktemp("stopped") / "a-s0.partial.pt"
    with pytest.MonkeyPatch.context() as patch:
        _killed_after(4, patch)
        with pytest.raises(KeyboardInterrupt):
            _train(setup, partial=partial, save_every_s=0)
    return whole, load_checkpoint(partial)


@pytest.mark.parametrize("step, says", [(-2, "step: must be a step >= 0"), (2.5, "step: expected int, got 2.5")])
def test_a_saved_state_with_a_damaged_step_is_said_and_training_starts_over(setup, stopped_at_4, tmp_path, capsys,
                                                                            step, says):
    """The fine-tune's and ground truth's saved state: its step read through a typed record (an
    edited step had been trained from as it was: -2 trained 8 steps)."""
    (whole, whole_weights), state = stopped_at_4
    partial = tmp_path / "a-s0.partial.pt"
    save_checkpoint({**state, "step": step}, partial)
    capsys.readouterr()
    again, weights = _train(setup, partial=partial)
    assert again.steps == STEPS and all(torch.equal(weights[k], whole_weights[k]) for k in whole_weights)
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{partial}: not resumed, training from the start ({partial}: damaged record: {says}")


def test_the_ground_truth_resumes_a_killed_training_and_removes_its_state(setup, tmp_path, monkeypatch):
    config, recipe, arch, _, _ = setup
    truth = ground_truth.GroundTruth(tmp_path, api.build_space(config), config, recipe, api.standalone_model)
    task = truth.task(arch, 0)
    monkeypatch.setattr(standalone, "PARTIAL_EVERY_S", 0.0)
    _killed_after(2, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        ground_truth.train_task(task)
    partial = ground_truth.partial_path(task.path)
    assert partial.name == f"{task.path.stem}.partial.pt" and load_checkpoint(partial)["step"] == 2
    assert truth.cached(arch, 0) is None
    monkeypatch.undo()

    record = ground_truth.train_task(task)
    assert truth.cached(arch, 0) == record and not partial.exists()
    fresh = ground_truth.GroundTruth(tmp_path / "fresh", api.build_space(config), config, recipe,
                                     api.standalone_model)
    fresh.folder.mkdir(parents=True)
    assert ground_truth.train_task(fresh.task(arch, 0))["test_top1"] == record["test_top1"]
