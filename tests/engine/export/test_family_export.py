"""`nas export RUN --family DIR`: every member shipped as its one-budget export, resumably member by member."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from nas import api, cli
from nas.core.amounts import format_amount
from nas.core.arch import arch_id, write_arch_file
from nas.core.config import FinetuneConfig, load_config
from nas.engine.export import family as family_module
from nas.engine.export import family_record
from nas.engine.export import finetune as finetune_module
from nas.engine.untrained import untrained_run
from tests.support.family import plant_family
from tests.support.safety import copy_run, one_line_error

TUNE = FinetuneConfig(length=2)


@pytest.fixture(scope="module")
def planted(trained, tmp_path_factory) -> tuple[Path, Path]:
    """(runs folder holding a copy of `tiny`, a two-member family searched on it: 20% and 80% of MACs)."""
    root = tmp_path_factory.mktemp("family")
    runs = copy_run(trained, "tiny", root / "runs")
    plant_family(api.load_run(runs / "tiny", device="cpu"), root / "family", ("20%", "80%"))
    return runs, root / "family"


@pytest.fixture
def fresh(planted, tmp_path) -> tuple[Path, Path]:
    """A copy of the planted run and family that a test may export into."""
    runs, family = planted
    shutil.copytree(family, tmp_path / "family")
    return copy_run(runs, "tiny", tmp_path / "runs"), tmp_path / "family"


def member_dirs(family: Path) -> list[Path]:
    return [family / m["dir"] for m in json.loads((family / "family.json").read_text())["members"]]


def test_the_planted_members_differ_and_each_is_within_its_budget(planted):
    family = json.loads((planted[1] / "family.json").read_text())
    ids = [m["arch_id"] for m in family["members"]]
    assert len(set(ids)) == 2
    assert all(m["macs"] <= m["budget"] for m in family["members"])


@pytest.mark.slow
def test_a_killed_family_export_resumes_past_the_finished_member_and_ships_one_budget_exports(fresh, monkeypatch,
                                                                                             tmp_path):
    """A kill between members: the rerun keeps member 1 untouched and fine-tunes member 2 only; and
    each member's export is the one-budget export of its arch, byte for byte."""
    runs, family = fresh
    run = api.load_run(runs / "tiny", device="cpu")
    real_export, real_finetune = family_module.export_subnet, finetune_module.finetune_subnet
    exported = []

    def killed_before_the_second(*args, **kwargs):
        if exported:
            raise KeyboardInterrupt
        exported.append(real_export(*args, **kwargs))
        return exported[-1]

    monkeypatch.setattr(family_module, "export_subnet", killed_before_the_second)
    with pytest.raises(KeyboardInterrupt):
        api.export_family(run, family, TUNE, progress=False)
    assert not (family / api.FAMILY_EXPORT).exists()
    first = exported[0].dir
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in first.iterdir()}
    monkeypatch.setattr(family_module, "export_subnet", real_export)
    tuned = []
    def counted(run, arch, *args, **kwargs):
        tuned.append(run.space.canonical(arch))
        return real_finetune(run, arch, *args, **kwargs)

    monkeypatch.setattr(finetune_module, "finetune_subnet", counted)
    result = api.export_family(run, family, TUNE, progress=False)
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in first.iterdir()} == before
    second = member_dirs(family)[1] / "best.yaml"
    assert [api.resolve_arch(run.space, str(second))] == tuned
    assert [m["kept"] for m in result.members] == [True, False]

    alone = api.export_subnet(run, str(second), out=tmp_path / "alone", finetune=TUNE, progress=False)
    member = Path(result.members[1]["export_dir"])
    assert member == runs / "tiny" / "export" / alone.arch_id
    assert (member / "weights.safetensors").read_bytes() == (alone.dir / "weights.safetensors").read_bytes()
    ours, theirs = (json.loads((d / "metrics.json").read_text()) for d in (member, alone.dir))
    for record in (ours, theirs):
        record["finetune"].pop("seconds")
    assert ours == theirs
    written = json.loads((family / api.FAMILY_EXPORT).read_text())
    assert [m["arch_id"] for m in written["members"]] == [m["arch_id"] for m in result.members]
    assert [m["test_top1"] for m in written["members"]] == [
        json.loads((Path(m["export_dir"]) / "metrics.json").read_text())["test_top1"] for m in result.members]
    assert written["step"] == run.step and written["finetune"]["steps"] == 2


def test_an_export_counts_as_finished_only_with_the_same_arch_step_run_and_fine_tune(trained, tmp_path):
    run = api.load_run(trained / "tiny", device="cpu")
    wanted = family_module.finetune_settings(TUNE, run)
    record = {"arch_id": "a", "step": run.step, "run": str(trained / "tiny"),
              "finetune": {"steps": 2, "lr": run.config.train.optimizer.lr, "distill": False, "seed": 0}}
    variants = {"same": {}, "arch": {"arch_id": "b"}, "step": {"step": run.step - 1}, "run": {"run": str(tmp_path)},
                "steps": {"finetune": {**record["finetune"], "steps": 3}}, "inherited": {"finetune": None},
                "moved": {"run": str(tmp_path), "weights": run.weights},
                "retrained": {"weights": "sha256:" + "0" * 64}}
    kept = {}
    for name, change in variants.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({**record, **change}))
        kept[name] = family_module.finished(tmp_path / name, "a", run, wanted) is not None
    assert kept == {"same": True, "arch": False, "step": False, "run": False, "steps": False, "inherited": False,
                    "moved": True, "retrained": False}
    no_tune = family_module.finetune_settings(FinetuneConfig(length=0), run)
    assert family_module.finished(tmp_path / "inherited", "a", run, no_tune) is not None
    assert family_module.finished(tmp_path / "same", "a", run, no_tune) is None


def test_a_damaged_family_json_is_one_line(fresh, capsys):
    runs, family = fresh
    (family / "family.json").write_text('{"kind": "family", "members": [{"index": 1}]}')
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family)], "--family:", "family.json",
                   "damaged record: ")
    (family / "family.json").write_text("{not json")
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family)], "--family:", "cannot read it")


def test_an_unfinished_family_is_one_line(fresh, capsys):
    runs, family = fresh
    data = json.loads((family / "family.json").read_text())
    data["members"] = data["members"][:1]
    (family / "family.json").write_text(json.dumps(data))
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family)], "--family:",
                   "unfinished (1 of 2 members searched)", "run the same family search again")


def test_a_family_searched_at_another_step_is_refused_before_any_training(fresh, capsys, monkeypatch):
    runs, family = fresh
    data = json.loads((family / "family.json").read_text())
    data["source"]["step"] += 1
    (family / "family.json").write_text(json.dumps(data))
    monkeypatch.setattr(finetune_module, "finetune_subnet", lambda *a, **k: pytest.fail("trained"))
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family), "--finetune", "2"],
                   "--family:", f"at step {data['source']['step']}", "this run holds step 8")


def test_a_missing_member_arch_file_is_one_line(fresh, capsys):
    runs, family = fresh
    (member_dirs(family)[1] / "best.yaml").unlink()
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family)], "--family: member 2:",
                   "best.yaml is missing")
    assert not (runs / "tiny" / "export").exists()


NO_TUNE = FinetuneConfig(length=0)


def test_a_kept_member_points_its_shipped_json_at_the_family_export_not_at_another(fresh, tmp_path):
    """An `--arch MEMBER/best.yaml --out elsewhere` export between two family exports: the kept
    member's shipped.json names the family's export folder again, so the summary shows what
    family_export.json records."""
    runs, family = fresh
    run = api.load_run(runs / "tiny", device="cpu")
    api.export_family(run, family, NO_TUNE, progress=False)
    first = member_dirs(family)[0]
    api.export_subnet(run, str(first / "best.yaml"), out=tmp_path / "elsewhere", finetune=NO_TUNE, progress=False)
    assert json.loads((first / "shipped.json").read_text())["export_dir"] == str(tmp_path / "elsewhere")
    result = api.export_family(run, family, NO_TUNE, progress=False)
    assert result.members[0]["kept"]
    assert json.loads((first / "shipped.json").read_text())["export_dir"] == result.members[0]["export_dir"]
    rows = api.summarise_family(family)["members"]
    assert rows[0]["export_dir"] == result.members[0]["export_dir"]


def test_a_kept_members_damaged_shipped_json_is_replaced_by_the_export_it_keeps(fresh):
    runs, family = fresh
    run = api.load_run(runs / "tiny", device="cpu")
    api.export_family(run, family, NO_TUNE, progress=False)
    first = member_dirs(family)[0]
    (first / "shipped.json").write_text('{"arch_id": 3}')
    result = api.export_family(run, family, NO_TUNE, progress=False)
    assert json.loads((first / "shipped.json").read_text())["export_dir"] == result.members[0]["export_dir"]


def test_a_family_exported_onto_another_run_at_the_same_step_is_refused_before_any_training(fresh, tmp_path, capsys,
                                                                                           monkeypatch):
    """A run trained again with another seed holds the same step and space, not the same weights."""
    runs, family = fresh
    run = api.load_run(runs / "tiny", device="cpu")
    other = tmp_path / "other"
    api.train(load_config({**run.config.to_dict(), "train": {**run.config.to_dict()["train"], "seed": 7}}),
              name="tiny", runs_dir=other, progress=False)
    assert api.load_run(other / "tiny", device="cpu").step == run.step
    capsys.readouterr()
    monkeypatch.setattr(finetune_module, "finetune_subnet", lambda *a, **k: pytest.fail("trained"))
    one_line_error(capsys, ["export", str(other / "tiny"), "--family", str(family), "--finetune", "0"],
                   "--family:", "was searched on the weights", "another run, or the run trained again")
    assert not (other / "tiny" / "export").exists()


def test_a_moved_run_exports_its_family_and_the_summary_shows_it(fresh, tmp_path):
    """The run folder moved after the search: the same weights, so the same run."""
    runs, family = fresh
    moved = tmp_path / "moved"
    shutil.move(runs / "tiny", moved)
    result = api.export_family(api.load_run(moved, device="cpu"), family, NO_TUNE, progress=False)
    rows = api.summarise_family(family)["members"]
    assert [row["exported"] for row in rows] == [True, True]
    assert [row["export_dir"] for row in rows] == [m["export_dir"] for m in result.members]


def test_an_edited_best_yaml_is_refused_and_so_is_an_arch_above_the_members_budget(fresh, capsys, monkeypatch):
    runs, family = fresh
    run = api.load_run(runs / "tiny", device="cpu")
    first = member_dirs(family)[0]
    write_arch_file(run.space.max(), first / "best.yaml")
    monkeypatch.setattr(finetune_module, "finetune_subnet", lambda *a, **k: pytest.fail("trained"))
    top = arch_id(run.space.max())
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family)], "--family: member 1:",
                   f"holds the arch {top}", "family.json names")
    data = json.loads((family / "family.json").read_text())
    data["members"][0]["arch_id"] = top         # family.json edited to agree: still above the 20% budget
    (family / "family.json").write_text(json.dumps(data))
    one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family)], "--family: member 1:",
                   f"costs {format_amount(run.space.macs(run.space.max()))} macs",
                   f"above the member's macs budget {format_amount(data['members'][0]['budget'])}")
    assert not (runs / "tiny" / "export").exists()


def test_a_family_searched_on_the_untrained_config_exports_from_a_trained_run_of_its_space(fresh, tmp_path):
    runs, _ = fresh
    run = api.load_run(runs / "tiny", device="cpu")
    out = tmp_path / "config-family"
    searched = api.search_family(untrained_run(run.config, out), "random", out=out, progress=False, score="macs",
                                 max_macs=["50%"], trials=4)
    result = api.export_family(run, out, NO_TUNE, progress=False)
    assert [m["arch_id"] for m in result.members] == [m.arch_id for m in searched.members]
    assert [row["exported"] for row in api.summarise_family(out)["members"]] == [True]


def test_a_kept_members_seconds_are_those_of_its_own_export_and_a_damaged_value_is_not_copied(tmp_path):
    """Keyed by the export itself (arch, folder, accuracies, training record), not by the arch id:
    an earlier family export of the same arch elsewhere or with another fine-tune gives nothing."""
    tuned = {"steps": 2, "seconds": 3.5}
    record = {"arch_id": "a", "val_top1": 0.5, "test_top1": 0.4, "finetune": tuned}
    out = tmp_path / "export" / "a"
    (tmp_path / family_record.FAMILY_EXPORT).write_text(json.dumps(
        {"members": [{"index": 1, "arch_id": "a", "export_dir": str(out), "val_top1": 0.5, "test_top1": 0.4,
                      "kept": False, "finetune": tuned, "seconds": 9.0},
                     {"index": 2, "arch_id": "a", "export_dir": str(tmp_path / "other"), "val_top1": 0.5,
                      "test_top1": 0.4, "kept": False, "finetune": tuned, "seconds": 99.0}],
         "run": None, "step": 0, "finetune": {}}))
    earlier = family_module.earlier_members(tmp_path)
    assert family_module.kept_seconds(earlier, out, record) == 9.0
    assert family_module.kept_seconds(earlier, out, {**record, "finetune": {"steps": 4, "seconds": 7.0}}) == 7.0
    assert family_module.kept_seconds(earlier, out, {**record, "test_top1": 0.3}) == 3.5
    assert family_module.kept_seconds(earlier, out, {**record, "finetune": {"steps": 4, "seconds": "x"}}) is None
    (tmp_path / family_record.FAMILY_EXPORT).write_text(json.dumps(
        {"members": [{"index": 1, "arch_id": "a", "export_dir": str(out), "val_top1": 0.5, "test_top1": 0.4,
                      "kept": False, "finetune": tuned, "seconds": "9 s"}], "run": None, "step": 0, "finetune": {}}))
    assert family_module.earlier_members(tmp_path) == ()
    assert family_module.kept_seconds(family_module.earlier_members(tmp_path), out, record) == 3.5


def test_members_that_share_an_arch_are_both_shown_exported_with_the_same_export(fresh):
    runs, family = fresh
    data = json.loads((family / "family.json").read_text())
    first, second = member_dirs(family)
    shutil.copy(first / "best.yaml", second / "best.yaml")
    for key in ("arch_id", "arch", "macs", "params"):
        data["members"][1][key] = data["members"][0][key]
    (family / "family.json").write_text(json.dumps(data))
    result = api.export_family(api.load_run(runs / "tiny", device="cpu"), family, NO_TUNE, progress=False)
    assert [m["kept"] for m in result.members] == [False, True]
    summary = api.summarise_family(family)
    assert [row["exported"] for row in summary["members"]] == [True, True]
    assert summary["members"][0]["export_dir"] == summary["members"][1]["export_dir"] == result.members[0]["export_dir"]
    assert summary["not_exported"] == [] and summary["export_command"] is None


def test_a_fine_tune_past_the_ceiling_on_the_command_line_blames_the_flag_not_the_config(fresh, capsys):
    runs, family = fresh
    err = one_line_error(capsys, ["export", str(runs / "tiny"), "--family", str(family), "--finetune", "1e9"],
                         "--finetune: 1e9 is 1,000,000,000 steps")
    assert "export.finetune.length" not in err


def test_family_export_json_records_absolute_paths_whatever_the_working_directory(fresh, monkeypatch):
    runs, family = fresh
    monkeypatch.chdir(runs)
    api.export_family(api.load_run("tiny", runs_dir=".", device="cpu"), family, NO_TUNE, progress=False)
    written = json.loads((family / api.FAMILY_EXPORT).read_text())
    assert written["run"] == str(runs / "tiny")
    assert [m["export_dir"] for m in written["members"]] == [
        str(runs / "tiny" / "export" / m["arch_id"]) for m in written["members"]]
    assert sorted(p.name for p in (runs / "tiny" / "export").iterdir()) == sorted(
        m["arch_id"] for m in written["members"]), "an export left something beside it (a lock folder)"


@pytest.mark.slow
def test_sigterm_in_the_family_exports_final_evaluation_is_one_line_and_a_rerun_finishes(fresh, capsys, monkeypatch):
    runs, family = fresh
    argv = ["export", str(runs / "tiny"), "--family", str(family), "--finetune", "0"]

    def terminated(signum, frame):
        raise AssertionError("SIGTERM reached a handler the family export did not install")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(family_module, "_inherited", lambda *a: os.kill(os.getpid(), signal.SIGTERM))
            assert cli.main(argv) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    last = capsys.readouterr().err.strip().splitlines()[-1]       # after the progress bar's lines
    assert last.startswith("nas export: stopped: SIGTERM:") and "run the same nas export again" in last, last
    assert not (family / api.FAMILY_EXPORT).exists()
    assert cli.main(argv + ["--json"]) == 0
    assert [m["kept"] for m in json.loads(capsys.readouterr().out)["members"]] == [True, True]
