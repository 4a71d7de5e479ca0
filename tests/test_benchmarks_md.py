"""BENCHMARKS.md stays a scoreboard a reader can use: short, one table shape for every area,
every row with a status and a link to the note that measured it, every note reachable, and
every reference to a note in the repository pointing at a file that exists."""
from __future__ import annotations

import os
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCOREBOARD = ROOT / "BENCHMARKS.md"
NOTES = ROOT / "benchmarks" / "notes"
INDEX = NOTES / "README.md"
HEADER = "| claim | latest figure | target | status | note |"
MAX_LINES = 400
MAX_ROW = 250
# Where the repository names notes or used to name BENCHMARKS.md's sections.
SOURCES = ("*.py", "*.yaml", "*.md", "*.toml", "Makefile")
SKIPPED_FOLDERS = {".git", ".venv", "runs", "__pycache__", ".pytest_cache"}


def table_rows(text: str) -> list[str]:
    """The data rows of every table in `text`: header and separator lines left out."""
    lines = text.splitlines()
    rows = []
    for k, line in enumerate(lines):
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        if k + 1 < len(lines) and set(lines[k + 1]) <= set("|-: ") and lines[k + 1].startswith("|"):
            continue                                            # a header
        rows.append(line)
    return rows


def repository_files() -> list[Path]:
    """The files of SOURCES' kinds, run outputs and tool folders left out."""
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_FOLDERS]
        files += [Path(folder, name) for name in names if any(fnmatch(name, pattern) for pattern in SOURCES)]
    return sorted(files)


def notes() -> list[Path]:
    return sorted(p for p in NOTES.glob("*.md") if p != INDEX)


def test_the_scoreboard_is_short_and_its_rows_fit_a_line():
    lines = SCOREBOARD.read_text().splitlines()
    assert len(lines) <= MAX_LINES
    too_long = [f"line {k}: {len(line)}" for k, line in enumerate(lines, 1) if len(line) > MAX_ROW]
    assert not too_long, too_long


def test_every_table_has_the_one_shape_a_row_is_added_to():
    text = SCOREBOARD.read_text()
    headers = [line for k, line in enumerate(text.splitlines()[:-1])
               if line.startswith("|") and text.splitlines()[k + 1].startswith("|---")]
    assert headers and set(headers) == {HEADER}
    for row in table_rows(text):
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        assert len(cells) == 5, row
        assert re.search(r"\b(met|missed|reported)\b", cells[3]), f"no met / missed / reported: {row}"


def test_every_row_links_a_note_that_exists():
    rows = table_rows(SCOREBOARD.read_text())
    assert len(rows) >= 50
    for row in rows:
        targets = re.findall(r"\]\((benchmarks/notes/[^)]+)\)", row)
        assert targets, f"a row without its note: {row}"
        assert all((ROOT / target).is_file() for target in targets), row


def test_every_note_is_linked_from_a_row_or_the_index():
    linked = set(re.findall(r"\]\(benchmarks/notes/([^)]+)\)", SCOREBOARD.read_text()))
    linked |= set(re.findall(r"\]\(([^)/]+\.md)\)", INDEX.read_text()))
    orphans = [note.name for note in notes() if note.name not in linked]
    assert not orphans, f"notes neither in a BENCHMARKS.md row nor in {INDEX.relative_to(ROOT)}: {orphans}"
    assert f"({INDEX.relative_to(ROOT)})" in SCOREBOARD.read_text()


def test_the_former_sections_are_notes_named_by_number():
    """Notes 01-34 are the former sections: a `§N` inside one is the note numbered N."""
    for number in range(1, 35):
        (note,) = NOTES.glob(f"{number:02d}-*.md")
        assert note.read_text().startswith(f"## {number}. ")


def test_every_reference_to_a_note_resolves():
    named = [(path, target) for path in repository_files()
             for target in re.findall(r"benchmarks/notes/[\w.-]*\w", path.read_text(errors="replace"))]
    assert len({path for path, _ in named}) >= 20            # code, configs and docs name their evidence
    missing = [f"{path.relative_to(ROOT)}: {target}" for path, target in named if not (ROOT / target).exists()]
    assert not missing, missing


@pytest.mark.parametrize("pattern", [r"BENCHMARKS\.md,? (?:§|sections? \d)", r"(?<![\w`])§\d", r"\(sections? \d"])
def test_no_reference_to_a_former_section_is_left(pattern):
    """Outside the notes themselves (kept as they were written), sections are named by note."""
    left = [f"{path.relative_to(ROOT)}:{k}" for path in repository_files() if NOTES not in path.parents
            for k, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if re.search(pattern, line)]
    assert not left, left
