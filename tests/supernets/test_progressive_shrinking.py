"""Progressive shrinking: its phases against OFA's recipe, what each phase trains, its rates,
the teacher, the optimiser's fresh state, resume across a phase boundary and a sort, and bad input."""
from __future__ import annotations

import math

import pytest
import torch

from nas import api
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.data.datasets import load_dataset
from nas.engine.run import build_space
from supernets.progressive_phases import OFA_PHASES, PhaseOptions, plan_phases
from tests.support.helpers import resumed_api_run, tiny_trainer
from tests.support.tiny import tiny_config

# (phase, OFA epochs, subnets a step, peak rate, warm-up epochs) read from train_ofa_net.py; the
# full network's 150 epochs are ofa's ImagenetRunConfig n_epochs; width is this project's
OFA_RECIPE = [("full", 150, 1, None, 5), ("kernel", 120, 1, 3e-2, 5), ("depth_partial", 25, 2, 2.5e-3, 0),
              ("depth", 120, 2, 7.5e-3, 5), ("expand_partial", 25, 4, 2.5e-3, 0), ("expand", 120, 4, 7.5e-3, 5)]

PHASES = [{"name": "full", "share": 2, "subnets": 1, "warmup": 0.25}, {"name": "kernel", "share": 1},
          {"name": "depth", "share": 1, "subnets": 2, "lr": 0.5}, {"name": "expand_partial", "share": 1, "subnets": 2},
          {"name": "expand", "share": 1, "subnets": 2}, {"name": "width", "share": 2, "subnets": 2}]


def _config(space: str = "mobilenetv3", steps: int = 16, distill: str = "kl", phases=None, **options):
    data = tiny_config(distill=distill, steps=steps, space=space)
    data["strategy"] = {"name": "progressive_shrinking", "distill": {"name": distill},
                        "options": {"phases": phases if phases is not None else PHASES, **options}}
    return load_config(data)


@pytest.fixture(scope="module")
def splits():
    return load_dataset("fashion_mnist", val_size=256, train_size=512)


def _batch(splits, step: int):
    return splits.train_images[64 * step:64 * step + 64].float() / 255, splits.train_labels[64 * step:64 * step + 64]


def test_default_phases_follow_ofas_recipe_in_order_share_rate_and_warmup():
    ours = {p.name: p for p in OFA_PHASES}
    assert [p.name for p in OFA_PHASES] == [name for name, *_ in OFA_RECIPE] + ["width"]
    for name, epochs, subnets, rate, warmup in OFA_RECIPE:
        phase = ours[name]
        assert (phase.share, phase.subnets) == (epochs, subnets)
        assert math.isclose(phase.warmup * epochs, warmup)
        if rate is not None:
            assert math.isclose(phase.lr, rate / 3e-2)
    assert ours["width"] == PhaseOptions("width", 120, 4, ours["expand"].lr, ours["expand"].warmup)


def test_the_shipped_config_keeps_the_default_phases():
    config = load_config("fashion_mnist_mbv3_ofa")
    for shipped, default in zip(config.strategy.options.phases, OFA_PHASES, strict=True):
        assert shipped.name == default.name and (shipped.share, shipped.subnets) == (default.share, default.subnets)
        assert math.isclose(shipped.lr, default.lr, rel_tol=1e-3) and math.isclose(shipped.warmup, default.warmup,
                                                                                     abs_tol=1e-3)


def test_phases_divide_the_run_by_their_shares_and_open_one_dimension_at_a_time():
    space = build_space(load_config("fashion_mnist_mbv3_ofa"))
    choices = space.choices()
    phases, skipped = plan_phases(choices, OFA_PHASES, 2145)
    shares = [150, 120, 25, 120, 25, 120, 120]
    ends = [round(2145 * sum(shares[:k + 1]) / sum(shares)) for k in range(len(shares))]
    assert [p.end for p in phases] == ends and [p.start for p in phases] == [0] + ends[:-1] and skipped == []
    full, kernel, depth2, depth, expand2, expand, width = (p.open for p in phases)
    assert full == {}
    assert set(kernel) == {k for k in choices if k.endswith("kernel_size") or k == "resolution"}
    assert all(depth2[k] == choices[k][-2:] for k in choices if k.endswith(".depth") and len(choices[k]) > 1)
    assert all(depth[k] == choices[k] for k in choices if k.endswith(".depth") and len(choices[k]) > 1)
    assert expand2["stage1.block0.expand_ratio"] == (4, 6) and expand["stage1.block0.expand_ratio"] == (3, 4, 6)
    assert "stage2.width" not in expand and width["stage2.width"] == (24, 32, 40)
    assert "stage0.width" not in width    # one value: nothing to open


def test_a_vit_has_no_kernel_phase_and_the_log_says_so(tmp_path, splits):
    trainer = tiny_trainer(_config("vit"), splits, tmp_path)
    strategy = trainer.strategy
    assert [p.name for p in strategy.phases] == ["full", "depth", "expand_partial", "expand", "width"]
    described = strategy.describe()
    assert described.startswith("progressive shrinking: full (steps 0-") and "kernel" in described.split("left out")[1]
    width = strategy.phases[-1]
    assert set(width.open) == {k for k, v in strategy.space.choices().items() if len(v) > 1}
    for step in range(strategy.phases[1].start, strategy.phases[2].start):     # depth: only depth moves
        for arch in strategy.trained_archs(step):
            assert arch["embed_dim"] == max(strategy.space.choices()["embed_dim"])
    phases = [trainer.train_one_step(*_batch(splits, step % 8))["phase"] for step in range(16)]
    assert phases == [float(i) for i, p in enumerate(strategy.phases) for _ in range(p.start, p.end)]


def test_each_phase_trains_only_what_it_has_opened(tmp_path, splits):
    strategy = tiny_trainer(_config(), splits, tmp_path).strategy
    space, largest = strategy.space, strategy.space.max()
    drawn: dict[str, set] = {}
    for phase in strategy.phases:
        for step in range(phase.start, phase.end):
            archs = strategy.trained_archs(step)
            assert len(archs) == phase.options.subnets
            for arch in archs:
                for key in space.active_keys(arch):
                    assert arch[key] in phase.open.get(key, (largest[key],)), (phase.name, key, arch[key])
                    drawn.setdefault(key, set()).add(arch[key])
    assert strategy.trained_archs(0) == [largest]
    assert all(len(values) > 1 for key, values in drawn.items() if len(space.choices()[key]) > 1)


def test_the_rate_warms_up_then_follows_a_cosine_inside_each_phase(tmp_path, splits):
    config = _config()
    trainer = tiny_trainer(config, splits, tmp_path)
    full, kernel, depth = trainer.strategy.phases[:3]
    assert (full.start, full.end, kernel.end, depth.end) == (0, 4, 6, 8)
    base = config.train.optimizer.lr
    expected = {0: 1.0, 1: 0.5 * (1 + math.cos(math.pi * 0 / 3)), 2: 0.5 * (1 + math.cos(math.pi / 3)),
                4: 1.0, 5: 0.5 * (1 + math.cos(math.pi / 2)), 6: 0.5, 7: 0.5 * 0.5 * (1 + math.cos(math.pi / 2))}
    for step in range(8):
        logs = trainer.train_one_step(*_batch(splits, step))
        if step in expected:
            assert math.isclose(logs["lr"], base * expected[step], rel_tol=1e-9), step


def test_the_teacher_is_the_full_network_frozen_when_the_first_phase_ends(tmp_path, splits):
    trainer = tiny_trainer(_config(), splits, tmp_path)
    strategy = trainer.strategy
    for step in range(4):
        trainer.train_one_step(*_batch(splits, step))
    full = {k: v.clone() for k, v in strategy.supernet.state_dict().items()}
    assert strategy.teacher is not None and trainer.optimizer.state == {}      # a fresh optimiser
    assert all(torch.equal(full[k], v) for k, v in strategy.teacher.state_dict().items() if "running" not in k)
    for step in range(4, 7):
        logs = trainer.train_one_step(*_batch(splits, step))
    assert all(torch.equal(full[k], v) for k, v in strategy.teacher.state_dict().items()
               if v.is_floating_point() and "running" not in k)
    x, y = _batch(splits, 7)
    strategy.teacher.train()
    with torch.no_grad():
        soft = torch.softmax(strategy.teacher(x), 1)
        strategy.activate(strategy.trained_archs(7)[0])
        logits = strategy.supernet(x)
    label = torch.nn.functional.cross_entropy(logits, y, label_smoothing=0.1)
    kd = -(soft * torch.log_softmax(logits, 1)).sum(1).mean()
    step_loss = trainer.train_one_step(x, y)["loss/subnet0"]
    assert math.isclose(step_loss, (label + kd).item(), rel_tol=1e-4)
    assert "loss/subnet0" in logs


def test_without_distillation_there_is_no_teacher(tmp_path, splits):
    trainer = tiny_trainer(_config(distill="none"), splits, tmp_path)
    for step in range(6):
        trainer.train_one_step(*_batch(splits, step))
    assert trainer.strategy.teacher is None and "teacher" not in trainer.strategy.state_dict()


@pytest.mark.slow
def test_a_run_resumes_bit_exactly_across_a_phase_boundary_and_a_sort(tmp_path, monkeypatch):
    # steps 0-3 full, 4-5 kernel, 6-7 depth, 8-9 expand_partial (sorted at step 8): stop after step 9
    straight, resumed = resumed_api_run(lambda: _config(steps=16), tmp_path, stop_at=9, monkeypatch=monkeypatch)
    assert straight["step"] == resumed["step"] == 16
    for key in ("model", "optimizer", "strategy"):
        assert _flat(straight[key]).keys() == _flat(resumed[key]).keys()
        assert all(torch.equal(a, b) if torch.is_tensor(a) else a == b
                   for a, b in zip(_flat(straight[key]).values(), _flat(resumed[key]).values())), key


@pytest.mark.slow
def test_a_run_resumes_bit_exactly_at_the_step_a_sort_happened(tmp_path, monkeypatch):
    straight, resumed = resumed_api_run(lambda: _config(steps=16), tmp_path, stop_at=8, monkeypatch=monkeypatch)
    assert all(torch.equal(straight["model"][k], resumed["model"][k]) for k in straight["model"])
    assert _flat(straight["strategy"]).keys() == _flat(resumed["strategy"]).keys()


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, value in enumerate(tree) for k, v in _flat(value, f"{prefix}{i}.").items()}
    return {prefix: tree}


@pytest.mark.parametrize("phases, message", [
    ([{"name": "kernel", "share": 1}], "phases: must start with full"),
    ([{"name": "full", "share": 1}, {"name": "depth_partial", "share": 1}, {"name": "kernel", "share": 1}],
     "phases: depth_partial must come right before depth"),
    ([{"name": "full", "share": 1}, {"name": "kernel", "share": 1}, {"name": "depth", "share": 1}],
     "no phase opens this space's expand, width choices"),
    ([{"name": "full", "share": 1000}] + PHASES[1:], "phase kernel gets no step of the run's 16"),
    ([{"name": "full", "share": -1}], "share: must be a positive number"),
])
def test_bad_phases_are_one_line_naming_the_key(tmp_path, splits, phases, message):
    with pytest.raises(ConfigError, match=message) as error:
        tiny_trainer(_config(phases=phases), splits, tmp_path)
    assert "strategy.phases" in str(error.value)


def test_a_space_without_shrinking_dimensions_is_refused(tmp_path):
    data = tiny_config(space="cell201")
    data["strategy"] = {"name": "progressive_shrinking"}
    with pytest.raises(ConfigError, match=r"strategy.name: progressive_shrinking shrinks kernels.*edge"):
        api.build_strategy(load_config(data))


def test_a_sampler_is_refused_since_phases_draw_their_own(tmp_path):
    data = tiny_config(sampler="uniform")
    data["strategy"].update(name="progressive_shrinking")
    with pytest.raises(ConfigError, match="strategy.sampler.name: progressive_shrinking draws its own subnets"):
        api.build_strategy(load_config(data))


@pytest.mark.slow
def test_cli_exit_code_two_for_a_bad_phase(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "ps.yaml"
    from nas.core import yaml_io
    data = tiny_config()
    data["strategy"] = {"name": "progressive_shrinking", "options": {"phases": [{"name": "kernel", "share": 1}]}}
    config.write_text(yaml_io.dumps(data))
    done = subprocess.run([sys.executable, "-m", "nas", "train", str(config), "--runs-dir", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "strategy.phases: must start with full" in done.stderr
    assert not (tmp_path / "ps").exists()


