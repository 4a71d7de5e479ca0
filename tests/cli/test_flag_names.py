"""Errors name the caller's words: the Python API's parameter below the CLI, the flag at the CLI.

The layers below the CLI raise `max_macs: ...` with fixes that refer to parameters by markers
(`{out}`); `nas.core.wording.render` words them for the Python API (`out=`) and, with the CLI's
`FlagWords`, for the CLI (`--max-macs: ...`, `--out`), so each layer names only what it knows.
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from nas import api, cli
from nas.core.errors import ConfigError, PathError, RegistryError
from nas.core.wording import command as suggest
from nas.core.wording import render
from tests.support.safety import one_line_error

ROOT = Path(__file__).resolve().parents[2]
BELOW_THE_CLI = ("nas/engine", "estimators", "searchers", "supernets", "search_spaces")

# Keyword parameters of the API functions that no flag gives (the CLI passes a fixed value or
# derives it); every other parameter has a flag of its command, so errors naming it read right there.
API_ONLY = {"progress", "selection_seed", "name_or_path", "path_or_name", "run", "config"}
COMMANDS = {"search": api.search, "fidelity": api.fidelity, "export": api.export_subnet, "generate": api.generate,
            "latency-table": api.latency_table, "train": api.train, "eval": api.evaluate}


def test_an_unfinite_budget_names_the_parameter_in_python_and_the_flag_at_the_cli(trained, capsys):
    run = api.load_run("tiny", trained, device="cpu")
    with pytest.raises(ConfigError) as raised:
        api.search(run, max_macs="1e400", trials=1, progress=False)
    assert str(raised.value) == "max_macs: '1e400' is not a finite amount; give a number such as 20M"
    one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--max-macs", "1e400", "--quiet"],
                   "nas search: error: --max-macs: '1e400' is not a finite amount; give a number such as 20M")


def test_an_unknown_score_names_score_in_python_and_the_flag_at_the_cli(trained, capsys):
    run = api.load_run("tiny", trained, device="cpu")
    with pytest.raises(RegistryError, match=r"^score: unknown estimator 'macz' \(did you mean 'macs'\?\)"):
        api.search(run, score="macz", trials=1, progress=False)
    err = one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--score", "macz", "--quiet"])
    assert err.startswith("nas search: error: --score: unknown estimator 'macz' (did you mean 'macs'?)"), err


def test_fidelity_names_its_own_parameters_where_its_flags_differ(trained, tmp_path, capsys):
    with pytest.raises(RegistryError, match=r"^estimators: unknown estimator 'parms'"):
        api.fidelity("tiny", runs_dir=trained, estimators="parms", progress=False)
    with pytest.raises(ConfigError, match=r"^init_seeds: must be an integer >= 1, got 0$"):
        api.fidelity("tiny", runs_dir=trained, init_seeds=0, progress=False)
    (tmp_path / "file").write_text("")
    with pytest.raises(PathError, match=r"^ground_truth_dir: .*file is a file, not a folder$"):
        api.fidelity("tiny", runs_dir=trained, ground_truth_dir=tmp_path / "file" / "gt", progress=False)
    one_line_error(capsys, ["fidelity", "tiny", "--runs-dir", str(trained), "--ground-truth",
                            str(tmp_path / "file" / "gt"), "--quiet"],
                   f"nas fidelity: error: --ground-truth: {tmp_path / 'file'} is a file, not a folder")


def test_render_words_a_leading_parameter_and_the_markers_for_each_front_end():
    cli_words = cli.FlagWords(cli.build_parser(), "search")
    text = "max_macs: too big\nscore auto: supernet (in /a: b)\nstorage: x; use another {out}"
    assert render(text, cli_words) == "--max-macs: too big\n--score auto: supernet (in /a: b)\n--storage: x; use another --out"
    assert render(text) == text.replace("{out}", "out=")
    assert render("workers: worker 1: max_params: no", cli_words) == "--workers: worker 1: --max-params: no"
    switches = "with {resume=True} {checkpoint=best.pt}, or {predict_missing=True} {trials=12}"
    assert render(switches, cli_words) == "with --resume --checkpoint best.pt, or --predict-missing --trials 12"
    assert render(switches) == "with resume=True checkpoint='best.pt', or predict_missing=True trials=12"
    suggestion = suggest("train", "runs/a b.yaml", name="a", resume=True)
    assert render(suggestion, cli_words) == "nas train 'runs/a b.yaml' --name a --resume"
    assert render(suggestion) == "nas.api.train(nas.api.load_config('runs/a b.yaml'), name='a', resume=True)"
    for kept in ("RUN: /x is not a run", "run.yaml: data.root: missing", "unknown: max_macs: x", "seed is 3",
                 "/tmp/out: no such file", "macs 5M > max_macs 4M", "strategy.sampler: {name: shiftnas}",
                 "got {'a': 1}"):
        assert render(kept, cli_words) == kept and render(kept) == kept


def test_every_api_parameter_has_a_flag_of_its_command():
    """A parameter and its flag cannot drift apart unnoticed: each keyword of a stage's function
    is a dest of its command's parser, an explicit alias (`cli.API_PARAM_DESTS`), or API-only."""
    parser = cli.build_parser()
    for command, function in COMMANDS.items():
        flags = cli.flag_names(cli.command_parser(parser, command))
        params = set(inspect.signature(function).parameters) - API_ONLY
        missing = params - set(flags)
        assert not missing, f"{command}: {sorted(missing)} have no flag"


def _flag_strings(path: Path) -> list[tuple[int, str]]:
    """`(line, text)` of each string constant or f-string of `path` that begins with a flag (`--x`;
    a bare `--` is a table's empty cell)."""
    tree = ast.parse(path.read_text(), str(path))
    parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            head = node.values[0].value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            head = node.value
        else:
            continue
        if isinstance(head, str) and re.match(r"--[A-Za-z]", head):
            found.append((node.lineno, head))
    return found


def test_no_module_below_the_cli_writes_a_flag_at_the_start_of_a_string():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text!r}"
                 for folder in BELOW_THE_CLI for path in sorted((ROOT / folder).rglob("*.py"))
                 for line, text in _flag_strings(path)]
    assert not offenders, "name the Python API's parameter; the CLI names its flag:\n" + "\n".join(offenders)


def test_the_scan_finds_flags_in_plain_and_formatted_strings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('a = "--out: x"\nb = f"--max-macs: {a}"\nc = f"{a} --kept"\nd = "max_macs: y"\ne = "--"\n')
    assert _flag_strings(sample) == [(1, "--out: x"), (2, "--max-macs: ")]
