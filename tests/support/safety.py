"""Helpers of the tests that break things on purpose: one-line errors, folder digests, waiting on events."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from nas import cli
from nas.core.files import temporary_path
from tests.support.corpus import folder_digests

__all__ = ["copy_run", "folder_digests", "one_line_error", "read_only", "wait_for"]

SAFETY_NET_S = 600.0     # only a hung child process ever gets near this: no test relies on a duration


def one_line_error(capsys, argv: list[str], *needles: str, code: int = 2) -> str:
    """Run the CLI; assert exit `code`, one line on stderr (no traceback) holding every needle."""
    returned = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert returned == code, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def copy_run(runs: Path, name: str, into: Path) -> Path:
    """A copy of `runs/name` as `into/name` (to break without touching the shared fixture); returns `into`."""
    shutil.copytree(runs / name, into / name, ignore=shutil.ignore_patterns(".lock"))
    return into


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    """Wait until `condition()` holds (an event: a file appears, a line is printed).

    Fails at once if `process` exits first; the deadline is a safety net against a hung
    child, far beyond any plausible duration.
    """
    deadline = time.monotonic() + SAFETY_NET_S
    while not condition():
        assert process.poll() is None, f"the process exited ({process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {SAFETY_NET_S:.0f} s: the process hangs"
        time.sleep(0.02)



@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """`folder` cannot be written inside the block: its permission bits for a normal user, a
    read-only bind mount for root (whom permission bits do not stop)."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")] if p.is_dir()}
        for path, mode in modes.items():
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            yield folder
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], capture_output=True, text=True,
                             check=False)
    if mounted.returncode != 0:
        pytest.skip(f"root without a way to make a read-only folder here (mount: {mounted.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def full_disk_at(path: Path) -> Path:
    """Make the next atomic write of `path` by this process hit a full disk for real: its
    temporary file is a symlink to /dev/full, where every write fails with ENOSPC."""
    tmp = temporary_path(path)
    tmp.symlink_to("/dev/full")
    return tmp
