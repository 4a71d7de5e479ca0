"""`nas generate` and `nas search --searcher generator` on a tiny shiftnas run, and the
feasibility of generated archs whatever the generator's weights."""
from __future__ import annotations

import json

import pytest

from nas import api, cli
from nas.core.arch import read_arch_file
from nas.core.config import load_config
from nas.core.errors import ArchError, ConfigError, RunError
from nas.core.rng import python_rng
from supernets.shiftnas import ShiftNASOptions, ShiftNASSampler
from tests.nas.tiny import tiny_config


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
    assert read_arch_file(result.file) == result.arch and result["file"] == str(result.file)
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
    with pytest.raises(ConfigError, match="--searcher generator: the run has no architecture generator"):
        api.search(run, "generator", trials=1, progress=False, out=runs / "none")


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
    proposals = [line for line in lines if not line.get("anchor")]     # the anchors (min here) come first
    assert len(proposals) < len(lines) and proposals[0]["arch"] == generated["arch"]
