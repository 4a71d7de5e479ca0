"""Ground-truth cache records are checked field by field on read: an invalid one is set aside and retrained."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from nas import api
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.engine.fidelity.ground_truth_records import Expected, record_problem
from tests.support.tiny import tiny_config

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, api.GroundTruthResult]:
    """A ground truth of the tiny space's min and max (1 epoch, 1 seed)."""
    folder = tmp_path_factory.mktemp("truth")
    return folder, api.ground_truth(load_config(tiny_config()), folder, archs=2, epochs=1, progress=False)


def _record() -> tuple[dict, Expected]:
    arch = {"a": 1}
    record = {"arch_id": arch_id(arch), "arch": arch, "seed": 1, "train_seed": 3, "macs": 100, "params": 10,
              "test_top1": 0.5, "test_top5": 0.9, "steps": 8, "seconds": 1.5, "threads": 1, "torch": "2.x"}
    return record, Expected(arch, 1, 3, 100, 10, 8)


@pytest.mark.parametrize("change, problem", [
    ({"macs": None}, "no 'macs'"),
    ({"test_top1": 1.5}, "'test_top1' must be a fraction in [0, 1], got 1.5"),
    ({"test_top1": float("nan")}, "'test_top1' must be a fraction in [0, 1], got nan"),
    ({"test_top5": -0.1}, "'test_top5' must be a fraction in [0, 1], got -0.1"),
    ({"test_top5": 0.4}, "'test_top5' 0.4 is below 'test_top1' 0.5"),
    ({"macs": "100"}, "'macs' must be an integer >= 1, got '100'"),
    ({"params": 0}, "'params' must be an integer >= 1, got 0"),
    ({"seed": True}, "'seed' must be an integer >= 0, got True"),
    ({"steps": 2.0}, "'steps' must be an integer >= 1, got 2.0"),
    ({"seconds": -1}, "'seconds' must be a finite number >= 0, got -1"),
    ({"threads": 0}, "'threads' must be an integer >= 1, got 0"),
    ({"arch": ["a"]}, "'arch' must be a mapping, got ['a']"),
    ({"arch": {"a": 2}}, "'arch' is another arch"),
    ({"arch_id": "0000000000"}, "'arch_id' is '0000000000', this file's (arch, seed) has "),
    ({"seed": 0}, "'seed' is 0, this file's (arch, seed) has 1"),
    ({"train_seed": 4}, "'train_seed' is 4, this file's (arch, seed) has 3"),
    ({"macs": 101}, "'macs' is 101, this file's (arch, seed) has 100"),
    ({"params": 11}, "'params' is 11, this file's (arch, seed) has 10"),
    ({"steps": 9}, "'steps' is 9, this file's recipe trains 8 steps"),
    ({"torch": 2}, "'torch' must be a string, got 2"),
    ({"memory_format": "nhwc"}, "'memory_format' must be 'channels_last' or 'contiguous', got 'nhwc'"),
    ({"compiled": 1}, "'compiled' must be true or false, got 1"),
    ({"precision": "fp16"}, "'precision' must be 'fp32' or 'bf16', got 'fp16'"),
])
def test_every_field_is_checked(change, problem):
    record, expected = _record()
    assert record_problem(record, expected) is None
    record.update(change)
    record = {k: v for k, v in record.items() if v is not None}
    assert record_problem(record, expected).startswith(problem)
    assert record_problem([record], expected) == "not a JSON object (list)"


def test_a_record_says_how_it_was_trained_and_older_ones_without_it_stay_valid(trained):
    folder, _ = trained
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*/*/*-s0.json"))]
    assert len(records) == 2
    # the tiny config: channels_last; MobileNetV3 (depthwise convolutions) is never compiled by auto
    assert all((r["memory_format"], r["compiled"]) == ("channels_last", False) for r in records)
    record, expected = _record()
    assert "compiled" not in record and record_problem(record, expected) is None
    for memory_format, compiled in (("contiguous", True), ("channels_last", False)):
        assert record_problem({**record, "memory_format": memory_format, "compiled": compiled},
                              dataclasses.replace(expected, compiled=compiled)) is None


def test_the_committed_ground_truths_are_valid():
    """The records shipped in benchmarks/ground_truth* pass the check against today's costs and lengths."""
    checked = 0
    for folder in sorted(REPO.glob("benchmarks/ground_truth*/*-*/*-*")):
        recipe = json.loads((folder / "recipe.json").read_text())
        space = api.build_space(_config_with_space(recipe["space"]))
        train, data = recipe["train"], recipe["data"]
        assert data["name"] == "fashion_mnist" and data["train_size"] is None   # 60,000 training images
        steps = train["steps"] or train["epochs"] * ((60_000 - data["val_size"]) // train["batch_size"])
        for path in sorted(folder.glob("*-s*.json")):
            record = json.loads(path.read_text())
            arch = space.canonical(record["arch"])
            macs, params = space.costs(arch)
            expected = Expected(arch, record["seed"], train["seed"] + record["seed"], macs, params, steps)
            assert record_problem(record, expected) is None, path
            checked += 1
    assert checked >= 150


def _config_with_space(space: dict):
    data = tiny_config()
    data["space"] = space
    return load_config(data)


def _corrupt(folder: Path, change) -> Path:
    path = sorted(folder.glob("*-s0.json"))[0]
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("name, change, problem", [
    ("missing", lambda r: r.pop("macs"), "no 'macs'"),
    ("out of range", lambda r: r.update(test_top1=1.5), "'test_top1' must be a fraction in [0, 1], got 1.5"),
    ("wrong type", lambda r: r.update(params=str(r["params"])), "'params' must be an integer >= 1, got '"),
    ("another length", lambda r: r.update(steps=r["steps"] + 1), "'steps' is "),
])
def test_an_invalid_record_is_set_aside_with_one_line_and_retrained(trained, tmp_path, capsys, name, change,
                                                                      problem):
    folder, first = trained
    copy = tmp_path / "truth"
    shutil.copytree(folder, copy)
    cache = copy / first.dir.relative_to(folder)
    path = _corrupt(cache, change)
    bad = path.read_text()
    capsys.readouterr()
    again = api.ground_truth(load_config(tiny_config()), copy, archs=2, epochs=1, progress=False)
    err = capsys.readouterr().err.strip()
    assert err == (f"{path}: invalid ground-truth record ({problem}" + err[len(f"{path}: invalid ground-truth record "
                                                                            f"({problem}"):])
    assert len(err.splitlines()) == 1 and err.endswith(f"; moved to {path.name}.invalid, training it again")
    assert again.new == 1 and (cache / f"{path.name}.invalid").read_text() == bad
    assert [r["standalone_test_top1"] for r in again.records] == [r["standalone_test_top1"] for r in first.records]
    assert json.loads(path.read_text())["macs"] == json.loads((folder / path.relative_to(copy)).read_text())["macs"]


def test_a_truncated_record_is_retrained_too(trained, tmp_path, capsys):
    folder, first = trained
    copy = tmp_path / "truth"
    shutil.copytree(folder, copy)
    path = sorted((copy / first.dir.relative_to(folder)).glob("*-s0.json"))[0]
    path.write_text(path.read_text()[:20])
    again = api.ground_truth(load_config(tiny_config()), copy, archs=2, epochs=1, progress=False)
    assert again.new == 1 and "not readable as JSON" in capsys.readouterr().err
    assert [r["standalone_test_top1"] for r in again.records] == [r["standalone_test_top1"] for r in first.records]


def test_a_finished_result_wins_over_the_claim_a_killed_process_left_beside_it(trained, tmp_path):
    """`kill -9` between writing a result and releasing its claim leaves both: the result is
    reused, the dead holder's claim (and saved state) removed; a live holder's claim is left."""
    import dataclasses

    from nas.core.processes import this_process
    from tests.core.test_processes import gone_pid

    folder, first = trained
    copy = tmp_path / "truth"
    shutil.copytree(folder, copy)
    results = sorted((copy / first.dir.relative_to(folder)).glob("*-s0.json"))
    dead, live = (path.with_suffix(".lock") for path in results)
    dead.write_text(f"{dataclasses.replace(this_process(), pid=gone_pid()).to_text()} token=killed\n")
    partial = results[0].with_name(results[0].stem + ".partial.pt")
    partial.write_bytes(b"state saved before the result")
    live.write_text(f"{this_process().to_text()} token=another-measurement\n")
    again = api.ground_truth(load_config(tiny_config()), copy, archs=2, epochs=1, progress=False)
    assert again.new == 0
    assert [r["standalone_test_top1"] for r in again.records] == [r["standalone_test_top1"] for r in first.records]
    assert not dead.exists() and not partial.exists()
    assert live.read_text().endswith("token=another-measurement\n")


def test_compiled_and_eager_trainings_are_kept_apart(trained):
    """A compiled training's numbers differ from an eager one's (by up to 0.5 points on short
    runs): a recipe that compiles never reuses an eager record, nor the other way round."""
    from nas.engine.fidelity.runner import recipe_ground_truth

    folder, first = trained
    config = load_config(tiny_config())
    space = api.build_space(config)
    archs = [space.min(), space.max()]

    def truth(accelerate: str):
        cfg = load_config({**tiny_config(), "train": {**tiny_config()["train"], "accelerate": accelerate}})
        return recipe_ground_truth(cfg, space, api.standalone_model, folder, None, 1)

    eager, compiled = truth("eager"), truth("compiled")
    assert eager.folder == compiled.folder == first.dir        # one recipe digest: same folder, other files
    assert all(eager.cached(a, 0) is not None and compiled.cached(a, 0) is None for a in archs)
    assert compiled.path(archs[0], 0) == first.dir / "compiled" / eager.path(archs[0], 0).name
    record, expected = _record()
    assert record_problem({**record, "compiled": True}, expected) == (
        "'compiled' is true, this file's training runs eager (compiled ones are kept in compiled/)")
    assert record_problem({**record, "compiled": False}, dataclasses.replace(expected, compiled=True)) == (
        "'compiled' is false, this file's training runs compiled")


@pytest.mark.parametrize("config, folder", [
    ("fashion_mnist_cell201", "cell201-1c4fd9d48cb1/9c00f91f87-e4"),
    ("fashion_mnist_mbv3", "mobilenetv3-e01b62e6a393/6a09cad91a-e5"),
    ("fashion_mnist_vit", "vit-754f655dbc9e/3bca9402ab-e8")])
def test_the_shipped_configs_still_name_their_committed_ground_truths(config, folder):
    """A setting added to a config (a space option at its default, an export section) must not
    move its standalone cache: the committed trainings would be silently orphaned and retrained."""
    from nas import api
    from nas.engine.fidelity.runner import recipe_ground_truth

    loaded = api.load_config(config)
    root = Path(__file__).resolve().parents[3] / "benchmarks" / "ground_truth"
    truth = recipe_ground_truth(loaded, api.build_space(loaded), api.standalone_model, root, None, None)
    assert truth.folder == root / folder and any(truth.folder.glob("*-s0.json"))


def test_ground_truths_stay_fp32_under_auto_and_bf16_ones_are_kept_apart(monkeypatch, tmp_path):
    """On a CPU with bf16 instructions `auto` still trains a ground truth of cell201 in fp32 (where
    the fp32 records are, reused as before); a recipe saying `train.precision: bf16` trains into
    bf16/; a record of one precision is never read as the other, and records older than the
    precision field count as their recipe's precision."""
    from nas.engine import precision
    from nas.engine.fidelity.ground_truth import train_task
    from nas.engine.fidelity.runner import recipe_ground_truth

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    configs = {precision: load_config(tiny_config(space="cell201", steps=2, precision=precision))
               for precision in ("fp32", "bf16")}
    space = api.build_space(configs["fp32"])
    arch = space.max()
    fp32, bf16 = (recipe_ground_truth(configs[p], space, api.standalone_model, tmp_path, None, None)
                  for p in ("fp32", "bf16"))
    assert fp32.path(arch, 0) == fp32.folder / f"{arch_id(arch)}-s0.json"
    assert bf16.path(arch, 0) == bf16.folder / "bf16" / f"{arch_id(arch)}-s0.json"
    records = {}
    for truth in (fp32, bf16):
        task = truth.task(arch, 0)
        task.path.parent.mkdir(parents=True)
        records[truth] = train_task(task)
        assert truth.cached(arch, 0) == records[truth]
    assert records[fp32]["precision"] == "fp32" and records[bf16]["precision"] == "bf16"
    fp32.path(arch, 0).write_text(json.dumps(records[bf16]))       # a bf16 record copied where fp32 ones live
    assert fp32.cached(arch, 0) is None
    wanted_fp32, wanted_bf16 = fp32.task(arch, 0).expected(), bf16.task(arch, 0).expected()
    assert record_problem(records[bf16], wanted_fp32) == (
        "'precision' is 'bf16', this file's training runs fp32 (bf16 ones are kept in bf16/)")
    assert record_problem(records[fp32], wanted_bf16) == "'precision' is 'fp32', this file's training runs bf16"
    older = {k: v for k, v in records[fp32].items() if k != "precision"}
    assert record_problem(older, wanted_fp32) is None       # before the field: its recipe's fp32
    older_bf16 = {k: v for k, v in records[bf16].items() if k != "precision"}
    assert record_problem(older_bf16, wanted_bf16) is None
