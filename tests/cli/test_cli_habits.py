"""CLI habits: `--version`, choices drawn from the registries, help on every option, one-line
argument errors."""
from __future__ import annotations

import argparse
from importlib import metadata

import pytest

from nas import cli
from nas.core.registry import SEARCHERS


def test_version_is_the_installed_distribution(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"nas {metadata.version('nas')}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_of_every_command_has_help():
    parser = cli.build_parser()
    missing = []
    for name, sub in {"nas": parser, **_subparsers(parser)}.items():
        for action in sub._actions:
            if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip():
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


def test_searcher_choices_are_the_registry_and_follow_it(monkeypatch, capsys):
    search = _subparsers(cli.build_parser())["search"]
    (searcher,) = [a for a in search._actions if "--searcher" in a.option_strings]
    assert list(searcher.choices) == SEARCHERS.names()
    # a plugin registered after import (as an entry point would) is offered by the next parser
    monkeypatch.setattr(SEARCHERS, "_entries", dict(SEARCHERS._entries))
    SEARCHERS.register("hill-climbing-test")(object)
    assert cli.main(["search", "--help"]) == 0
    assert "hill-climbing-test" in capsys.readouterr().out
    args = cli.build_parser().parse_args(["search", "run", "--searcher", "hill-climbing-test"])
    assert args.searcher == "hill-climbing-test"


@pytest.mark.parametrize("argv, needle", [
    (["search", "run", "--searcher", "evolutoin"], "argument --searcher: invalid choice: 'evolutoin'"),
    (["eval", "run", "--arch", "max", "--split", "train"], "argument --split: invalid choice: 'train'"),
    (["export", "run", "--arch", "max", "--format", "tflite"], "argument --format: invalid choice: 'tflite'"),
    (["eval", "run"], "the following arguments are required: --arch"),
])
def test_argument_errors_are_one_line_with_exit_2(capsys, argv, needle):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert err.startswith(f"nas {argv[0]}: error:")
