"""One tolerant CSV reader for every table a user hands in (score tables, latency timings).

Spreadsheets save a UTF-8 byte-order mark before the first header name, and hand-written files
put a space after each comma (`arch, acc`): both once made a column look missing (`\\ufeffarch`,
` acc`). `read_csv` drops the mark, skips the spaces after commas, and strips the header names,
so a column is found by its name however the file was saved. A file that is not UTF-8 text
raises `UnicodeDecodeError` for the caller to name.
"""
from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["read_csv"]


def read_csv(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """(header names, rows as name -> text) of the CSV file `path`; an empty file has no header.
    A row shorter than the header lacks the missing names; cells are kept as written, less the
    spaces after commas."""
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        lines = csv.reader(f, skipinitialspace=True)
        header = [name.strip() for name in next(lines, [])]
        rows = [dict(zip(header, cells)) for cells in lines if cells]
    return header, rows
