"""The manual (README.md and docs/*.md) stays true to the code: its links and the repository
files it names exist, every `nas` command line it shows parses with the CLI's own parser (the
cheap ones run), every flag it names exists, every module it runs with `python -m` exists, its
Python blocks import what they use, and every YAML block loads: a whole config against the
schema, a fragment inside a shipped config. Its pages open with the commands a user types and
keep every paragraph to six lines."""
from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from nas import cli
from nas.core import yaml_io
from nas.core.config import load_config
from tests.support.python_blocks import undefined_names

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Folders of this repository whose files the manual names by path.
SOURCE_FOLDERS = ("nas/", "search_spaces/", "supernets/", "searchers/", "estimators/", "benchmarks/", "tests/",
                  "docs/")
# A fragment (a `strategy:` or `data:` block) is checked inside each of these until one accepts it.
HOSTS = ("fashion_mnist_mbv3", "fashion_mnist_cell201", "fashion_mnist_vit")
# Pages another change rewrites: the paragraph and opening rules below are not enforced on them yet.
UNRESTRUCTURED = ("docs/families.md", "docs/exports.md")
MAX_PARAGRAPH_LINES = 6
# Flags of other programs the manual names: torchrun's, TensorBoard's and GM-NAS's own scripts'.
FOREIGN_FLAGS = {"--standalone", "--nproc_per_node", "--nnodes", "--node_rank", "--rdzv_backend", "--rdzv_endpoint",
                 "--rdzv_id", "--logdir", "--restart"}


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fenced(page: Path, languages: tuple[str, ...]) -> list[str]:
    """The contents of `page`'s fenced code blocks in `languages`."""
    pattern = rf"^```(?:{'|'.join(languages)})\n(.*?)^```"
    return re.findall(pattern, page.read_text(), flags=re.DOTALL | re.MULTILINE)


def command_lines(page: Path) -> list[str]:
    """The commands of `page`'s shell blocks: continuation lines joined, comments cut."""
    commands = []
    for block in fenced(page, ("sh", "bash")):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def nas_arguments(command: str) -> list[str] | None:
    """The arguments after `nas` (or `-m nas`, under torchrun) of a command line, optional parts
    shown in brackets left out; None for a command that is not `nas`."""
    words = shlex.split(re.sub(r"\[[^\]]*\]", " ", command))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):       # OMP_NUM_THREADS=1 ...
        words = words[1:]
    if words[:1] == ["nas"]:
        return words[1:]
    if "-m" in words and words[words.index("-m") + 1:][:1] == ["nas"]:
        return words[words.index("-m") + 2:]
    return None


def all_commands() -> list[tuple[str, str]]:
    return [(_name(page), command) for page in PAGES for command in command_lines(page)]


def test_the_manual_has_its_pages():
    names = {_name(page) for page in PAGES}
    assert {"docs/training.md", "docs/searching.md", "docs/fidelity.md", "docs/nas-bench-201.md",
            "docs/scaling-out.md", "docs/data.md", "docs/exports.md", "docs/design.md",
            "docs/estimators.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_link_and_named_file_exists(page):
    text = page.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" not in target and not target.startswith("#"):
            if not (page.parent / target.split("#")[0]).exists():
                missing.append(f"link {target}")
    for path in re.findall(r"`([\w./-]+\.(?:py|md|yaml|csv|json))`", text):
        if path.startswith(SOURCE_FOLDERS) and not (ROOT / path).exists():
            missing.append(f"file {path}")
    assert not missing, f"{_name(page)}: " + ", ".join(missing)


def test_every_page_is_on_the_map():
    readme = (ROOT / "README.md").read_text()
    assert all(f"(docs/{page.name})" in readme for page in PAGES[1:])


@pytest.mark.parametrize("where, command", [(p, c) for p, c in all_commands() if nas_arguments(c) is not None])
def test_every_nas_command_parses(where, command):
    parser = cli.build_parser()
    try:
        parser.parse_args(nas_arguments(command))
    except SystemExit as e:
        assert e.code == 0, f"{where}: `{command}` does not parse"        # --help and --version exit 0


@pytest.mark.parametrize("where, command", [(p, c) for p, c in all_commands() if c.startswith("python -m ")])
def test_every_module_run_exists(where, command):
    module = shlex.split(command)[2]
    if module != "pip":
        assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"


@pytest.mark.parametrize("where, command", [
    (p, c) for p, c in all_commands() if p != "README.md" and (nas_arguments(c) or [""])[0] == "space"])
def test_the_space_commands_of_the_docs_run(where, command, capsys):
    assert cli.main(nas_arguments(command)) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip()


def _known_flags() -> set[str]:
    """Every flag of `nas` and its commands, and of the benchmarks (their sources name them)."""
    parser = cli.build_parser()
    parsers = [parser, *next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.values()]
    flags = {flag for p in parsers for action in p._actions for flag in action.option_strings}
    for source in (ROOT / "benchmarks").glob("*.py"):
        flags.update(re.findall(r"[\"'](--[a-z][\w-]*)[\"']", source.read_text()))
    return flags | FOREIGN_FLAGS


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_flag_named_exists(page):
    named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", page.read_text()))
    assert not named - _known_flags(), f"{_name(page)}: flags no command has: {sorted(named - _known_flags())}"


@pytest.mark.parametrize("page", [p for p in PAGES if fenced(p, ("python",))], ids=_name)
def test_python_blocks_parse_and_import_what_they_use(page):
    for source in fenced(page, ("python",)):
        assert not undefined_names(source), f"{_name(page)}:\n{source}"


def _nested_update(base: dict, fragment: dict) -> dict:
    merged = dict(base)
    for key, value in fragment.items():
        merged[key] = _nested_update(base[key], value) if isinstance(value, dict) and isinstance(
            base.get(key), dict) else value
    return merged


@pytest.mark.parametrize("where, block", [pytest.param(_name(p), b, id=f"{_name(p)}-{k}") for p in PAGES
                                          for k, b in enumerate(fenced(p, ("yaml",)))])
def test_every_yaml_block_loads(where, block):
    data = yaml_io.loads(block)
    assert isinstance(data, dict), f"{where}: a YAML block that is no mapping"
    if "space" in data:
        load_config(data)
        return
    problems = []
    for host in HOSTS:
        base = yaml_io.loads((ROOT / "nas" / "configs" / f"{host}.yaml").read_text())
        try:
            load_config(_nested_update(base, data))
            return
        except Exception as e:       # noqa: BLE001 - each host's refusal is reported below
            problems.append(f"{host}: {str(e).splitlines()[0]}")
    pytest.fail(f"{where}: a fragment no shipped config accepts: " + "; ".join(problems))


def prose_blocks(text: str) -> list[tuple[int, int]]:
    """(first line, line count) of each paragraph or list item of a markdown `text`, code,
    tables and headings left out."""
    blocks: list[tuple[int, int]] = []
    start, count, fenced = 0, 0, False
    for number, line in enumerate(text.splitlines() + [""], 1):
        ends_block = line.startswith("```") or fenced or not line.strip() or line.startswith(("#", "|"))
        if count and (ends_block or re.match(r"\s*(?:[-*+]|\d+\.)\s", line)):
            blocks.append((start, count))
            count = 0
        fenced ^= line.startswith("```")
        if not ends_block and not (line.startswith("    ") and not count):
            start, count = (number, 1) if not count else (start, count + 1)
    return blocks


@pytest.mark.parametrize("page", [p for p in PAGES if _name(p) not in UNRESTRUCTURED], ids=_name)
def test_no_paragraph_is_longer_than_six_lines(page):
    blocks = prose_blocks(page.read_text())
    long = [f"line {start}: {count} lines" for start, count in blocks if count > MAX_PARAGRAPH_LINES]
    assert not long, f"{_name(page)}: " + ", ".join(long)


@pytest.mark.parametrize("page", [p for p in PAGES if _name(p) not in UNRESTRUCTURED], ids=_name)
def test_a_page_opens_with_the_commands_a_user_types(page):
    opening = page.read_text().splitlines()[:10]
    assert any(line in ("```sh", "```bash") for line in opening), f"{_name(page)}: no commands in its first lines"


def test_prose_blocks_counts_paragraphs_and_list_items():
    text = "# T\n\none\ntwo\n\n- a\n  b\n- c\n```sh\nx\ny\n```\n| t |\n"
    assert prose_blocks(text) == [(3, 2), (6, 2), (8, 1)]
