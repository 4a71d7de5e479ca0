"""Every record a command reads back goes through `nas.core.records`: damaged, it is one line
naming the file and its first bad key, exit 2, never a traceback."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from nas.core.errors import RecordError
from nas.core.records import parse_record
from nas.engine.export.family_record import FAMILY_EXPORT
from nas.engine.export.shipped_record import ExportRecord
from nas.engine.searching.family import FAMILY
from tests.engine.export.test_family_summary import family  # noqa: F401  (fixture: a family folder, 2 exported)
from tests.engine.export.test_shipped_record import hand_made_export, hand_made_search
from tests.support.safety import one_line_error


def _search_folder(tmp_path: Path) -> Path:
    """A finished search folder whose answer was exported (summary.json, shipped.json, the export's metrics)."""
    folder = hand_made_search(tmp_path / "search")
    pointer = hand_made_export(tmp_path / "export")
    (folder / "shipped.json").write_text(json.dumps(pointer))
    return folder


# record -> (the folder `nas summary` reads, the record's path in it)
RECORDS: dict[str, Callable[[Any, Path], tuple[Path, Path]]] = {
    "family.json": lambda request, tmp: (request.getfixturevalue("family"), request.getfixturevalue("family") / FAMILY),
    "family_export.json": lambda request, tmp: (request.getfixturevalue("family"),
                                                request.getfixturevalue("family") / FAMILY_EXPORT),
    "summary.json": lambda request, tmp: (_search_folder(tmp), tmp / "search" / "summary.json"),
    "shipped.json": lambda request, tmp: (_search_folder(tmp), tmp / "search" / "shipped.json"),
    "metrics.json": lambda request, tmp: (_search_folder(tmp), tmp / "export" / "metrics.json"),
}
# record -> (a key given a wrong type, and the value; a required key)
KEYS = {"family.json": ("seed", "zero", "members"), "family_export.json": ("step", "x", "finetune"),
        "summary.json": ("macs", "12K", "arch_id"), "shipped.json": ("val_top1", "high", "arch_id"),
        "metrics.json": ("test_top1", [0.5], "val_top1")}


@pytest.mark.parametrize("damage", ["a list", "a wrong type", "a missing key"])
@pytest.mark.parametrize("record", list(RECORDS))
def test_a_damaged_record_is_one_line_naming_it_and_its_key_in_nas_summary(request, tmp_path, capsys, record,
                                                                          damage):
    folder, path = RECORDS[record](request, tmp_path)
    content = json.loads(path.read_text())
    wrong, value, required = KEYS[record]
    assert wrong in content and required in content      # both keys are written by the record's writer
    if damage == "a list":
        content, says = [], "damaged record: expected a mapping, got []"
    elif damage == "a wrong type":
        content[wrong] = value
        says = f"damaged record: {wrong}: expected "
    else:
        del content[required]
        says = f"damaged record: {required}: missing (required)"
    path.write_text(json.dumps(content))
    one_line_error(capsys, ["summary", str(folder)], "SEARCH_DIR:", str(path), says)


def test_a_record_with_open_keys_keeps_them_out_of_its_checks_and_checks_the_declared_ones(tmp_path):
    metrics = {"arch_id": "a", "val_top1": 0.5, "test_top1": 0.4, "format": "pt2", "seconds": {"any": "thing"}}
    assert parse_record(ExportRecord, metrics, tmp_path / "m.json", open_keys=True).test_top1 == 0.4
    with pytest.raises(RecordError, match=r"m.json: damaged record: format: unknown key"):
        parse_record(ExportRecord, metrics, tmp_path / "m.json")
    with pytest.raises(RecordError, match=r"damaged record: test_top1: must be a fraction in \[0, 1\], got 40.0$"):
        parse_record(ExportRecord, {**metrics, "test_top1": 40.0}, tmp_path / "m.json", open_keys=True)
