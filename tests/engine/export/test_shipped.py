"""What `nas export` ships: compared with the cheaper subnets, fine-tuned alone resumably, recorded."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nas import api, cli
from nas.core.arch import arch_id
from nas.core.config import FinetuneConfig, load_config
from nas.engine.checkpoint import LAST, load_checkpoint, save_checkpoint
from nas.engine.export import finetune as finetune_module
from nas.engine.export.finetune import finetune_steps, finetune_subnet, partial_path
from nas.engine.fidelity import standalone
from tests.support.helpers import kill_standalone_at
from tests.support.safety import copy_run, one_line_error
from tests.support.tiny import tiny_config


def used_by(supernet, arch) -> dict[str, torch.Tensor]:
    """Per parameter, the elements `arch` uses (a non-zero gradient on a random batch)."""
    supernet.zero_grad(set_to_none=True)
    supernet.set_active(arch)
    size = supernet.space.input_size(arch)
    supernet.train()
    supernet(torch.randn(8, supernet.space.in_chans, size, size, generator=torch.Generator().manual_seed(0))).sum().backward()
    return {name: p.grad != 0 for name, p in supernet.named_parameters() if p.grad is not None}


def plant_broken_middle(runs: Path, name: str = "tiny") -> None:
    """Every weight the max subnet uses and the min subnet does not gets large noise: each subnet
    bigger than the min is then worse than it (the planted defect); the min is unchanged."""
    run = api.load_run(runs / name, device="cpu")
    supernet = run.subnet(run.space.min())
    by_min, by_max = used_by(supernet, run.space.min()), used_by(run.subnet(run.space.max()), run.space.max())
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param_name, param in supernet.named_parameters():
            only_max = by_max.get(param_name, torch.zeros_like(param, dtype=torch.bool)) & ~by_min.get(
                param_name, torch.zeros_like(param, dtype=torch.bool))
            param += only_max * 3 * torch.randn(param.shape, generator=generator)
    path = run.dir.checkpoints / LAST
    state = load_checkpoint(path)
    state["model"] = run.strategy.model_state_dict()
    save_checkpoint({k: v for k, v in state.items() if k not in ("digest", "format_version")}, path)


@pytest.fixture(scope="module")
def learnt(tmp_path_factory) -> Path:
    """A runs folder holding `tiny` trained long enough (40 steps) to be far above chance."""
    runs = tmp_path_factory.mktemp("learnt-runs")
    config = load_config(tiny_config(steps=40, distill="none", optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.9}))
    api.train(config, name="tiny", runs_dir=runs, progress=False)
    return runs


@pytest.fixture
def planted(learnt, tmp_path) -> Path:
    runs = copy_run(learnt, "tiny", tmp_path / "runs")
    plant_broken_middle(runs)
    return runs


def test_finetune_lengths_read_steps_epochs_and_shares():
    assert finetune_steps(40, 1000, 300) == 40
    assert finetune_steps("1e", 1000, 300) == 300
    assert finetune_steps("0.5e", 1000, 300) == 150
    assert finetune_steps("20%", 2145, 429) == 429
    assert finetune_steps("0.01%", 1000, 300) == 1       # never rounded to nothing
    assert finetune_steps(0, 1000, 300) == 0
    with pytest.raises(Exception, match="export.finetune.length: cannot read 'ten'"):
        finetune_steps("ten", 1000, 300)


@pytest.mark.slow
def test_a_cheaper_subnet_that_beats_the_shipped_one_is_named_by_export_and_summary(planted, capsys):
    run = api.load_run(planted / "tiny", device="cpu")
    low, high = (run.evaluator.evaluate(run.space.min(), "val").top1,
                 run.evaluator.evaluate(run.space.max(), "val").top1)
    assert high < low, "the plant did not make the max subnet worse than the min"
    search_dir = planted / "search"
    assert cli.main(["search", str(planted / "tiny"), "--searcher", "random", "--trials", "4", "--score", "macs",
                     "--max-macs", "100%", "--out", str(search_dir), "--device", "cpu", "--quiet"]) == 0
    best = api.resolve_arch(run.space, str(search_dir / "best.yaml"))
    assert run.space.macs(best) > run.space.macs(run.space.min())
    capsys.readouterr()
    assert cli.main(["export", str(planted / "tiny"), "--arch", str(search_dir / "best.yaml"), "--finetune", "0",
                     "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    min_id = arch_id(run.space.min())
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"cheaper min subnet {min_id}" in warning[0] and arch_id(best) in warning[0], err
    metrics = json.loads((planted / "tiny" / "export" / arch_id(best) / "metrics.json").read_text())
    shipped_val = run.evaluator.evaluate(best, "val").top1
    assert metrics["shipped"] == "inherited" and metrics["finetune"] is None
    assert metrics["val_top1"] == pytest.approx(shipped_val)
    cheaper_min = next(c for c in metrics["cheaper"] if c["source"] == "min subnet")
    assert cheaper_min["arch_id"] == min_id and cheaper_min["val_top1"] == pytest.approx(low)
    assert cheaper_min["test_top1"] == pytest.approx(run.evaluator.evaluate(run.space.min(), "test").top1)
    assert cli.main(["summary", str(search_dir)]) == 0
    out = capsys.readouterr().out
    assert f"shipped: {arch_id(best)}" in out and "inherited weights" in out, out
    assert f"warning: the shipped {arch_id(best)}" in out and min_id in out, out


def test_no_warning_when_the_shipped_subnet_is_the_most_accurate(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    run = api.load_run(runs / "tiny", device="cpu")
    result = api.export_subnet(run, "min", out=tmp_path / "min", finetune=FinetuneConfig(length=0))
    assert result.warning is None and result.record["cheaper"] == []


@pytest.mark.slow
def test_the_finetune_raises_a_planted_undertrained_subnet(planted):
    run = api.load_run(planted / "tiny", device="cpu")
    top = run.space.max()
    inherited = run.evaluator.evaluate(top, "val").top1
    tuned = finetune_subnet(run, top, FinetuneConfig(length=30, lr=0.05), progress=False)
    assert tuned.val_top1 > inherited + 0.05, (inherited, tuned.val_top1)
    assert tuned.record["steps"] == 30 and tuned.record["resumed_from"] == 0
    # the run itself is untouched: the supernet still measures the planted accuracy
    assert run.evaluator.evaluate(top, "val").top1 == inherited


@pytest.mark.slow
def test_a_killed_finetune_resumes_without_repeating_saved_steps_and_gives_the_same_weights(trained, tmp_path,
                                                                                           monkeypatch):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    run = api.load_run(runs / "tiny", device="cpu")
    arch, settings = run.space.max(), FinetuneConfig(length=6, lr=0.05)
    straight = finetune_subnet(run, arch, settings, progress=False, save_every_steps=2)
    real_step = standalone.train_step
    calls = kill_standalone_at(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        finetune_subnet(run, arch, settings, progress=False, save_every_steps=2)
    assert partial_path(run, arch, 6, settings).is_file()
    calls.clear()
    monkeypatch.setattr(standalone, "train_step", lambda *a, **k: (calls.append(1), real_step(*a, **k))[1])
    resumed = finetune_subnet(run, arch, settings, progress=False, save_every_steps=2)
    assert resumed.record["resumed_from"] == 4 and len(calls) == 2     # steps 4 and 5 only
    assert not partial_path(run, arch, 6, settings).exists()
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert (resumed.val_top1, resumed.test_top1) == (straight.val_top1, straight.test_top1)


def test_a_finetune_of_another_run_step_or_settings_never_resumes_it(trained, tmp_path):
    run = api.load_run(copy_run(trained, "tiny", tmp_path / "runs") / "tiny", device="cpu")
    arch = run.space.max()
    assert finetune_module.finetune_recipe(run, 6, FinetuneConfig(length=6)).train.optimizer.lr == \
        run.config.train.optimizer.lr      # no rate given: the run's own
    base = partial_path(run, arch, 6, FinetuneConfig(length=6))
    assert base != partial_path(run, arch, 6, FinetuneConfig(length=6, lr=0.5))
    assert base != partial_path(api.load_run(run.dir.root, checkpoint="best.pt", device="cpu"), arch, 6,
                                FinetuneConfig(length=6))


@pytest.mark.slow
def test_a_finetuned_export_records_what_it_shipped_and_ships_it(trained, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    run = api.load_run(runs / "tiny", device="cpu")
    arch = run.space.max()
    result = api.export_subnet(run, arch, out=tmp_path / "tuned", finetune=FinetuneConfig(length=4, lr=0.05),
                               progress=False)
    metrics = json.loads((tmp_path / "tuned" / "metrics.json").read_text())
    assert metrics["shipped"] == "finetuned" and metrics["checked_against"] == "finetuned model"
    assert metrics["finetune"]["steps"] == 4 and metrics["finetune"]["fraction_of_run"] == pytest.approx(4 / 8)
    assert metrics["finetune"]["lr"] == 0.05 and metrics["finetune"]["distill"] is False
    assert metrics["inherited"]["val_top1"] == pytest.approx(run.evaluator.evaluate(arch, "val").top1)
    assert [c["source"] for c in metrics["cheaper"]][:1] == ["min subnet"]
    # the saved weights are the fine-tuned ones: they differ from the inherited export and the
    # program computes what they compute; their val top-1, measured again, is the record's
    static = run.export_model(arch)
    inherited_weights = {k: v.clone() for k, v in static.state_dict().items()}
    static.load_state_dict(load_file(tmp_path / "tuned" / "weights.safetensors"))
    assert any(not torch.equal(inherited_weights[k], v) for k, v in static.state_dict().items())
    static.eval()
    size = run.space.input_size(arch)
    x = torch.randn(3, run.space.in_chans, size, size, generator=torch.Generator().manual_seed(2))
    program = torch.export.load(tmp_path / "tuned" / "model.pt2").module()
    with torch.no_grad():
        assert torch.allclose(program(x), static(x), atol=1e-5)
    again = finetune_module.measure(run, static, size)[0].top1    # recalibrates again: same images, same stats
    assert again == pytest.approx(result.val_top1) == pytest.approx(metrics["val_top1"])


def test_finetune_errors_name_the_flag_or_key(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    one_line_error(capsys, ["export", str(runs / "tiny"), "--arch", "max", "--finetune", "5x", "--device", "cpu"],
                   "--finetune", "5x")
    one_line_error(capsys, ["export", str(runs / "tiny"), "--arch", "max", "--finetune", "10", "--finetune-lr", "0",
                            "--device", "cpu"], "--finetune-lr")
    config = tmp_path / "bad.yaml"
    config.write_text("space: {name: cell201}\nexport: {finetune: {length: ten}}\n")
    one_line_error(capsys, ["space", str(config)], "export.finetune.length", "ten")


def test_auto_optimises_what_the_export_ships_and_the_search_line_says_which(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    common = ["search", str(runs / "tiny"), "--searcher", "random", "--trials", "2", "--device", "cpu", "--quiet"]
    # the tiny config has no export section: the export ships the inherited weights
    assert cli.main([*common, "--out", str(tmp_path / "inherited")]) == 0
    out = capsys.readouterr()
    summary = json.loads((tmp_path / "inherited" / "summary.json").read_text())
    assert summary["score"] == "supernet" and "inherited accuracy" in summary["optimised_for"]
    assert "optimised for inherited accuracy, measured by the supernet" in out.out, out.out
    assert "the export ships the inherited weights" in out.err
    # a fine-tuned export: auto predicts accuracy after training, as without an export section it did
    assert cli.main([*common, "--ships", "finetuned", "--out", str(tmp_path / "finetuned")]) == 0
    out = capsys.readouterr()
    summary = json.loads((tmp_path / "finetuned" / "summary.json").read_text())
    assert summary["score"] != "supernet", summary["score"]
    assert summary["optimised_for"] == f"accuracy after training alone, predicted by {summary['score']} (the export fine-tunes)"
    assert f"optimised for {summary['optimised_for']}" in out.out
    assert cli.main(["summary", str(tmp_path / "finetuned")]) == 0
    assert f"optimised for {summary['optimised_for']}" in capsys.readouterr().out


def test_the_config_decides_what_auto_optimises(trained, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    config = runs / "tiny" / "config.yaml"
    text = config.read_text()
    assert "finetune: {length: 0," in text
    config.write_text(text.replace("finetune: {length: 0,", "finetune: {length: 10%,"))   # editable after training
    run = api.load_run(runs / "tiny", device="cpu")
    result = api.search(run, "random", trials=2, out=tmp_path / "s", progress=False)
    assert result.score != "supernet" and "(the export fine-tunes)" in result.optimised_for


def test_a_distilled_finetune_learns_from_the_max_subnet_and_says_so(trained, tmp_path, monkeypatch):
    run = api.load_run(copy_run(trained, "tiny", tmp_path / "runs") / "tiny", device="cpu")
    seen = []
    real_step = standalone.train_step

    def spy(*args, **kwargs):
        seen.append(args[6] if len(args) > 6 else kwargs.get("soft_targets"))
        return real_step(*args, **kwargs)

    monkeypatch.setattr(standalone, "train_step", spy)
    tuned = finetune_subnet(run, run.space.min(), FinetuneConfig(length=3, lr=0.05, distill=True), progress=False)
    assert tuned.record["distill"] is True and len(seen) == 3
    for targets in seen:      # the max subnet's probabilities, one row per image
        assert targets is not None and torch.allclose(targets.sum(1), torch.ones(len(targets)), atol=1e-5)


@pytest.mark.parametrize("has_bf16", [True, False])
def test_the_finetune_takes_bf16_where_auto_chooses_it_and_records_it(trained, tmp_path, monkeypatch, has_bf16):
    """The fine-tune is not a ground truth: under `train.accelerate: auto` it runs the bf16 rule
    (here made to hold for the tiny run's network and this CPU) and its record says the precision."""
    from nas.engine import precision

    run = api.load_run(copy_run(trained, "tiny", tmp_path / "runs") / "tiny", device="cpu")
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    monkeypatch.setattr(precision, "dense_convolutions_with_bn", lambda model: True)
    autocast, real_autocast = [], torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: autocast.append(k) or real_autocast(*a, **k))
    tuned = finetune_subnet(run, run.space.min(), FinetuneConfig(length=2, lr=0.05), progress=False)
    assert tuned.record["precision"] == ("bf16" if has_bf16 else "fp32")
    assert autocast == ([{"dtype": torch.bfloat16}] * 2 if has_bf16 else [])
