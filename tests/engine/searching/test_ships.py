"""`--ships` says what the export will ship: the search's export command and `auto`'s line follow
it, and where it cannot mean anything it is refused or warned about."""
from __future__ import annotations

import json

import yaml

from nas import cli
from tests.support.safety import copy_run, one_line_error
from tests.support.tiny import tiny_config

SEARCH = ["--searcher", "random", "--trials", "2", "--device", "cpu", "--quiet"]


def finetuning_run(trained, tmp_path):
    """A copy of the tiny run whose config fine-tunes its exports (25% of its training)."""
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    config = runs / "tiny" / "config.yaml"
    text = config.read_text()
    assert "finetune: {length: 0," in text
    config.write_text(text.replace("finetune: {length: 0,", "finetune: {length: 25%,"))
    return runs / "tiny"


def test_a_search_for_inherited_weights_prints_an_export_command_that_ships_them(trained, tmp_path, capsys):
    run = finetuning_run(trained, tmp_path)
    assert cli.main(["search", str(run), *SEARCH, "--ships", "inherited", "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    command = next(line for line in out.splitlines() if line.startswith("export it with:"))
    assert command.endswith(f"--arch {tmp_path / 's' / 'best.yaml'} --finetune 0"), command
    reason = json.loads((tmp_path / "s" / "summary.json").read_text())["score_reason"]
    assert "ships: inherited" in reason and "export.finetune.length 0" not in reason, reason    # the config says 25%


def test_ships_beside_an_explicit_score_is_warned(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    assert cli.main(["search", str(runs / "tiny"), *SEARCH, "--score", "macs", "--ships", "finetuned",
                     "--out", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    assert "warning: --ships decides what score auto optimises; the search ranks by the score given (macs)" in err


def test_ships_inherited_on_an_untrained_config_is_refused(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config()))
    one_line_error(capsys, ["search", str(config), *SEARCH, "--score", "macs", "--ships", "inherited",
                            "--out", str(tmp_path / "s")], "--ships: inherited: a config has no trained weights")
    assert not (tmp_path / "s").exists()
