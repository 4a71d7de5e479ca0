"""benchmarks/fixed_members.py on the tiny run: the archs' inherited test top-1 as `nas eval`
measures it, a fine-tune of the given steps as `nas export --finetune` runs it, the teacher refused
on a run without one; and the evaluator forgetting its cache when weights change in place."""
from __future__ import annotations

import csv
import json
import random
from itertools import islice

import pytest
import torch

from benchmarks import fixed_members
from nas import api
from nas.core.arch import arch_id
from nas.core.errors import NasError
from tests.support.safety import copy_run


@pytest.mark.slow
def test_each_arch_then_min_and_max_inherited_as_nas_eval_measures_them(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    run = api.load_run("tiny", runs)
    middle = run.space.canonical(run.space.sample(random.Random(5)))
    arch_file = tmp_path / "member.json"
    arch_file.write_text(json.dumps(middle))
    out = tmp_path / "rows.csv"
    rows = fixed_members.main(["tiny", "--runs-dir", str(runs), "--arch", str(arch_file), "--out", str(out)])["rows"]
    assert [(r["label"], r["length"]) for r in rows] == [("member", "0"), ("min", "0"), ("max", "0")]
    for row, arch in zip(rows, (middle, run.space.min(), run.space.max())):
        assert row["arch_id"] == arch_id(arch) and row["macs"] == run.space.costs(arch)[0]
        assert row["test_top1"] == api.evaluate(run, arch, "test").top1
    with out.open() as f:
        assert [r["label"] for r in csv.DictReader(f)] == ["member", "min", "max"]
    assert capsys.readouterr().out.splitlines()[0].split()[:3] == ["tiny", "member", f"{middle_macs(run, middle)}M"]


@pytest.mark.slow
def test_a_fine_tune_runs_the_given_steps_and_leaves_the_run_s_weights_alone(trained, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    run = api.load_run("tiny", runs)
    inherited, tuned = islice(fixed_members.run_rows(run, ["max"], ["3"], with_teacher=False), 2)
    assert (inherited["length"], tuned["length"], tuned["steps"]) == ("0", "3", 3)
    assert tuned["test_top1"] != inherited["test_top1"] or tuned["val_top1"] != inherited["val_top1"]
    fresh = api.load_run("tiny", runs)     # an independent load: the fine-tune trained a copy
    assert inherited["test_top1"] == api.evaluate(fresh, "max", "test").top1 == api.evaluate(run, "max", "test").top1


def middle_macs(run, arch) -> str:
    return f"{run.space.costs(arch)[0] / 1e6:.2f}"


def test_a_teacher_is_refused_on_a_run_without_one(trained):
    run = api.load_run("tiny", trained)
    with pytest.raises(NasError, match="has no teacher") as caught:
        fixed_members.teacher_row(run)
    assert caught.value.param == "--teacher"


def test_the_evaluator_forgets_its_results_when_told_the_weights_changed(trained):
    run = api.load_run("tiny", trained)
    before = api.evaluate(run, "max", "val").top1
    with torch.no_grad():
        for p in run.strategy.supernet.parameters():
            p.zero_()
    assert api.evaluate(run, "max", "val").top1 == before       # cached: same step, same arch
    run.evaluator.forget()
    after = api.evaluate(run, "max", "val").top1
    assert after != before                                      # zero weights: one class everywhere
