"""The search folder's shipped record describes the export its answer has now, or says why not."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nas import api, cli
from nas.engine.checkpoint import LAST, load_checkpoint, save_checkpoint
SHIPPED = "shipped.json"
from tests.support.safety import copy_run, one_line_error

SEARCH = ["--searcher", "random", "--trials", "2", "--score", "macs", "--device", "cpu", "--quiet"]


def searched(trained: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the tiny run, a search folder of it answering the largest of 2 random archs)."""
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    search_dir = tmp_path / "search"
    assert cli.main(["search", str(runs / "tiny"), *SEARCH, "--out", str(search_dir)]) == 0
    return runs / "tiny", search_dir


def export(run: Path, arch: str, *more: str) -> None:
    assert cli.main(["export", str(run), "--arch", arch, "--device", "cpu", *more]) == 0


def summary_lines(capsys, search_dir: Path) -> str:
    capsys.readouterr()
    assert cli.main(["summary", str(search_dir)]) == 0
    return capsys.readouterr().out


def hand_made_search(folder: Path, arch: str = "a1", step: int = 8, run: str = "/runs/tiny",
                     checkpoint: str = "last.pt") -> Path:
    """A finished search folder's summary.json and search.json, written as a search writes them."""
    folder.mkdir(parents=True)
    source = {"run": run, "checkpoint": checkpoint, "step": step}
    (folder / "summary.json").write_text(json.dumps({"arch_id": arch, "macs": 10, "params": 5, "dir": str(folder),
                                                     "source": source}))
    (folder / "search.json").write_text(json.dumps({"settings": {"space_fingerprint": "f0", "checkpoint": checkpoint,
                                                                 "step": step}}))
    return folder


def hand_made_export(folder: Path, arch: str = "a1", step: int = 8, run: str = "/runs/tiny", **values) -> dict:
    """An export folder's metrics.json (what `nas export` writes, fewer keys) and its pointer."""
    folder.mkdir(parents=True)
    metrics = {"arch_id": arch, "val_top1": 0.5, "test_top1": 0.4, "shipped": "inherited", "finetune": None,
               "cheaper": [], "warning": None, "step": step, "checkpoint": "last.pt", "run": run,
               "space_fingerprint": "f0", **values}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return {"export_dir": str(folder), **metrics}


@pytest.mark.parametrize("damage, needle", [
    ("{not json", "cannot read it"),
    (json.dumps({"arch_id": "a1", "export_dir": "x", "val_top1": 0.5, "test_top1": 7.5}),
     "damaged record: test_top1: must be a fraction in [0, 1], got 7.5"),
    (json.dumps({"arch_id": "a1", "export_dir": "x", "val_top1": 0.5, "test_top1": 0.4, "shipped": "both"}),
     "damaged record: shipped: both is not allowed; choose one of 'finetuned', 'inherited', 'scratch'"),
    (json.dumps({"arch_id": "a1", "export_dir": "x", "val_top1": 0.5, "test_top1": 0.4,
                 "cheaper": [{"arch_id": "b", "source": "min subnet", "macs": 3, "val_top1": -1}]}),
     "damaged record: cheaper: must be a list of subnets"),
])
def test_a_damaged_shipped_record_is_one_error_line_like_a_damaged_summary(tmp_path, capsys, damage, needle):
    search_dir = hand_made_search(tmp_path / "search")
    (search_dir / SHIPPED).write_text(damage)
    one_line_error(capsys, ["summary", str(search_dir)], "SEARCH_DIR", str(search_dir / SHIPPED), needle)


def test_a_shipped_record_whose_export_folder_now_holds_values_out_of_range_is_refused(tmp_path, capsys):
    search_dir = hand_made_search(tmp_path / "search")
    pointer = hand_made_export(tmp_path / "export", val_top1=7.5)
    (search_dir / SHIPPED).write_text(json.dumps({**pointer, "val_top1": 0.5}))
    one_line_error(capsys, ["summary", str(search_dir)], str(tmp_path / "export" / "metrics.json"),
                   "damaged record: val_top1: must be a fraction in [0, 1], got 7.5")


def test_summary_reads_the_export_folder_not_the_copy_in_the_search_folder(tmp_path, capsys):
    """The export folder now holds another export of the same arch (another fine-tune): that is shown."""
    search_dir = hand_made_search(tmp_path / "search")
    pointer = hand_made_export(tmp_path / "export", val_top1=0.25)
    (search_dir / SHIPPED).write_text(json.dumps({**pointer, "val_top1": 0.9153}))
    out = summary_lines(capsys, search_dir)
    assert "val top-1 25.00%" in out and "91.53" not in out, out


def test_summary_ignores_a_shipped_record_of_another_run(tmp_path, capsys):
    search_dir = hand_made_search(tmp_path / "search", run="/runs/tiny")
    pointer = hand_made_export(tmp_path / "export", run="/runs/other", val_top1=0.1409)
    (search_dir / SHIPPED).write_text(json.dumps(pointer))
    out = summary_lines(capsys, search_dir)
    assert "shipped:" not in out and "14.09" not in out, out
    assert "not exported now: shipped.json records an export of another run" in out and "/runs/other" in out, out


def test_a_search_of_an_untrained_config_is_shipped_by_any_run_of_its_space(tmp_path, capsys):
    """Such a search measured no run (its source is its own folder at step 0): no run to differ from."""
    search_dir = hand_made_search(tmp_path / "search", step=0, run=str(tmp_path / "search"), checkpoint="untrained")
    (search_dir / SHIPPED).write_text(json.dumps(hand_made_export(tmp_path / "export", run="/runs/tiny", step=8)))
    out = summary_lines(capsys, search_dir)
    assert f"shipped: a1 in {tmp_path / 'export'}" in out and "note:" not in out, out


@pytest.mark.slow
def test_summary_follows_a_reexport_of_the_answer_and_ignores_a_deleted_export(trained, tmp_path, capsys):
    run, search_dir = searched(trained, tmp_path)
    best = str(search_dir / "best.yaml")
    export(run, best, "--finetune", "2", "--finetune-lr", "0.05")
    assert "fine-tuned alone 2 steps" in summary_lines(capsys, search_dir)
    # the same arch exported again, not from the search's file, with no fine-tune: the folder is replaced
    arch = json.loads((search_dir / "summary.json").read_text())["arch_id"]
    (tmp_path / "same.yaml").write_text((search_dir / "best.yaml").read_text())
    export(run, str(tmp_path / "same.yaml"), "--finetune", "0")
    metrics = json.loads((run / "export" / arch / "metrics.json").read_text())
    out = summary_lines(capsys, search_dir)
    assert "inherited weights (no fine-tune)" in out and "fine-tuned" not in out, out
    assert f"val top-1 {100 * metrics['val_top1']:.2f}%" in out, out
    # the export folder deleted: nothing is shipped now, and the summary says what became of it
    for path in (run / "export" / arch).iterdir():
        path.unlink()
    (run / "export" / arch).rmdir()
    out = summary_lines(capsys, search_dir)
    assert "shipped:" not in out and f"not exported now: the export shipped.json records, {run / 'export' / arch}, " \
        "is gone" in out, out


@pytest.mark.slow
def test_an_export_from_a_later_checkpoint_is_flagged_and_one_of_another_run_leaves_the_record_alone(
        trained, tmp_path, capsys):
    run, search_dir = searched(trained, tmp_path)
    state = load_checkpoint(run / "checkpoints" / LAST)      # the run's weights as a later checkpoint would hold
    state["step"] = state["step"] + 32
    save_checkpoint({k: v for k, v in state.items() if k not in ("digest", "format_version")},
                    run / "checkpoints" / "later.pt")
    capsys.readouterr()
    export(run, str(search_dir / "best.yaml"), "--finetune", "0", "--checkpoint", "later.pt")
    err = capsys.readouterr().err
    flag = "exported from step 40 (later.pt) of the run, the search measured step 8 (last.pt)"
    assert f"note: {flag}" in err, err
    arch = json.loads((search_dir / "summary.json").read_text())["arch_id"]
    assert flag in json.loads((run / "export" / arch / "metrics.json").read_text())["search"]["note"]
    assert f"note: {flag}" in summary_lines(capsys, search_dir)
    # the search's arch exported from another run (same space and step, other weights): the record is left alone
    before = (search_dir / SHIPPED).read_text()
    other = copy_run(trained, "tiny", tmp_path / "others") / "tiny"
    state = load_checkpoint(other / "checkpoints" / LAST)
    name = next(key for key, value in state["model"].items() if value.is_floating_point())
    state["model"][name] = state["model"][name] + 0.01
    save_checkpoint({k: v for k, v in state.items() if k not in ("digest", "format_version")},
                    other / "checkpoints" / LAST)
    export(other, str(search_dir / "best.yaml"), "--finetune", "0", "--out", str(tmp_path / "other-export"))
    err = capsys.readouterr().err
    assert f"note: not recorded as the shipped model of the search {search_dir}" in err, err
    assert "the export is of the weights" in err and "(another run, or the run trained again)" in err, err
    assert (search_dir / SHIPPED).read_text() == before
    assert json.loads((tmp_path / "other-export" / "metrics.json").read_text())["search"]["recorded"] is False
    assert f"shipped: {arch} in {run / 'export' / arch}" in summary_lines(capsys, search_dir)
