"""The README works as written: its commands that need no trained run run, its YAML is the shipped
file, its Python blocks import what they use, and a newcomer is given exactly two commands."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from nas import cli
from nas.core import yaml_io
from tests.support.python_blocks import undefined_names

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# `nas` verbs that need a trained run (or train one): the README shows them, the suite tests them elsewhere.
NEEDS_TRAINING = {"train", "eval", "export", "search", "latency-table", "fidelity", "generate"}


def blocks(language: str) -> list[str]:
    """The contents of the README's fenced code blocks in `language`."""
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE)


def shell_commands() -> list[str]:
    """Every command of the sh blocks: comments cut, continuation lines joined."""
    commands = []
    for block in blocks("sh"):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def runnable(command: str) -> bool:
    """A `nas` command that needs no trained run."""
    words = shlex.split(command)
    return words[0] == "nas" and (words[1] in ("space", "--version") or "--help" in words)


def test_the_newcomer_gets_two_commands():
    first = blocks("sh")[0]
    assert [line.split("#")[0].strip() for line in first.splitlines()] == ["make run", "make test"]


def test_every_nas_command_is_run_here_or_needs_a_trained_run():
    nas_commands = [c for c in shell_commands() if shlex.split(c)[0] == "nas"]
    others = [c for c in nas_commands if not runnable(c) and shlex.split(c)[1] not in NEEDS_TRAINING]
    assert not others, f"README commands neither run by this test nor known to need training: {others}"
    assert sum(map(runnable, nas_commands)) >= 3


@pytest.mark.parametrize("command", [c for c in shell_commands() if runnable(c)])
def test_readme_command_runs(command, capsys):
    assert cli.main(shlex.split(command)[1:]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip()


def test_the_yaml_shown_is_the_shipped_default():
    (shown,) = [b for b in blocks("yaml") if b.startswith("space:\n  name: mobilenetv3")]
    shipped = (ROOT / "nas" / "configs" / "fashion_mnist_mbv3.yaml").read_text()
    assert yaml_io.loads(shown) == yaml_io.loads(shipped)


def test_python_blocks_parse_and_import_what_they_use():
    sources = blocks("python")
    assert sources
    for source in sources:
        assert not undefined_names(source), source


def test_python_api_names_in_the_readme_exist():
    import nas

    used = set(re.findall(r"\bnas\.([a-z_]+)\(", "\n".join(blocks("python"))))
    assert used >= {"load_config", "train", "load_run", "evaluate", "search", "export_subnet"}
    assert all(callable(getattr(nas, name)) for name in used)
