"""`nas summary FAMILY_DIR`: one row per member read from its records, flags, what is left to export, family.png."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from nas import api, cli
from nas.core import yaml_io
from nas.core.config import config_spelling, load_config, resolve_config_path
from nas.core.amounts import format_amount
from nas.engine.export.family_record import FAMILY_EXPORT
from nas.engine.export.shipped import SHIPPED
from nas.engine.searching.family import member_dir, write_family
from nas.engine.untrained import names_a_run, untrained_run
from tests.support.safety import one_line_error
from tests.support.tiny import tiny_config

# Three members: 1 fine-tuned, 2 shipped inherited and below the min subnet on validation, 3 not exported.
MEMBERS = [
    {"budget": 2_000_000, "spec": "35%", "id": "aaaaaaaaa1", "macs": 1_900_000, "params": 700_000,
     "shipped": {"shipped": "finetuned", "val_top1": 0.9012, "test_top1": 0.8975,
                 "inherited": {"val_top1": 0.861, "test_top1": 0.8588},
                 "finetune": {"steps": 536, "fraction_of_run": 0.25, "distill": False}}},
    {"budget": 3_000_000, "spec": "50%", "id": "bbbbbbbbb2", "macs": 2_950_000, "params": 900_000,
     "shipped": {"shipped": "inherited", "val_top1": 0.8123, "test_top1": 0.8101,
                 "inherited": {"val_top1": 0.8123, "test_top1": 0.8101}, "finetune": None}},
    {"budget": 4_000_000, "spec": "75%", "id": "ccccccccc3", "macs": 3_800_000, "params": 1_100_000},
]
MIN = {"arch_id": "0000000min", "macs": 1_000_000, "params": 500_000, "val_top1": 0.8401, "test_top1": 0.8377,
       "source": "min subnet"}
MAX = {"arch_id": "0000000max", "macs": 5_000_000, "params": 1_500_000, "val_top1": 0.88, "test_top1": 0.8777}


# family_export.json as the family export writes it (its min subnet has no `source`: that is the cheaper list's)
EXPORTED = {"members": [], "run": "/runs/r", "step": 100, "finetune": {},
            "min_subnet": {k: v for k, v in MIN.items() if k != "source"}, "max_subnet": MAX}


@pytest.fixture
def family(tmp_path) -> Path:
    members = []
    for index, m in enumerate(MEMBERS, start=1):
        folder = member_dir(index, "macs", m["budget"])
        (tmp_path / folder).mkdir()
        members.append({"index": index, "budget": m["budget"], "budget_spec": m["spec"], "dir": folder,
                        "arch_id": m["id"], "arch": {"x": index}, "macs": m["macs"], "params": m["params"],
                        "latency_ms": None, "val_top1": None, "score": "macs+jacov", "score_value": 1.0})
        if "shipped" in m:
            export_dir = tmp_path / "export" / m["id"]
            export_dir.mkdir(parents=True)
            record = {"arch_id": m["id"], "macs": m["macs"], "params": m["params"], **m["shipped"],
                      "cheaper": [MIN]}
            (export_dir / "metrics.json").write_text(json.dumps(record))      # the export the record names
            (tmp_path / folder / SHIPPED).write_text(json.dumps({**record, "export_dir": str(export_dir)}))
    write_family(tmp_path, {"kind": "family", "cost": "macs", "budget_specs": [m["spec"] for m in MEMBERS],
                            "budgets": [m["budget"] for m in MEMBERS], "other_budgets": {}, "members": members,
                            "searcher": "evolution", "score": "macs+jacov", "score_reason": "the default",
                            "seed": 0, "trials": 20, "evaluations": 47,
                            "source": {"run": "/runs/r", "checkpoint": "last.pt", "step": 100},
                            "latency_table": None, "device": "cpu", "batch": 1})
    (tmp_path / FAMILY_EXPORT).write_text(json.dumps(EXPORTED))
    return tmp_path


def test_the_table_shows_each_members_figures_from_its_records(family, capsys):
    assert cli.main(["summary", str(family)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines if line.strip()[:1].isdigit()}
    first, second, third = MEMBERS
    assert rows["1"][1:8] == ["35%", first["id"], format_amount(first["macs"]), format_amount(first["params"]),
                              f"{100 * first['shipped']['test_top1']:.2f}%", "fine-tuned", "25%"]
    assert rows["1"][8] == f"{100 * first['shipped']['inherited']['test_top1']:.2f}%"
    # member 2: not above the min subnet on validation, flagged
    assert rows["2"][5:8] == [f"{100 * second['shipped']['test_top1']:.2f}%", "!", "inherited"]
    assert any(line.strip().startswith("! member 2") and f"{100 * MIN['test_top1']:.2f}%" in line for line in lines)
    assert not any("! member 1" in line for line in lines)
    assert rows["3"][5:7] == ["-", "not"]
    # the run family_export.json names, /runs/r, is not there (moved, or another machine's): RUN
    assert "not exported yet: member 3; export with: nas export RUN --family " + str(family) in out
    assert f"test {100 * MAX['test_top1']:.2f}%" in out
    assert (family / "family.png").read_bytes()[:4] == b"\x89PNG"


def test_json_carries_the_rows(family, capsys):
    assert cli.main(["summary", str(family), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [row["exported"] for row in summary["members"]] == [True, True, False]
    assert summary["members"][0]["test_top1"] == MEMBERS[0]["shipped"]["test_top1"]
    assert summary["members"][1]["min_subnet"]["arch_id"] == MIN["arch_id"]
    assert summary["members"][0]["min_subnet"] is None
    assert summary["not_exported"] == [3] and summary["figure"] == str(family / "family.png")


def test_a_damaged_family_json_is_one_line_in_summary(family, capsys):
    (family / "family.json").write_text('{"kind": "family"}')
    one_line_error(capsys, ["summary", str(family)], "SEARCH_DIR:", "family.json", "damaged record: cost: missing")


def test_a_member_whose_export_folder_was_deleted_is_not_shown_as_shipped(family, capsys):
    import shutil

    shutil.rmtree(family / "export" / MEMBERS[0]["id"])
    assert cli.main(["summary", str(family)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert rows["1"][5:7] == ["-", "not"]
    assert f"member 1: not exported now: the export shipped.json records, {family / 'export' / MEMBERS[0]['id']}, " \
           "is gone" in out
    assert "not exported yet: members 1, 3" in out


@pytest.mark.parametrize("content, says", [
    ([], "damaged record: expected a mapping, got []"),
    ({**EXPORTED, "min_subnet": "x"}, "min_subnet: expected a mapping, got x"),
    ({**EXPORTED, "min_subnet": {k: v for k, v in EXPORTED["min_subnet"].items() if k != "macs"}},
     "min_subnet.macs: missing (required)"),
    ({**EXPORTED, "max_subnet": {**MAX, "test_top1": 87.77}}, "max_subnet.test_top1: must be a fraction in [0, 1]"),
    ({**EXPORTED, "members": [{"index": 1}]}, "members[0].arch_id: missing (required)")])
def test_a_damaged_family_export_json_is_one_line_in_summary(family, capsys, content, says):
    (family / FAMILY_EXPORT).write_text(json.dumps(content))
    one_line_error(capsys, ["summary", str(family)], "SEARCH_DIR:", str(family / FAMILY_EXPORT), says)


def test_the_export_command_repeats_the_familys_fine_tune_so_that_following_it_keeps_every_export(family, capsys):
    """A family exported with --finetune 10% --finetune-lr 0.05 --distill: the suggested command
    parses to those settings (the default length would re-export every member)."""
    settings = {"length": "10%", "steps": 3, "lr": 0.05, "distill": True, "seed": 0}
    run = family / "the-run"        # where the family was exported from, there now
    run.mkdir()
    (family / FAMILY_EXPORT).write_text(json.dumps({**EXPORTED, "run": str(run), "finetune": settings}))
    assert cli.main(["summary", str(family), "--json"]) == 0
    command = json.loads(capsys.readouterr().out)["export_command"]
    args = cli.build_parser().parse_args(shlex.split(command)[1:])
    assert (args.run, args.family) == (str(run), str(family))
    assert (args.finetune, args.finetune_lr, args.distill) == ("10%", 0.05, True)


def test_a_family_trained_alone_suggests_its_config_not_the_family_folder(tmp_path, capsys):
    """A family searched on an untrained config: family.json records the config as a command
    names it, and the summary's command is `nas export CONFIG --family DIR`."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=4)))
    out = tmp_path / "family"
    api.search_family(untrained_run(load_config(config), out), "random", out=out, progress=False, score="macs",
                      max_macs=["50%"], trials=3)
    assert json.loads((out / "family.json").read_text())["config"] == str(config)
    assert cli.main(["summary", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["export_command"] == f"nas export {config} --family {out}"


def test_a_shipped_config_is_spelt_with_yaml_which_names_the_config_even_beside_a_run_of_that_name(tmp_path):
    (tmp_path / "fashion_mnist_cell201").mkdir()
    (tmp_path / "fashion_mnist_cell201" / "config.yaml").write_text("{}")
    spelt = config_spelling(load_config("fashion_mnist_cell201"))
    assert spelt == "fashion_mnist_cell201.yaml"
    assert resolve_config_path(spelt) == resolve_config_path("fashion_mnist_cell201")
    assert not names_a_run(spelt, tmp_path) and names_a_run("fashion_mnist_cell201", tmp_path)


def test_members_that_share_an_arch_each_show_the_export_and_its_other_weights_note(family, capsys):
    """Member 2 answers member 1's arch (one export serves both), measured by the search at an
    earlier step than exported: both rows show the export, and each says it is of other weights."""
    data = json.loads((family / "family.json").read_text())
    first, second = (family / m["dir"] for m in data["members"][:2])
    for key in ("arch_id", "macs", "params"):
        data["members"][1][key] = data["members"][0][key]
    (family / "family.json").write_text(json.dumps(data))
    shipped = json.loads((first / SHIPPED).read_text())
    export_dir = Path(shipped["export_dir"])
    (export_dir / "metrics.json").write_text(json.dumps({**json.loads((export_dir / "metrics.json").read_text()),
                                                         "step": 100, "checkpoint": "last.pt"}))
    for member in (first, second):
        (member / SHIPPED).write_text(json.dumps({**shipped, "step": 100}))
        (member / "summary.json").write_text(json.dumps({"source": {"step": 60, "checkpoint": "last.pt"}}))
    assert cli.main(["summary", str(family)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert rows["1"][5:8] == rows["2"][5:8] == [f"{100 * MEMBERS[0]['shipped']['test_top1']:.2f}%", "fine-tuned",
                                                "25%"]
    for index in (1, 2):
        assert f"member {index}: note: exported from step 100 (last.pt) of the run, the search measured step 60" in out
    assert "not exported yet: member 3;" in out


def test_a_short_fine_tune_is_not_shown_as_0_percent_and_one_member_is_one_member(family, capsys):
    data = json.loads((family / "family.json").read_text())
    data["members"], data["budgets"], data["budget_specs"] = data["members"][:1], data["budgets"][:1], ["35%"]
    (family / "family.json").write_text(json.dumps(data))
    first = family / data["members"][0]["dir"]
    shipped = json.loads((first / SHIPPED).read_text())
    tuned = {**shipped["finetune"], "steps": 10, "fraction_of_run": 10 / 2144}
    for path in (first / SHIPPED, Path(shipped["export_dir"]) / "metrics.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "finetune": tuned}))
    assert cli.main(["summary", str(family)]) == 0
    out = capsys.readouterr().out
    assert ": 1 member on macs budgets" in out
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("1 "))
    assert row[6:8] == ["fine-tuned", f"{100 * 10 / 2144:.2g}%"] == ["fine-tuned", "0.47%"]


def test_a_deleted_family_json_is_said_as_such_not_as_a_missing_summary(family, capsys):
    for member in family.glob("m[0-9]*"):
        (member / "search.json").write_text("{}")
    (family / "family.json").unlink()
    err = one_line_error(capsys, ["summary", str(family)], "SEARCH_DIR:", "holds no family.json",
                         "m1-", "run the same family search again")
    assert "summary.json" not in err.split(";")[0]
