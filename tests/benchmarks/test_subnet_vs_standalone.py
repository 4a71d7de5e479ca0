"""benchmarks/subnet_vs_standalone.py on the tiny run with a tiny recipe: each arch's supernet
test top-1 against `nas eval`'s, its standalone top-1 against the cached trainings, the gap."""
from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import subnet_vs_standalone
from nas import api
from nas.core.arch import arch_id
from tests.support.safety import copy_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compare():
    return subnet_vs_standalone


@pytest.mark.slow
def test_each_arch_is_scored_in_the_supernet_and_trained_alone(compare, trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("train:\n  epochs: 1\ndata:\n  train_size: 128\n")
    run = api.load_run("tiny", runs)
    middle = run.space.canonical(run.space.sample(random.Random(3)))
    arch_file = tmp_path / "best.yaml"
    arch_file.write_text(json.dumps({"arch": middle}))
    argv = ["tiny", "--runs-dir", str(runs), "--arch", "max", "--arch", str(arch_file), "--arch", "min",
            "--seeds", "2", "--recipe", str(recipe), "--ground-truth", str(tmp_path / "gt"), "--quiet"]
    report = compare.main(argv)
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(report))
    assert [line.split()[0] for line in out[1:4]] == ["max", str(arch_file)[-28:], "min"]

    folder = Path(report["ground_truth"])
    assert folder.parent.parent == tmp_path / "gt"
    expected = [run.space.max(), middle, run.space.min()]
    for row, arch in zip(report["archs"], expected):
        assert row["arch_id"] == arch_id(arch) and row["arch"] == arch
        assert (row["macs"], row["params"]) == run.space.costs(arch)
        assert row["supernet_test_top1"] == api.evaluate(run, arch, split="test").top1
        seeds = [json.loads((folder / f"{arch_id(arch)}-s{k}.json").read_text())["test_top1"] for k in (0, 1)]
        assert row["standalone_test_top1_seeds"] == seeds
        assert row["gap_points"] == pytest.approx(100 * (statistics.fmean(seeds) - row["supernet_test_top1"]),
                                                  abs=1e-3)
    assert report["trainings_now"] == 2 * len({arch_id(a) for a in expected})
    again = compare.main(argv)          # the trainings come from the cache
    assert again["trainings_now"] == 0 and again["archs"] == report["archs"]


@pytest.mark.slow
def test_a_missing_arch_file_is_one_line_naming_the_argument(trained, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    done = subprocess.run([sys.executable, "-m", "benchmarks.subnet_vs_standalone", "tiny", "--runs-dir", str(runs),
                           "--arch", str(tmp_path / "nope.yaml")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"subnet_vs_standalone: --arch: {tmp_path / 'nope.yaml'}: no such "
                                                "file (give max, min or a YAML/JSON arch file)"]
