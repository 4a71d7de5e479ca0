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
from nas.core import yaml_io
from nas.core.errors import ArchError, ConfigError, PathError, RegistryError, RunError, SearchError
from nas.core.wording import command as suggest
from nas.core.wording import render
from tests.support.safety import one_line_error
from tests.support.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[2]
BELOW_THE_CLI = ("nas/core", "nas/engine", "nas/api.py", "estimators", "searchers", "supernets", "search_spaces")

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


def _both(capsys, argv: list[str], call, error: type, python: str, at_cli: str) -> None:
    """The same failure through the Python API (`call()` raises `error` with the message `python`)
    and the CLI (`argv` exits 2 with the one line `at_cli`, no traceback)."""
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value) == python
    one_line_error(capsys, argv, at_cli)
    assert capsys.readouterr().err == ""


def test_a_missing_arch_file_names_arch(trained, capsys):
    run = api.load_run("tiny", trained, device="cpu")
    _both(capsys, ["eval", "tiny", "--runs-dir", str(trained), "--arch", "maxx"],
          lambda: api.evaluate(run, "maxx"), ArchError,
          "arch: maxx: no such file (give max, min or a YAML/JSON arch file)",
          "nas eval: error: --arch: maxx: no such file (give max, min or a YAML/JSON arch file)")


def test_an_out_folder_of_something_else_says_to_use_another_out(trained, tmp_path, capsys):
    out = tmp_path / "search"
    out.mkdir()
    (out / "search.json").write_text("{}")
    problem = f"{out / 'search.json'}: not the settings of a search ('settings')"
    run = api.load_run("tiny", trained, device="cpu")
    _both(capsys, ["search", "tiny", "--runs-dir", str(trained), "--out", str(out), "--trials", "1", "--quiet"],
          lambda: api.search(run, out=out, trials=1, progress=False), SearchError,
          f"{problem}; remove the file or use another out=",
          f"nas search: error: {problem}; remove the file or use another --out")


def test_resuming_a_missing_run_names_resume(trained, tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=8)))
    problem = f"no run at {trained / 'other'} to resume (train it first without"
    _both(capsys, ["train", str(config), "--name", "other", "--runs-dir", str(trained), "--resume"],
          lambda: api.train(api.load_config(config), name="other", resume=True, runs_dir=trained, progress=False),
          RunError, f"resume: {problem} resume=True)", f"nas train: error: --resume: {problem} --resume)")


def test_a_missing_latency_table_says_how_to_build_one_in_each_front_end_s_words(trained, tmp_path, capsys):
    table = tmp_path / "none.json"
    run = api.load_run("tiny", trained, device="cpu")
    _both(capsys, ["search", "tiny", "--runs-dir", str(trained), "--latency-table", str(table), "--max-latency-ms",
                   "5", "--out", str(tmp_path / "s"), "--quiet"],
          lambda: api.search(run, latency_table=str(table), max_latency_ms=5, out=tmp_path / "s", progress=False),
          RunError,
          f"{table}: no latency table; build one with "
          "`nas.api.latency_table(nas.api.load_run(RUN), device=D, batch=B)`",
          f"nas search: error: {table}: no latency table; build one with `nas latency-table RUN --device D --batch B`")


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


# Command lines kept in texts that no front end words: a file written into a run folder or a report
# formatted for people (the same text whichever front end asked). `path: text in the string or on its
# first line`.
COMMAND_LINES_KEPT = {
    "nas/engine/run_dir.py": "# nas train ",                  # config.yaml's first line: how to resume in a shell
    "nas/engine/importing/__init__.py": "# nas import ",      # an imported run's config.yaml's first line
    "nas/engine/export/shipped.py": "(nas export RUN --arch ",  # the warning kept in the export's metrics.json
    "nas/engine/fidelity/report.py": "(nas search --score calibrated)",  # the fidelity report
    "nas/engine/searching/summary.py": "no finalists stage",           # the search summary
    "nas/engine/export/family_summary.py": "nas export ",   # the family table's commands (a report for people)
    "nas/engine/export/scratch.py": " DIR",   # the cheaper path's two commands (DIR: the family folder), a note
    "nas/engine/export/family_command.py": "# a report's command",   # the family table's command that finishes it
}


def _flag_strings(path: Path) -> list[tuple[int, str]]:
    """`(line, text)` of each string constant of `path` (a part of an f-string included, a
    docstring not) that names a flag (`--x`; a bare `--` is a table's empty cell)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and re.search(r"(?<![\w-])--[A-Za-z]", node.value))


def test_no_runtime_string_below_the_cli_names_a_flag():
    offenders = []
    for folder in BELOW_THE_CLI:
        for path in sorted((ROOT / folder).rglob("*.py")) if (ROOT / folder).is_dir() else [ROOT / folder]:
            name, source = str(path.relative_to(ROOT)), path.read_text().splitlines()
            kept = COMMAND_LINES_KEPT.get(name, "\0")
            offenders += [f"{name}:{line}: {text!r}" for line, text in _flag_strings(path)
                          if kept not in text and kept not in source[line - 1]]
    assert not offenders, "name the Python API's parameter (`{out}` in a fix); the CLI names its flag:\n" + \
        "\n".join(offenders)


def test_the_scan_finds_flags_in_plain_and_formatted_strings_but_not_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Module --doc."""\ndef f():\n    """--doc too."""\n    a = "--out: x"\n'
                      '    b = f"x {a} --max-macs: {a}"\n    c = f"{a} see --kept"\n    d = "max_macs: y"\n'
                      '    e = "--"\n    g = "a-b --c"\n')
    assert _flag_strings(sample) == [(4, "--out: x"), (5, " --max-macs: "), (6, " see --kept"), (9, "a-b --c")]
