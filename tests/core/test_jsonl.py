"""nas.core.jsonl: the one reader and writer of append-only JSON-lines files (metrics.jsonl too)."""
from __future__ import annotations

import json

import pytest

from nas.core.errors import RunError
from nas.core.jsonl import append_record, keep_records, read_records


def test_records_round_trip_one_line_each(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_records(path) == []
    append_record(path, {"epoch": 0, "step": 8, "val_top1_max": 0.5})
    append_record(path, {"epoch": 1, "step": 16, "val_top1_max": 0.625})
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == read_records(path)
    assert read_records(path)[1] == {"epoch": 1, "step": 16, "val_top1_max": 0.625}


def test_keep_records_drops_the_rejected_and_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in (8, 16, 24):
        append_record(path, {"step": step})
    kept = path.read_text().splitlines()[:2]
    with open(path, "a") as f:
        f.write('{"step": 3')       # killed mid-append
    keep_records(path, lambda record: record["step"] <= 16)
    assert path.read_text() == "".join(line + "\n" for line in kept)


def test_keep_records_leaves_a_file_it_keeps_whole_untouched(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 8}\n')     # spaced JSON, as older runs wrote it
    keep_records(path, lambda record: True)
    assert path.read_text() == '{"step": 8}\n'
    keep_records(tmp_path / "missing.jsonl", lambda record: False)
    assert not (tmp_path / "missing.jsonl").exists()


def test_a_bad_line_before_the_last_is_an_error_naming_it(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 8}\nnot json\n{"step": 16}\n')
    with pytest.raises(RunError, match=r"metrics.jsonl:2: not a JSON record"):
        keep_records(path, lambda record: True, RunError)
    assert path.read_text() == '{"step": 8}\nnot json\n{"step": 16}\n'
