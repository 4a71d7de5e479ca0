"""Training on real data end to end: strategies, resume, checkpoints, eval and export."""
from __future__ import annotations

import json

import pytest
import torch

from nas import api, cli
from nas.core.config import load_config
from nas.core.errors import CheckpointError
from nas.engine.checkpoint import load_checkpoint
from nas.engine.evaluator import static_accuracy
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from tests.support.helpers import straight_and_resumed
from tests.support.tiny import tiny_config


def _train(tmp_path, name="run", **kwargs):
    config = load_config(tiny_config(**kwargs))
    return api.train(config, name=name, runs_dir=tmp_path, progress=False, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("sampler, distill", [("uniform", "none"), ("sandwich", "kl")])
def test_tiny_run_learns_and_exports_what_eval_reports(tmp_path, capsys, sampler, distill):
    losses = []
    original = Trainer.train_one_step

    def recording(self, images, labels):
        logs = original(self, images, labels)
        losses.append(sum(v for k, v in logs.items() if k.startswith("loss/")))
        return logs

    Trainer.train_one_step = recording
    try:
        run = _train(tmp_path, sampler=sampler, distill=distill, steps=64, optimizer={"name": "sgd", "lr": 0.2})
    finally:
        Trainer.train_one_step = original
    assert sum(losses[-6:]) < sum(losses[:6]), losses      # the loss falls
    state = load_checkpoint(run.dir.checkpoints / "last.pt")    # round-trips with weights_only=True
    assert state["step"] == 64 and state["config"] == load_config(run.dir.config).to_dict()
    assert run.step == 64 and run.checkpoint == run.dir.checkpoints / "last.pt" and run.name == "run"
    assert json.loads(run.dir.environment.read_text())["ranks"] == 1            # one process, no torchrun
    last_epoch = json.loads(run.dir.metrics.read_text().splitlines()[-1])      # train() returns its summary
    assert run.val_top1 == {k[len("val_top1_"):]: v for k, v in last_epoch.items() if k.startswith("val_top1_")}
    assert run.val_top1 and run.epoch == last_epoch["epoch"]
    loaded = api.load_run(run.dir.root, device="cpu")
    assert all(torch.equal(v, loaded.strategy.model_state_dict()[k]) for k, v in state["model"].items())

    arch = "min" if sampler == "sandwich" else "max"
    assert cli.main(["eval", str(run.dir.root), "--arch", arch, "--split", "test", "--json", "--device", "cpu"]) == 0
    reported = json.loads(capsys.readouterr().out)
    assert 0.25 < reported["top1"] <= 1.0   # chance is 0.1 after 4 tiny epochs
    assert cli.main(["export", str(run.dir.root), "--arch", arch, "--out", str(tmp_path / "export"), "--json",
                     "--device", "cpu"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["test_top1"] == reported["top1"]

    # A plain-torch user: the saved program + the recorded preprocessing give the same accuracy.
    metrics = json.loads((tmp_path / "export" / "metrics.json").read_text())
    model = torch.export.load(str(tmp_path / "export" / "model.pt2")).module()
    pre = metrics["preprocessing"]
    assert pre["interpolation"] == "bilinear" and pre["antialias"] is False
    images, labels = loaded.splits.split("test")
    x = torch.nn.functional.interpolate(images.float() / 255, size=(pre["resolution"],) * 2, mode="bilinear",
                                        align_corners=False, antialias=False)
    x = (x - torch.tensor(pre["mean"]).view(1, -1, 1, 1)) / torch.tensor(pre["std"]).view(1, -1, 1, 1)
    with torch.no_grad():
        correct = sum((model(x[i:i + 500]).argmax(1) == labels[i:i + 500]).sum().item() for i in range(0, len(x), 500))
    assert correct / len(labels) == pytest.approx(metrics["test_top1"], abs=2e-4)
    assert static_accuracy(model, loaded.splits, "test", pre["resolution"]).top1 == pytest.approx(
        metrics["test_top1"], abs=2e-4)


@pytest.mark.slow
def test_resume_mid_epoch_gives_identical_weights(tmp_path, monkeypatch):
    def train(name, resume):
        return _train(tmp_path, name=name, steps=24) if not resume else api.train(
            load_config(tmp_path / name / "config.yaml"), name=name, resume=True, runs_dir=tmp_path, progress=False,
            device="cpu")

    a, b = straight_and_resumed(train, 19, monkeypatch)     # epoch 1 runs steps 16..31: mid-epoch
    assert a["step"] == b["step"] == 24
    straight, resumed = (json.loads((tmp_path / name / "environment.json").read_text())
                         for name in ("straight", "resumed"))
    assert "earlier_starts" not in straight and len(resumed["earlier_starts"]) == 1     # the stopped start's record
    first = resumed["earlier_starts"][0]
    assert first["started"] <= resumed["started"] and first["git_commit"] == resumed["git_commit"]
    assert first.keys() == {k for k in resumed if k != "earlier_starts"} and first["ranks"] == 1
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for key, value in a["optimizer"]["state"].items():
        assert torch.equal(value["momentum_buffer"], b["optimizer"]["state"][key]["momentum_buffer"])


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    import supernets.one_shot as one_shot

    original = one_shot.OneShotStrategy._label_loss

    def poisoned(self, logits, labels):
        loss = original(self, logits, labels)
        return loss * float("nan") if self._poison_now else loss

    calls = {"n": 0}
    original_step = Trainer.train_one_step

    def counting(self, images, labels):
        self.strategy._poison_now = self.state.step >= 7
        return original_step(self, images, labels)

    monkeypatch.setattr(one_shot.OneShotStrategy, "_label_loss", poisoned)
    monkeypatch.setattr(Trainer, "train_one_step", counting)
    path = tmp_path / "nan.yaml"
    from nas.core import yaml_io
    path.write_text(yaml_io.dumps(tiny_config(sampler="uniform", distill="none", steps=20)))
    code = cli.main(["train", str(path), "--runs-dir", str(tmp_path), "--quiet", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 1 and "non-finite loss at step 7" in err and "Traceback" not in err
    assert load_checkpoint(tmp_path / "nan" / "checkpoints" / "last.pt")["step"] == 5
    del calls


def test_sandwich_step_runs_2_plus_n_passes_and_the_teacher_has_no_gradient(tmp_path):
    config = load_config(tiny_config(sampler="sandwich", distill="kl"), ["strategy.sampler.num_random=3"])
    strategy = api.build_strategy(config)
    supernet = strategy.supernet
    forwards, backwards, teachers = [], [], []
    supernet.register_forward_hook(lambda m, i, o: forwards.append(dict(m.active_arch)))
    supernet.classifier.register_full_backward_hook(lambda m, gi, go: backwards.append(1))
    original = strategy.distill.__class__.__call__

    def spy(self, student, teacher, labels):
        teachers.append(teacher)
        return original(self, student, teacher, labels)

    strategy.distill.__class__.__call__ = spy
    try:
        from nas.engine.data.datasets import load_dataset
        splits = load_dataset("fashion_mnist", val_size=512, train_size=1024)
        trainer = Trainer(config, strategy, splits, RunDir(tmp_path / "r"), progress=False)
        x, y = splits.train_images[:64].float() / 255, splits.train_labels[:64]
        trainer.train_one_step(x, y)
    finally:
        strategy.distill.__class__.__call__ = original
    assert len(forwards) == len(backwards) == 2 + 3
    assert forwards[0] == supernet.space.max() and forwards[-1] == supernet.space.min()
    assert forwards[1:4] == [dict(a) for a in strategy.trained_archs(0)[1:4]]
    assert len(teachers) == 4 and all(not t.requires_grad and t.grad_fn is None for t in teachers)


def test_truncated_checkpoint_is_a_clear_error_and_the_other_still_loads(tmp_path):
    run = _train(tmp_path, steps=16)
    last, best = run.dir.checkpoints / "last.pt", run.dir.checkpoints / "best.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"last.pt: unreadable checkpoint \(truncated or corrupt\?\)"):
        load_checkpoint(last)
    assert load_checkpoint(best)["step"] == 16
    assert cli.main(["eval", str(run.dir.root), "--arch", "max", "--device", "cpu"]) == 2
    assert cli.main(["eval", str(run.dir.root), "--arch", "max", "--checkpoint", "best.pt", "--device", "cpu"]) == 0


def test_interrupted_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    from nas.engine import checkpoint

    path = checkpoint.save_checkpoint({"step": 1}, tmp_path / "last.pt")

    def crash(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        checkpoint.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert checkpoint.load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_a_batch_the_ranks_cannot_share_is_found_before_training():
    """`nas train` checks it (`check_fits`) before creating the run folder, not at the first batch."""
    from nas.core.errors import DataError
    from nas.engine.training.trainer import check_fits

    config = load_config(tiny_config())
    source = api.load_source(config, torch.device("cpu"))
    with pytest.raises(DataError, match=r"^train\.batch_size: 64 is not divisible by the 3 ranks \(world size\)$"):
        check_fits(config, api.build_strategy(config), source, world_size=3)
    check_fits(config, api.build_strategy(config), source, world_size=2)


@pytest.mark.parametrize("has_bf16", [True, False])
def test_bf16_on_a_cpu_warns_with_what_was_measured(tmp_path, monkeypatch, has_bf16):
    """The supernet trainer keeps `train.precision` as given; bf16 on a CPU warns with the measured
    step times (benchmarks/notes/23-bf16.md) and whether this CPU has bf16 instructions."""
    import warnings

    from nas.engine.data.datasets import load_dataset
    from nas.engine import precision

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    splits = load_dataset("fashion_mnist", val_size=512, train_size=1024)
    caught = {}
    for asked in ("bf16", "fp32"):
        config = load_config(tiny_config(precision=asked))
        with warnings.catch_warnings(record=True) as caught[asked]:
            warnings.simplefilter("always")
            Trainer(config, api.build_strategy(config), splits, RunDir(tmp_path / asked), progress=False)
    said = [str(w.message) for w in caught["bf16"] if "bf16" in str(w.message)]
    assert said == [precision.bf16_cpu_warning()] and precision.BF16_MEASURED in said[0]
    assert said[0].endswith("this CPU has bf16 instructions" if has_bf16 else "this CPU lacks bf16 instructions")
    assert not [w for w in caught["fp32"] if "bf16" in str(w.message)]
