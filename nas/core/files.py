"""Atomic file writes: a temporary file beside the target, then one rename.

A reader (or a process killed mid-write) sees the old file or the new one, never half of
one. Temporary names carry the process id because several search workers share a folder.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: str | Path, mode: str = "w", durable: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file that replaces `path` when the block ends without an error.

    `durable` also fsyncs the file and its directory, so the new content survives a power
    loss (checkpoints); on an error the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if durable:
        _fsync_dir(path.parent)


def write_text(path: str | Path, text: str) -> Path:
    """Replace `path` with `text` atomically."""
    with atomic_file(path) as f:
        f.write(text)
    return Path(path)


def write_json(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    """Replace `path` with `data` as JSON (newline-terminated) atomically."""
    return write_text(path, json.dumps(data, indent=indent) + "\n")
