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


def block_commands(block: str) -> list[str]:
    """The commands of one shell block: continuation lines joined, comments cut."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        command = line.split(" #", 1)[0].strip()
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def command_lines(page: Path) -> list[str]:
    """The commands of `page`'s shell blocks."""
    return [command for block in fenced(page, ("sh", "bash")) for command in block_commands(block)]


def nas_arguments(command: str) -> list[str] | None:
    """The arguments after `nas` (or `-m nas`, under torchrun) of a command line, optional parts
    shown in brackets left out; None for a command that is not `nas`."""
    words = shlex.split(re.sub(r"(?<![=\w])\[[^\]]*\]", " ", command))     # not a value: key=[224]
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


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_paragraph_is_longer_than_six_lines(page):
    blocks = prose_blocks(page.read_text())
    long = [f"line {start}: {count} lines" for start, count in blocks if count > MAX_PARAGRAPH_LINES]
    assert not long, f"{_name(page)}: " + ", ".join(long)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_a_page_opens_with_the_commands_a_user_types(page):
    opening = page.read_text().splitlines()[:10]
    assert any(line in ("```sh", "```bash") for line in opening), f"{_name(page)}: no commands in its first lines"


def test_prose_blocks_counts_paragraphs_and_list_items():
    text = "# T\n\none\ntwo\n\n- a\n  b\n- c\n```sh\nx\ny\n```\n| t |\n"
    assert prose_blocks(text) == [(3, 2), (6, 2), (8, 1)]


PUBLISHED = ROOT / "docs" / "published-supernets.md"
PUBLISHED_PATH = ["import", "eval", "latency-probe", "latency-fit", "search", "export"]


def _flag(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_the_published_supernet_path_chains_each_command_to_the_files_of_the_one_before():
    path_block = fenced(PUBLISHED, ("sh",))[0]      # the page's path; later sections (AlphaNet's) have their own
    commands = [nas_arguments(c) for c in block_commands(path_block)]
    path = [words for words in commands if words and words[0] in PUBLISHED_PATH]
    verbs = [words[0] for words in path]
    assert [v for i, v in enumerate(verbs) if v not in verbs[:i]] == PUBLISHED_PATH, verbs
    by_verb = {words[0]: words for words in path}
    imported = by_verb["import"]
    run = _flag(imported, "--name")
    assert all(words[1] == run for words in path if words[0] != "import"), "every step reads the imported run"
    resolution = next(w.split("=", 1)[1] for w in imported if w.startswith("space.options.resolutions="))
    probe = by_verb["latency-probe"]
    assert f"[{_flag(probe, '--resolution')}]" == resolution, "the probe's resolution is the run's one resolution"
    fit = by_verb["latency-fit"]
    assert fit[2] == f"{_flag(probe, '--out')}/timings.csv", "latency-fit reads the probe's CSV"
    search = by_verb["search"]
    assert _flag(search, "--latency-table") == _flag(fit, "--out"), "the search reads the fitted table"
    assert _flag(by_verb["export"], "--arch") == f"{_flag(search, '--out')}/best.yaml", "export ships the answer"


def test_the_published_supernets_come_from_where_the_page_says():
    spec = importlib.util.find_spec("ofa")
    if spec is None:
        pytest.skip("the ofa package (a test dependency) is not installed")
    # read, not imported: the model zoo imports gdown, which only its downloads need
    source = (Path(spec.origin).parent / "model_zoo.py").read_text().split("def ofa_net(")[1].split("\ndef ")[0]
    page = PUBLISHED.read_text()
    base = re.search(r'url_base = "([^"]+)"', source).group(1)
    assert f"`{base}NAME`" in page
    for name in ("ofa_mbv3_d234_e346_k357_w1.0", "ofa_mbv3_d234_e346_k357_w1.2"):
        assert f'"{name}"' in source and f"`{name}`" in page


def test_the_family_folder_examples_are_the_names_a_family_search_gives():
    """Each example of a family folder (`OUT/m1-macs3.289M/` ... annotated with the budgets and the
    config it is of) names the member folders `member_dir` gives those budgets on that config."""
    from nas import api
    from nas.engine.searching.family import member_dir

    examples = 0
    for page in PAGES:
        for block in fenced(page, ("",)) + [page.read_text()]:
            given = re.search(r"--max-macs (\S+) on (\w+):", block)
            names = re.findall(r"OUT/(m\d+-macs\S+?)/", block)
            if not given or not names:
                continue
            space = api.build_space(api.load_config(given.group(2)))
            low, high = space.macs(space.min()), space.macs(space.max())
            budgets = [api.resolve_budget(spec, low, high, "max_macs") for spec in given.group(1).split(",")]
            assert names == [member_dir(k, "macs", b) for k, b in enumerate(budgets[:len(names)], 1)], _name(page)
            examples += 1
    assert examples, "no family folder example found"


@pytest.mark.parametrize("where, command", [(p, c) for p, c in all_commands() if c.startswith("make ")])
def test_every_make_variable_named_is_the_makefiles(where, command):
    makefile = (ROOT / "Makefile").read_text()
    for name in re.findall(r"\b([A-Z_]+)=", command):
        assert re.search(rf"^{name} [?:]?=", makefile, re.MULTILINE), f"{where}: `{command}`: the Makefile has no {name}"


def test_no_documented_command_takes_a_shipped_config_by_a_name_a_run_can_have():
    """`nas export NAME --family` and the cheaper path's search spell a shipped config NAME.yaml:
    after a run named NAME, the bare name means that run (`nas export` refuses it)."""
    from nas.core.config import shipped_configs

    bare = [(where, command) for where, command in all_commands()
            if (words := nas_arguments(command)) and "--family" in words and words[1] in shipped_configs()]
    assert not bare, bare
