"""`nas generate` and `nas search --searcher generator` on a tiny shiftnas run, and the
feasibility of generated archs whatever the generator's weights."""
from __future__ import annotations

import contextlib
import json

import pytest
import torch

from nas import api, cli
from nas.core.arch import arch_id, read_arch_file
from nas.core.config import load_config
from nas.core.errors import ArchError, ConfigError, RunError
from nas.core.rng import python_rng, torch_generator
from supernets.base import StepIO
from supernets.samplers import StepFeedback
from supernets.shiftnas import ShiftNASOptions, ShiftNASSampler
from tests.support.safety import one_line_error, read_only
from tests.support.tiny import tiny_config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    data = tiny_config(sampler="shiftnas", distill="none", steps=8)
    data["strategy"]["sampler"].update(bins=4, update_every=4, warmup_epochs=0, table_size=200, table_fill=2,
                                       table_tries=20)
    api.train(load_config(data), name="shift", runs_dir=root, progress=False, device="cpu")
    return root


def _json(capsys, argv) -> dict:
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_writes_an_arch_within_the_budget_with_its_exact_macs(runs, capsys, tmp_path):
    space = api.load_run("shift", runs).space
    low, high = space.macs(space.min()), space.macs(space.max())
    for budget in ("0%", "30%", "60%", "100%", str(int((low + high) / 2))):
        out = tmp_path / f"{budget}.yaml"
        result = _json(capsys, ["generate", "shift", "--runs-dir", str(runs), "--max-macs", budget, "--out",
                                str(out), "--json"])
        arch = read_arch_file(out)
        assert arch == result["arch"] and result["file"] == str(out)
        assert result["macs"] == space.macs(arch) <= result["max_macs"]
    assert _json(capsys, ["generate", "shift", "--runs-dir", str(runs), "--max-macs", "0%", "--json"])["macs"] == low
    default = _json(capsys, ["generate", "shift", "--runs-dir", str(runs), "--max-macs", "50%", "--json"])
    assert default["file"] == str(runs / "shift" / "generate" / f"{default['arch_id']}.yaml")


def test_generate_returns_a_typed_result_whose_json_is_what_the_cli_prints(runs, capsys, tmp_path):
    run = api.load_run("shift", runs)
    result = api.generate(run, "50%", out=tmp_path / "a.yaml")
    assert isinstance(result, api.GenerateResult) and result.file == tmp_path / "a.yaml"
    assert read_arch_file(result.file) == result.arch and result.to_json()["file"] == str(result.file)
    printed = _json(capsys, ["generate", "shift", "--runs-dir", str(runs), "--max-macs", "50%", "--out",
                             str(tmp_path / "a.yaml"), "--json"])
    assert printed == json.loads(json.dumps(result.to_json()))
    assert list(printed) == ["arch", "arch_id", "macs", "params", "max_macs", "attempts", "shrunk", "file"]


def test_generate_rejects_a_budget_below_the_min_subnet_and_a_run_without_generator(runs, capsys):
    assert cli.main(["generate", "shift", "--runs-dir", str(runs), "--max-macs", "1K"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-macs: 1.00K is below the smallest subnet's MACs (54.48K)" in err[0]
    run = api.load_run("shift", runs)
    run.strategy.sampler.generator = None
    with pytest.raises(RunError, match="has no architecture generator"):
        api.generate(run, "50%")
    with pytest.raises(ConfigError, match="^searcher generator: the run has no architecture generator"):
        api.search(run, "generator", trials=1, progress=False, out=runs / "none")


@pytest.mark.parametrize("verb", ["generate", "search"])
@pytest.mark.parametrize("budget", ["1e400", "1e300G", "inf", "nan%"])
def test_an_infinite_budget_is_one_line_naming_the_flag(runs, capsys, tmp_path, verb, budget):
    searcher = ["--searcher", "generator", "--trials", "2", "--quiet"] if verb == "search" else []
    one_line_error(capsys, [verb, "shift", "--runs-dir", str(runs), "--max-macs", budget, "--out",
                            str(tmp_path / "out"), *searcher], "--max-macs:")
    assert list(tmp_path.iterdir()) == []


def test_an_infinite_budget_through_the_python_api_is_refused(runs):
    run = api.load_run("shift", runs)
    with pytest.raises(ConfigError, match="^max_macs: inf is not a finite amount"):
        api.generate(run, float("inf"))
    with pytest.raises(ConfigError, match="^max_params: inf is not a finite amount"):
        api.search(run, max_params=float("inf"), trials=1, progress=False)
    with pytest.raises(ConfigError, match="^max_latency_ms: must be a finite number, got inf"):
        api.search(run, max_latency_ms=float("inf"), trials=1, progress=False)


def test_generate_into_a_read_only_folder_is_refused_before_any_work(runs, capsys, tmp_path):
    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro"):
        err = one_line_error(capsys, ["generate", "shift", "--runs-dir", str(runs), "--max-macs", "50%", "--out",
                                      str(tmp_path / "ro" / "arch.yaml")], "--out: cannot write in",
                             str(tmp_path / "ro"))
    assert ".tmp" not in err and list((tmp_path / "ro").iterdir()) == []


def test_generated_archs_always_fit_even_from_an_untrained_generator():
    space = api.build_space(load_config(tiny_config()))
    trainer = ShiftNASSampler(space, ShiftNASOptions(bins=4, table_size=50), seed=3).generator
    low, high = space.macs(space.min()), space.macs(space.max())
    shrunk = 0
    for i in range(25):
        budget = low + (high - low) * i / 24
        arch, attempts, was_shrunk = trainer.generate(budget, seed=i, attempts=2)
        assert space.macs(arch) <= budget and 1 <= attempts <= 2
        shrunk += was_shrunk
    assert shrunk > 0                                   # the fallback was exercised
    with pytest.raises(ArchError, match="fits"):
        space.shrink(space.max(), low - 1)


def test_shrink_lowers_choices_until_the_arch_fits():
    space = api.build_space(load_config(tiny_config()))
    low, high = space.macs(space.min()), space.macs(space.max())
    for i in range(10):
        arch = space.sample(python_rng(i, "shrink"))
        budget = low + (high - low) * i / 10
        fitted = space.shrink(arch, budget)
        assert space.macs(fitted) <= budget
        choices = space.choices()
        assert all(choices[k].index(fitted[k]) <= choices[k].index(v) for k, v in space.canonical(arch).items())
        if space.macs(arch) <= budget:
            assert fitted == arch


def test_generator_searcher_evaluates_distinct_feasible_proposals_starting_with_generates_answer(runs, capsys):
    found = _json(capsys, ["search", "shift", "--runs-dir", str(runs), "--searcher", "generator", "--max-macs",
                           "50%", "--trials", "3", "--seed", "2", "--json", "--quiet"])
    lines = [json.loads(line) for line in (runs / "shift" / found["dir"].split("/shift/")[1] /
                                           "results.jsonl").read_text().splitlines()]
    generated = _json(capsys, ["generate", "shift", "--runs-dir", str(runs), "--max-macs", "50%", "--seed", "2",
                               "--json"])
    assert len(lines) == 3 and len({line["arch_id"] for line in lines}) == 3
    assert all(line["macs"] <= generated["max_macs"] for line in lines)
    # a search by the supernet (auto, for an inherited export) measures the anchors within the budget
    # first (the sandwich's min; its max breaks 50%); the generator's answer is its own first proposal
    space = api.load_run("shift", runs).space
    assert lines[0]["arch_id"] == arch_id(space.canonical(space.min()))
    assert lines[1]["arch"] == generated["arch"]


# -- the generator learns: cost, task gradient, budgets met without `shrink` -----------------------
def _trainer(**options):
    space = api.build_space(load_config(tiny_config()))
    return ShiftNASSampler(space, ShiftNASOptions(bins=4, table_size=50, **options), seed=3).generator


def _cost_error(trainer) -> float:
    """Mean |MACs - target| / MACs range of the most likely proposals, over fixed targets and noise."""
    low, high = trainer.cost.low, trainer.cost.high
    errors = [abs(trainer.space.macs(trainer.propose(target, torch_generator(seed, "probe"), sample=False)) - target)
              for target in (low + (high - low) * i / 10 for i in range(1, 11)) for seed in range(3)]
    return sum(errors) / len(errors) / (high - low)


def _fit_cost(trainer, steps: int) -> list[float]:
    """`steps` generator steps on the cost term alone (no supernet), targets over the whole range;
    returns the relative cost error of each step's sampled arch."""
    low, high = trainer.cost.low, trainer.cost.high
    errors = []
    for step in range(steps):
        generator = torch_generator(0, "fit", step)
        target = low + (high - low) * float(torch.rand(1, generator=generator))
        trainer.train_step(StepFeedback(step, [], []), target, generator)
        errors.append(abs(trainer.last_cost_error))
    return errors


def _no_shrink(space, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the shrink fallback was used")

    monkeypatch.setattr(space, "shrink", refuse)


@pytest.fixture(scope="module")
def fitted():
    """A generator fitted for 300 steps: its state, its cost error before, the logged errors."""
    trainer = _trainer()
    before = _cost_error(trainer)
    errors = _fit_cost(trainer, 300)
    return trainer.state_dict(), before, errors


@pytest.mark.slow
def test_generator_cost_error_falls_and_it_then_meets_budgets_without_the_shrink_fallback(fitted, monkeypatch):
    state, before, errors = fitted
    untrained, trainer = _trainer(), _trainer()
    assert _cost_error(untrained) == before
    trainer.load_state_dict(state)
    assert sum(errors[-50:]) < 0.7 * sum(errors[:50])      # the logged error of its sampled archs
    assert _cost_error(trainer) < 0.5 * before and _cost_error(trainer) < 0.1
    space = trainer.space
    _no_shrink(space, monkeypatch)
    _no_shrink(untrained.space, monkeypatch)
    low, high = trainer.cost.low, trainer.cost.high
    budgets = [low + (high - low) * f for f in (0.4, 0.6, 0.8, 1.0)]
    for i, budget in enumerate(budgets):
        arch, attempts, shrunk = trainer.generate(budget, seed=i, attempts=4)
        assert space.macs(arch) <= budget and not shrunk
    failed = 0                      # the same check fails for a generator that learnt nothing
    for i, budget in enumerate(budgets):
        try:
            untrained.generate(budget, seed=i, attempts=4)
        except AssertionError:
            failed += 1
    assert failed > 0


def test_the_task_gradient_reaches_the_generator_through_the_soft_choices():
    data = tiny_config(sampler="shiftnas", distill="none")
    data["strategy"]["sampler"].update(bins=4, table_size=50, table_fill=2, table_tries=20, cost_weight=0.0)
    strategy = api.build_strategy(load_config(data))
    trainer, supernet = strategy.sampler.generator, strategy.supernet
    supernet.train()
    generator = torch.Generator().manual_seed(0)
    batch = (torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator))
    io = StepIO(forward=supernet, pass_context=lambda final: contextlib.nullcontext(), all_reduce_mean=lambda t: t,
                batches=lambda split, count, key: [batch] * count)
    slots = strategy.sampler.slots(0)
    feedback = StepFeedback(0, slots, [0.0] * len(slots), None, io, strategy.subnet_for)
    target = 0.5 * (trainer.cost.low + trainer.cost.high)
    weights = {k: v.clone() for k, v in supernet.state_dict().items()}
    with contextlib.ExitStack() as restore:
        loss, _ = trainer.loss(feedback, restore, target, torch_generator(0, "task"))
        last = trainer.net.net[-1].weight
        grad = torch.autograd.grad(loss, last)[0]
    rows = dict(zip(trainer.keys, torch.split(grad, [len(v) for v in trainer.space.choices().values()])))
    soft = set(supernet.soft_keys())
    assert soft and soft < set(rows)
    assert any(rows[key].abs().sum() > 0 for key in soft)
    assert all(torch.all(rows[key] == 0) for key in set(rows) - soft)   # only the cost term reaches those
    assert all(torch.equal(v, weights[k]) for k, v in supernet.state_dict().items())
    before = [p.detach().clone() for p in trainer.net.parameters()]
    trainer.train_step(feedback, target, torch_generator(0, "task"))
    assert any(not torch.equal(p, b) for p, b in zip(trainer.net.parameters(), before))


# -- generator: train ---------------------------------------------------------------------------------
def test_generator_train_mode_proposes_every_random_slot_inside_its_drawn_bin_or_falls_back_to_the_table(
        fitted, monkeypatch):
    space = api.build_space(load_config(tiny_config()))
    sampler = ShiftNASSampler(space, ShiftNASOptions(bins=4, table_size=200, table_fill=2, table_tries=20,
                                                     num_random=3, generator="train", floor=0.5), seed=3)
    sampler.generator.load_state_dict(fitted[0])
    trained = []
    monkeypatch.setattr(sampler.generator, "train_step",
                        lambda feedback, target, generator: trained.append(sampler.generator.sample(target, generator)))
    generated = 0
    for step in range(20):
        slots = sampler.slots(step)
        assert [s.role for s in slots] == ["max", "random0", "random1", "random2", "min"]
        for i, slot in enumerate(slots[1:4]):
            b = sampler.draw_bin(step, i)
            arch, attempt = sampler.proposal(step, i)
            assert slot.arch == arch
            if attempt is not None:               # the generator's arch for a target inside bin b
                generated += 1
                assert sampler.table.bin_of(arch) == b
                assert arch == sampler.generator.sample(*sampler.generator_draw(step, i, attempt, b))
                low, high = sampler.table.bins.bounds(b)
                assert low <= sampler.generator_draw(step, i, attempt, b)[0] <= high
            else:                                 # the documented fallback: the table's arch for bin b
                assert arch == sampler.table.draw_in(b, python_rng(3, "shiftnas", step, i), sampler.options.tries)
        sampler.observe(StepFeedback(step, slots, [0.0] * len(slots)))
        if sampler.proposal(step, 0)[1] is not None:   # it learns from the arch the supernet trained
            assert trained[-1] == slots[1].arch
    assert generated > 0.5 * 60
    assert sampler.logs()["shiftnas/generator_share"] == sum(
        sampler.proposal(19, i)[1] is not None for i in range(3)) / 3
