"""`nas fidelity` on tiny real-data runs: outputs, statistics, resume, workers, shared ground truth."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from estimators import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES, Estimator, canonical_spec
from estimators.defaults import default_score
from nas import api, cli
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.core.registry import ESTIMATORS
from nas.core.rng import derive_seed
from nas.engine.data.build import build_source
from nas.engine.data.datasets import load_dataset
from nas.engine.evaluator import Evaluator
from nas.engine.fidelity import stage as fidelity_stage
from nas.engine.fidelity.rank_stats import macs_terciles, top_k_overlap
from nas.engine.fidelity.recipe import load_recipe
from nas.engine.fidelity.standalone import train_standalone
from tests.cli.test_cli_runs import _one_line_error
from tests.support.safety import copy_run, folder_digests, read_only, wait_for
from tests.engine.fidelity.test_rank_stats import brute_rho, brute_tau_b, brute_within_bin_tau
from tests.support.tiny import tiny_config


def _train(runs: Path, name: str, **kwargs) -> Path:
    api.train(load_config(tiny_config(steps=8, **kwargs)), name=name, runs_dir=runs, progress=False)
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return _train(tmp_path_factory.mktemp("runs"), "tiny")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(records):
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in records]


def _standalone(records):
    return {r["arch_id"]: r["standalone_test_top1_seeds"] for r in records}


@pytest.mark.slow
def test_outputs_statistics_and_a_fresh_standalone_model(runs, capsys):
    code = cli.main(["fidelity", "tiny", "--runs-dir", str(runs), "--archs", "4", "--epochs", "1", "--seeds", "2",
                     "--json", "--quiet"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    run = api.load_run("tiny", runs)
    out = next((runs / "tiny" / "fidelity").glob("n4-e1-k2-*"))
    assert json.loads((out / "summary.json").read_text()) == printed
    records = _lines(out / "results.jsonl")
    selected = printed["arch_ids"]
    assert sorted(r["arch_id"] for r in records) == sorted(selected) and len(selected) == 4
    assert arch_id(run.space.min()) in selected and arch_id(run.space.max()) in selected
    by_id = {r["arch_id"]: r for r in records}
    ordered = [by_id[i] for i in selected]
    shared = [r["supernet_test_top1"] for r in ordered]
    alone = [r["standalone_test_top1"] for r in ordered]
    assert printed["kendall_tau"] == pytest.approx(brute_tau_b(shared, alone))
    assert printed["spearman_rho"] == pytest.approx(brute_rho(shared, alone))
    seeds = [[r["standalone_test_top1_seeds"][k] for r in ordered] for k in (0, 1)]
    assert printed["seed_kendall_tau"] == pytest.approx(brute_tau_b(*seeds))
    assert printed["top_k"] == 1 and sum(b["archs"] for b in printed["bins"]) == 4
    for r in ordered:
        assert r["standalone_test_top1"] == pytest.approx(sum(r["standalone_test_top1_seeds"]) / 2)
        assert r["gap_points"] == pytest.approx(100 * (r["standalone_test_top1"] - r["supernet_test_top1"]), abs=1e-3)
    low = by_id[arch_id(run.space.min())]
    assert low["supernet_test_top1"] == api.evaluate(run, run.space.min(), "test").top1
    assert (out / "scatter.png").read_bytes()[:4] == b"\x89PNG" and list((out / "tb").glob("events.*"))
    # the standalone result is a fresh supernet's export trained alone, not the run's weights
    truth = Path(printed["ground_truth"])
    assert len(list(truth.glob("*-s[01].json"))) == 8 and truth.is_relative_to(runs / "tiny" / "fidelity")
    recipe = load_recipe(run.config, epochs=1)
    model = api.standalone_model(run.config, run.space.min(), derive_seed(1, "standalone-init", low["arch_id"]))
    d = recipe.data
    splits = load_dataset(d.name, d.root, d.val_size, d.train_size, d.split_seed, d.image_size)
    again = train_standalone(model, recipe, splits, 1, resolution=run.space.input_size(run.space.min()))
    assert again.test_top1 == low["standalone_test_top1_seeds"][1]


@pytest.mark.slow
def test_standalone_batches_come_from_the_recipes_data_source():
    """Streamed batches are the in-memory ones (same trained weights); mixup/cutmix reach the
    standalone loop like the supernet's (other weights)."""
    config = load_config(tiny_config())
    recipe = load_recipe(config, epochs=1)
    recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, epochs=None, steps=4))
    arch = api.build_space(config).min()

    def trained(data_overrides: dict, **augment):
        data = dataclasses.replace(recipe.data, augment=dataclasses.replace(recipe.data.augment, **augment),
                                   **data_overrides)
        model = api.standalone_model(config, arch, 7)
        result = train_standalone(model, dataclasses.replace(recipe, data=data), build_source(data), 0,
                                  resolution=api.build_space(config).input_size(arch))
        return result, {name: p.detach().clone() for name, p in model.named_parameters()}

    (memory, weights), (streamed, streamed_weights) = trained({}), trained({"in_memory": False, "workers": 0})
    assert weights.keys() == streamed_weights.keys()
    assert all(torch.equal(weights[k], streamed_weights[k]) for k in weights)
    assert streamed.test_top1 == pytest.approx(memory.test_top1, abs=2e-3)   # resized after normalising
    _, mixed_weights = trained({}, mixup_alpha=0.8)
    assert not all(torch.equal(weights[k], mixed_weights[k]) for k in weights)


@pytest.mark.slow
def test_killed_run_resumes_arch_by_arch(runs, tmp_path):
    def measure():
        return api.fidelity("tiny", runs_dir=runs, archs=3, epochs=1, out=tmp_path / "out",
                            ground_truth_dir=tmp_path / "truth", progress=False)

    first = measure()
    assert first.new == 3
    results = tmp_path / "out" / "results.jsonl"
    kept, lost, _ = _lines(results)      # the third stays in the ground truth
    results.write_text(json.dumps(kept) + "\n" + json.dumps(lost)[:30])     # killed while appending
    (tmp_path / "out" / "summary.json").unlink()
    truth = Path(first.summary["ground_truth"])
    (truth / f"{lost['arch_id']}-s0.json").unlink()                          # killed while training it
    second = measure()
    assert second.new == 1                      # only `lost` is trained again; `cached` comes from the cache
    assert _lines(results)[0] == kept and len(_lines(results)) == 3
    assert _untimed(second.records) == _untimed(first.records)
    assert _untimed([second.summary]) == _untimed([first.summary])
    assert measure().new == 0


@pytest.fixture(scope="module")
def shared_truth(tmp_path_factory) -> tuple[Path, dict]:
    """A ground truth of the tiny space (min and max, 1 epoch), trained in this process."""
    folder = tmp_path_factory.mktemp("truth")
    return folder, api.ground_truth(load_config(tiny_config()), folder, archs=2, epochs=1, progress=False)


@pytest.mark.slow
def test_ground_truth_returns_a_typed_result_whose_json_is_plain(shared_truth):
    folder, truth = shared_truth
    assert isinstance(truth, api.GroundTruthResult) and folder in truth.dir.parents and truth.new == 2
    assert len(truth.records) == 2 and truth.seed_kendall_tau is None and truth.seed_spearman_rho is None  # one seed
    plain = json.loads(json.dumps(truth.to_json()))
    assert plain["dir"] == str(truth.dir) and plain["records"] == truth.records
    assert plain["recipe"] == truth.recipe.to_dict() and plain["recipe_digest"] == truth.recipe_digest
    assert list(plain) == ["dir", "recipe", "recipe_digest", "records", "seed_kendall_tau", "seed_spearman_rho",
                           "seed_within_bin_tau", "new"]


@pytest.mark.slow
def test_two_workers_give_the_numbers_of_one(runs, tmp_path, shared_truth):
    one_worker = shared_truth[1].records
    two = api.fidelity("tiny", runs_dir=runs, archs=2, epochs=1, workers=2, ground_truth_dir=tmp_path / "truth",
                       progress=False)
    assert two.new == 2 and _standalone(two.records) == _standalone(one_worker)


@pytest.mark.slow
def test_runs_on_one_space_share_the_ground_truth(runs, tmp_path, shared_truth):
    folder, alone = shared_truth
    other = _train(tmp_path, "seed1", seed=1, threads=1)
    first = api.fidelity("tiny", runs_dir=runs, archs=2, epochs=1, ground_truth_dir=folder, progress=False)
    second = api.fidelity("seed1", runs_dir=other, archs=2, epochs=1, ground_truth_dir=folder, progress=False)
    assert len(list(alone.dir.glob("*-s0.json"))) == 2 and first.new == second.new == 0
    assert _standalone(first.records) == _standalone(second.records) == _standalone(alone.records)
    assert [r["supernet_test_top1"] for r in first.records] != [r["supernet_test_top1"] for r in second.records]


@pytest.mark.slow
def test_a_grown_selection_reuses_the_trainings_of_the_one_it_extends(runs, tmp_path, shared_truth, capsys):
    folder, smaller = shared_truth
    shutil.copytree(folder, tmp_path / "truth")
    grown = api.ground_truth(load_config(tiny_config()), tmp_path / "truth", archs=3, epochs=1, extends=2,
                             progress=False)
    assert grown.new == 1 and len(grown.records) == 3
    assert {r["arch_id"]: r for r in smaller.records}.items() <= {r["arch_id"]: r for r in grown.records}.items()
    copy = copy_run(runs, "tiny", tmp_path / "runs")
    assert cli.main(["fidelity", "tiny", "--runs-dir", str(copy), "--archs", "3", "--extends", "2", "--epochs", "1",
                     "--ground-truth", str(tmp_path / "truth"), "--estimators", "macs", "--quiet", "--json",
                     "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["arch_ids"] == [r["arch_id"] for r in grown.records]
    folder, = (copy / "tiny" / "fidelity").glob("n3-e1-k1-*-ext2")      # another selection than --archs 3's
    assert json.loads((folder / "fidelity.json").read_text())["extends"] == "2"
    assert not list(tmp_path.glob("truth/*/*/*.lock")) and len(list(tmp_path.glob("truth/*/*/*-s0.json"))) == 3


@pytest.mark.slow
@pytest.mark.parametrize("space", ["vit", "cell201"])
def test_every_space_measures(tmp_path, space):
    _train(tmp_path, space, space=space)
    result = api.fidelity(space, runs_dir=tmp_path, archs=3, epochs=1, progress=False)
    run = api.load_run(space, tmp_path)
    assert result.new == 3 and result.records[0]["arch_id"] == arch_id(run.space.min())
    assert all(run.space.is_live(r["arch"]) for r in result.records)
    assert all(0 <= r["standalone_test_top1"] <= 1 and 0 <= r["supernet_test_top1"] <= 1 for r in result.records)
    assert not math.isnan(result.summary["gap_points_mean"])


@pytest.mark.parametrize("flags, needle", [
    (["--archs", "1"], "--archs: must be an integer >= 2 (the min and max subnets are always measured), got 1"),
    (["--epochs", "0"], "--epochs: must be an integer >= 1, got 0"),
    (["--workers", "0"], "--workers: must be an integer >= 1, got 0"),
    (["--seeds", "0"], "--seeds: must be an integer >= 1, got 0"),
    (["--archs", "100000"], "--archs: the space 'mobilenetv3' offers only"),
    (["--archs", "4", "--extends", "5"], "--extends: 5 is more than --archs 4: it names the smaller selection"),
    (["--extends", "1"], "--extends: must be an integer >= 2 (the min and max subnets are always measured), got 1"),
    (["--extends", "4-ext"], "--extends: '4-ext' is not a selection: M (the plain M-arch selection) or M-extK"),
])
def test_bad_arguments_exit_2_with_one_line(runs, capsys, flags, needle):
    _one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(runs), *flags], needle)


@pytest.mark.parametrize("text, needle", [
    ("train:\n  epocs: 2\n", "train.epocs: unknown key (did you mean 'epochs'?)"),
    ("space: {name: vit}\n", "space: unknown key; a recipe overrides train and/or data"),
    ("- 1\n- 2\n", "the top level must be a mapping of keys, got list"),
    ("train: 3\n", "train: expected a mapping, got 3"),
    ("data: {train_size: 0}\n", "data.train_size: must be >= 1 or null, got 0"),
])
def test_bad_recipes_exit_2_naming_the_file_and_key(runs, capsys, tmp_path, text, needle):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    _one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(runs), "--recipe", str(recipe)],
                    f"{recipe}: ", needle)
    _one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(runs), "--recipe", str(tmp_path / "none.yaml")],
                    "--recipe: ", "none.yaml: no such file")


def test_recipe_overrides_and_what_its_digest_ignores(tmp_path):
    config = load_config(tiny_config())
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text("train: {epochs: 2, optimizer: {lr: 0.02}}\ndata: {train_size: 512}\n")
    recipe = load_recipe(config, recipe_file)
    assert (recipe.train.epochs, recipe.train.steps, recipe.train.optimizer.lr) == (2, None, 0.02)
    assert recipe.train.optimizer.momentum == config.train.optimizer.momentum and recipe.data.train_size == 512
    assert recipe.train.seed == 0 and recipe.label_smoothing == 0.1
    assert load_recipe(config, recipe_file, 3).length() == "e3"
    same = [load_config(tiny_config(**extra)) for extra in ({"seed": 4}, {"threads": 1}, {"log_every": 3},
                                                           {"accelerate": "eager"}, {"accelerate": "compiled"})]
    assert {load_recipe(c, epochs=1).digest() for c in [config, *same]} == {load_recipe(config, epochs=1).digest()}
    assert load_recipe(config, epochs=2).digest() != load_recipe(config, epochs=1).digest()
    assert load_recipe(load_config(tiny_config(sampler="uniform")), epochs=1).label_smoothing == 0.1
    # how batches are read is not hashed, nor are augmentation options left at their defaults
    reading = load_config(tiny_config(), ["data.in_memory=false", "data.workers=0"])
    assert load_recipe(reading, epochs=1).digest() == load_recipe(config, epochs=1).digest()
    mixed = load_config(tiny_config(), ["data.augment.mixup_alpha=0.2"])
    assert load_recipe(mixed, epochs=1).digest() != load_recipe(config, epochs=1).digest()


@pytest.mark.slow
def test_search_by_a_real_supernet_evaluates_its_anchors_first_then_the_searchers_own_order(runs, tmp_path):
    """The sandwich rule trains max and min at every step, and a search by the supernet measures
    them first (an inherited export then never ships below its own min subnet); after them it
    evaluates what the searcher proposes, in its order: the records of an engine search of the
    same seed that is asked to evaluate the anchors first, and nothing else."""
    from nas.engine.searching.costs import Constraints
    from nas.engine.searching.loop import run_search
    from nas.engine.searching.request import SearchRequest

    run = api.load_run("tiny", runs)
    anchors = run.strategy.anchor_archs()
    assert [arch_id(a) for a in anchors] == [arch_id(run.space.max()), arch_id(run.space.min())]
    result = api.search(run, "random", max_macs="100%", trials=5, out=tmp_path / "search", progress=False,
                        score="supernet")     # not `auto`: other tests leave fidelity summaries in this run
    records = [r["arch_id"] for r in _lines(tmp_path / "search" / "results.jsonl")]
    assert records[:2] == [arch_id(run.space.canonical(a)) for a in anchors]
    budget = Constraints(max_macs=run.space.macs(run.space.max()))

    run_search(run.space, lambda arch: {"val_top1": run.evaluator.evaluate(arch, "val").top1},
               SearchRequest("random", tmp_path / "engine", None, 5, 0, constraints=budget, progress=False,
                             tensorboard=False, first=tuple(anchors)))
    assert records == [r["arch_id"] for r in _lines(tmp_path / "engine" / "results.jsonl")]
    assert result.val_top1 == max(r["val_top1"] for r in _lines(tmp_path / "search" / "results.jsonl"))
    shutil.rmtree(tmp_path / "search")


# -- processes: exit, signals, two measurements at once, writability ---------------------------
ROOT = Path(__file__).resolve().parents[3]


def _nas(*argv: str) -> subprocess.Popen:
    """`nas ARGV` in a new session (so a test can stop whatever it leaves behind)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "nas", *argv, "--device", "cpu"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True)


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _finish(proc: subprocess.Popen, bound_s: float) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `proc`, failing (and killing its session) when it
    outlives `bound_s` seconds."""
    try:
        out, err = proc.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"still running after {bound_s:.0f} s")
    return proc.returncode, out, err


@pytest.mark.slow
def test_a_streamed_data_run_exits_once_measured(tmp_path):
    """Kept DataLoader workers (they ignore SIGTERM) used to block the exit forever."""
    config = tiny_config(steps=2)
    config["data"].update(in_memory=False, workers=2, train_size=128, val_size=64)
    api.train(load_config(config), name="s", runs_dir=tmp_path, progress=False)
    proc = _nas("fidelity", "s", "--runs-dir", str(tmp_path), "--archs", "2", "--epochs", "1", "--workers", "1",
                "--json", "--quiet")
    code, out, err = _finish(proc, 240)
    assert code == 0, err
    assert json.loads(out)["archs"] == 2
    assert not [p for p in _descendants(proc.pid) if _alive(p)]


@pytest.mark.slow
def test_sigterm_stops_the_pool_workers_with_one_line(runs, tmp_path):
    proc = _nas("fidelity", "tiny", "--runs-dir", str(runs), "--archs", "3", "--epochs", "40", "--workers", "2",
                "--ground-truth", str(tmp_path / "truth"), "--out", str(tmp_path / "out"), "--quiet")
    claims = lambda: list((tmp_path / "truth").glob("*/*/*.lock"))   # noqa: E731
    wait_for(lambda: len(claims()) == 2, proc, "two trainings claimed")
    wait_for(lambda: sum("spawn_main" in _cmdline(p) for p in _descendants(proc.pid)) >= 2, proc, "two workers")
    workers = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    code, _, err = _finish(proc, 120)
    assert code == 143 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "SIGTERM: trainings in progress stopped" in err and "run the same command to resume" in err
    deadline = time.monotonic() + 30
    while [p for p in workers if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in workers if _alive(p)]
    assert not claims()                       # released on the way out
    assert not list((tmp_path / "truth").glob("*/*/*-s0.json"))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_two_measurements_at_once_split_the_trainings(runs, tmp_path):
    def measure():     # no zero-cost proxy: they seed torch's process-wide RNG, which threads share
        return api.fidelity("tiny", runs_dir=runs, archs=4, epochs=1, out=tmp_path / "out",
                            ground_truth_dir=tmp_path / "truth", progress=False, estimators="macs,params")

    with ThreadPoolExecutor(2) as pool:
        first, second = [f.result() for f in [pool.submit(measure), pool.submit(measure)]]
    assert first.new + second.new == 4          # each (arch, seed) trained once, by one of them
    assert _untimed(first.records) == _untimed(second.records)
    lines = _lines(tmp_path / "out" / "results.jsonl")
    assert sorted(r["arch_id"] for r in lines) == sorted(first.summary["arch_ids"])
    assert not list((tmp_path / "truth").glob("*/*/*.lock"))


@pytest.mark.slow
def test_two_commands_at_once_split_the_trainings(runs, tmp_path):
    argv = ["fidelity", "tiny", "--runs-dir", str(runs), "--archs", "4", "--epochs", "1", "--seeds", "2",
            "--ground-truth", str(tmp_path / "truth"), "--out", str(tmp_path / "out"), "--quiet"]
    procs = [_nas(*argv), _nas(*argv)]
    finished = [_finish(proc, 600) for proc in procs]
    assert all(code == 0 for code, _, _ in finished), [err for _, _, err in finished]
    now = [int(re.search(r"\((\d+) standalone trainings now\)", out).group(1)) for _, out, _ in finished]
    assert sum(now) == 8 and len(list((tmp_path / "truth").glob("*/*/*-s[01].json"))) == 8
    lines = _lines(tmp_path / "out" / "results.jsonl")
    assert len(lines) == 4 and len({r["arch_id"] for r in lines}) == 4
    assert not list((tmp_path / "truth").glob("*/*/*.lock"))


@pytest.mark.slow
def test_nothing_is_measured_or_created_where_it_cannot_write(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Evaluator, "evaluate", lambda *a, **k: pytest.fail("evaluated before the checks"))
    copy = copy_run(runs, "tiny", tmp_path / "copy")
    (tmp_path / "ro").mkdir()
    base = ["fidelity", "tiny", "--runs-dir", str(copy), "--archs", "2", "--epochs", "1", "--quiet"]
    before = folder_digests(tmp_path), sorted(tmp_path.rglob("*"))
    with read_only(tmp_path / "ro"):
        _one_line_error(capsys, [*base, "--ground-truth", str(tmp_path / "ro" / "gt")],
                        f"--ground-truth: cannot write in {tmp_path / 'ro'}")
        _one_line_error(capsys, [*base, "--out", str(tmp_path / "ro" / "out")], f"--out: cannot write in {tmp_path / 'ro'}")
    with read_only(copy / "tiny"):
        _one_line_error(capsys, base, f"RUN: cannot write in {copy / 'tiny'}")
    missing = tmp_path / "recipe.yaml"
    missing.write_text(f"data: {{root: {tmp_path / 'no-data'}}}\n")
    _one_line_error(capsys, [*base, "--recipe", str(missing)], "data.root: Fashion-MNIST not found")
    missing.unlink()
    assert (folder_digests(tmp_path), sorted(tmp_path.rglob("*"))) == before


# -- estimators reported beside the supernet -----------------------------------------------------
SCORED: list[list[str]] = []      # the arch ids each call of `test_counted` scored


@ESTIMATORS.register("test_reversed_macs")
class ReversedMacs(Estimator):
    """Test-only: the rank of an arch by fewest MACs among the archs scored together."""

    name, cheap, population = "test_reversed_macs", True, True

    def scores(self, archs, context):
        macs = [context.space.macs(a) for a in archs]
        return [float(sum(m > own for m in macs)) for own in macs]


@ESTIMATORS.register("test_counted")
class Counted(Estimator):
    """Test-only and not cheap (so never a default): params, recording which archs it scored."""

    name, cheap = "test_counted", False

    def scores(self, archs, context):
        SCORED.append([arch_id(a) for a in archs])
        return [float(context.space.params(a)) for a in archs]


@pytest.mark.slow
def test_every_estimator_is_reported_against_the_ground_truth(runs, tmp_path, capsys):
    code = cli.main(["fidelity", "tiny", "--runs-dir", str(runs), "--archs", "4", "--epochs", "1", "--seeds", "2",
                     "--out", str(tmp_path / "out"), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    stats = summary["estimators"]
    assert list(stats)[:3] == ["supernet", "macs", "params"] and "test_reversed_macs" in stats
    assert "test_counted" not in stats                  # not cheap: only when named
    default, _ = default_score(api.load_run("tiny", runs).space)      # what auto uses without this summary
    assert default in stats and canonical_spec(f"supernet+{default}") in stats
    records = [r for i in summary["arch_ids"] for r in _lines(tmp_path / "out" / "results.jsonl") if r["arch_id"] == i]
    alone = [r["standalone_test_top1"] for r in records]
    bins = list(macs_terciles([r["macs"] for r in records]))
    assert sorted(bins) == [0, 0, 1, 2]
    for name, row in stats.items():
        scores = [r["estimators"][name] for r in records]
        assert set(row) == {"archs", "kendall_tau", "kendall_tau_ci90", "within_bin_tau", "within_bin_tau_ci90",
                            "within_bin_pairs", "top_k_overlap"}
        assert row["kendall_tau"] == pytest.approx(brute_tau_b(scores, alone))
        assert row["within_bin_tau"] == pytest.approx(brute_within_bin_tau(scores, alone, bins))
        assert row["top_k_overlap"] == top_k_overlap(scores, alone, 1)
        for low, high in (row["kendall_tau_ci90"], row["within_bin_tau_ci90"]):
            assert -1 <= low <= high <= 1
        assert (tmp_path / "out" / f"scatter-{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"\n{name} " in printed
    assert [r["estimators"]["supernet"] for r in records] == [r["supernet_test_top1"] for r in records]
    assert [r["estimators"]["macs"] for r in records] == [float(r["macs"]) for r in records]
    assert stats["test_reversed_macs"]["kendall_tau"] == pytest.approx(-stats["macs"]["kendall_tau"])
    best = max(("macs", "params"), key=lambda n: stats[n]["within_bin_tau"])
    ours, theirs = stats["supernet"]["within_bin_tau"], stats[best]["within_bin_tau"]
    assert f"best free baseline ({best})" in summary["verdict"] and f"{ours - theirs:+.3f}" in summary["verdict"]
    assert ("does not beat" in summary["verdict"]) == (ours <= theirs)
    assert f"verdict: {summary['verdict']}" in printed
    assert summary["seed_within_bin_tau"] == pytest.approx(brute_within_bin_tau(
        *[[r["standalone_test_top1_seeds"][k] for r in records] for k in (0, 1)], bins))


def test_a_calibrated_model_no_better_than_chance_is_flagged():
    from nas.engine.fidelity.report import format_estimators

    def row(tau):
        return {"kendall_tau": tau, "kendall_tau_ci90": [tau - 0.2, tau + 0.2], "within_bin_tau": tau,
                "within_bin_tau_ci90": [tau - 0.3, tau + 0.3], "top_k_overlap": 0.5}

    summary = {"top_k": 4, "verdict": "v", "estimators": {"supernet": row(0.1), "calibrated": row(-0.583)}}
    assert format_estimators(summary).splitlines()[-1] == (
        "calibrated: leave-one-out tau -0.583 is no better than chance: on this ground truth the fitted model "
        "learns noise; do not rank with it (nas search --score calibrated)")
    summary["estimators"]["calibrated"] = row(0.4)
    assert format_estimators(summary).splitlines()[-1] == "verdict: v"


@pytest.mark.slow
def test_a_resumed_measurement_scores_only_what_is_missing(runs, tmp_path):
    def measure(estimators):
        return api.fidelity("tiny", runs_dir=runs, archs=3, epochs=1, out=tmp_path / "out",
                            ground_truth_dir=tmp_path / "truth", estimators=estimators, progress=False)

    first = measure("macs")
    assert list(first.summary["estimators"]) == ["supernet", "macs", "params"]
    SCORED.clear()
    second = measure("test_counted")
    assert second.new == 0 and SCORED == [[r["arch_id"] for r in first.records]]
    assert measure("test_counted,macs").summary["estimators"]["test_counted"] == \
        second.summary["estimators"]["test_counted"] and len(SCORED) == 1
    lines = _lines(tmp_path / "out" / "results.jsonl")
    assert len(lines) == 3 and all(set(r["estimators"]) >= {"supernet", "macs", "params", "test_counted"}
                                   for r in lines)
    assert [r["estimators"]["test_counted"] for r in lines] == [float(r["params"]) for r in lines]


def test_an_unknown_estimator_is_one_line_before_any_work(runs, capsys, monkeypatch):
    monkeypatch.setattr(fidelity_stage, "load_run", lambda *a, **k: pytest.fail("loaded the run before the check"))
    _one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(runs), "--estimators", "macs,parms"],
                    "--estimators: unknown estimator 'parms' (did you mean 'params'?)")
    _one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(runs), "--init-seeds", "0"],
                    "--init-seeds: must be an integer >= 1, got 0")


# -- what changes the numbers is recorded; the summary holds every estimator measured -----------
@pytest.mark.slow
def test_init_seeds_get_their_own_folder_and_are_recorded(runs, tmp_path, capsys):
    """Another --init-seeds never reuses the proxy scores of a measurement made with other init seeds."""
    copy = copy_run(runs, "tiny", tmp_path / "runs")
    truth = tmp_path / "truth"

    def measure(*flags):
        return cli.main(["fidelity", "tiny", "--runs-dir", str(copy), "--archs", "2", "--epochs", "1", "--estimators",
                         "naswot", "--ground-truth", str(truth), "--quiet", "--json", "--device", "cpu", *flags])

    assert measure() == 0 and measure("--init-seeds", "1") == 0
    capsys.readouterr()
    one, = (copy / "tiny" / "fidelity").glob("n2-e1-k1-*-i1")
    default, = [p for p in (copy / "tiny" / "fidelity").glob("n2-e1-k1-*") if p != one]
    assert one.name == f"{default.name}-i1"
    for folder, seeds in ((default, 3), (one, 1)):
        settings = json.loads((folder / "fidelity.json").read_text())
        summary = json.loads((folder / "summary.json").read_text())
        for recorded in (settings, summary):
            assert (recorded["init_seeds"], recorded["estimator_batches"], recorded["estimator_batch_size"],
                    recorded["selection_seed"]) == (seeds, ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE, 0)
    scores = [[r["estimators"]["naswot"] for r in _lines(folder / "results.jsonl")] for folder in (default, one)]
    run = api.load_run("tiny", copy)
    from estimators import EstimatorContext, build_estimator
    context = EstimatorContext(run.space, init_seeds=1, seed=0,
                               batches=run.data.sample_batches("train", ESTIMATOR_BATCHES,
                                                               ESTIMATOR_BATCH_SIZE, 0))
    archs = [r["arch"] for r in _lines(one / "results.jsonl")]
    assert scores[1] == pytest.approx(build_estimator("naswot").scores(archs, context))
    assert scores[0] != scores[1]
    # a folder given with --out holds one setting: another is one line, exit 2, nothing rewritten
    before = folder_digests(one)
    _one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(copy), "--archs", "2", "--epochs", "1",
                             "--estimators", "naswot", "--ground-truth", str(truth), "--out", str(one)],
                    f"{one}: measured with other settings (init_seeds differ")
    assert folder_digests(one) == before


@pytest.mark.slow
def test_a_folder_that_did_not_record_its_init_seeds_is_not_reused(runs, tmp_path, capsys):
    copy = copy_run(runs, "tiny", tmp_path / "runs")
    base = ["fidelity", "tiny", "--runs-dir", str(copy), "--archs", "2", "--epochs", "1", "--estimators", "macs",
            "--ground-truth", str(tmp_path / "truth"), "--out", str(tmp_path / "out")]
    assert cli.main([*base, "--quiet", "--device", "cpu"]) == 0
    settings = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    del settings["init_seeds"]               # as written before init seeds were recorded
    (tmp_path / "out" / "fidelity.json").write_text(json.dumps(settings))
    capsys.readouterr()
    _one_line_error(capsys, base, "measured with other settings (init_seeds not recorded, e.g.")


@pytest.mark.slow
def test_the_summary_holds_every_estimator_measured_on_its_ground_truth(runs, tmp_path):
    def measure(estimators):
        return api.fidelity("tiny", runs_dir=runs, archs=3, epochs=1, out=tmp_path / "out",
                            ground_truth_dir=tmp_path / "truth", estimators=estimators, progress=False)

    first = measure("test_counted")
    second = measure("test_reversed_macs")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary == json.loads(json.dumps(second.summary))
    assert list(summary["estimators"]) == ["supernet", "macs", "params", "test_reversed_macs", "test_counted"]
    assert summary["estimators"]["test_counted"] == first.summary["estimators"]["test_counted"]
    assert (tmp_path / "out" / "scatter-test_counted.png").is_file()
    assert "unscored" not in summary["estimators"]["test_counted"]


@pytest.mark.slow
def test_an_estimator_scored_on_some_archs_only_says_which(runs, tmp_path):
    def measure():
        return api.fidelity("tiny", runs_dir=runs, archs=3, epochs=1, out=tmp_path / "out",
                            ground_truth_dir=tmp_path / "truth", estimators="macs", progress=False)

    first = measure()
    results = tmp_path / "out" / "results.jsonl"
    lines = _lines(results)
    lines[0]["estimators"]["test_counted"] = 1.0        # e.g. a third process scored one arch, then was killed
    lines[1]["estimators"]["test_counted"] = 2.0
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = measure().summary
    row = summary["estimators"]["test_counted"]
    assert row["archs"] == 2 and row["unscored"] == [lines[2]["arch_id"]]
    assert f"test_counted: over the 2 archs it has a finite score of; none for {lines[2]['arch_id']}" in \
        api.format_fidelity_summary(summary).splitlines()
    assert row["kendall_tau"] == pytest.approx(brute_tau_b([1.0, 2.0], [r["standalone_test_top1"] for r in lines[:2]]))
    assert first.summary["estimators"].keys() == {"supernet", "macs", "params"}
