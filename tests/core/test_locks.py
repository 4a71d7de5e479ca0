"""One process at a time per run (training) and per local search folder: a second process is told
which PID holds it; the lock goes with its process however that ends; replays count archs once.
Claims on pieces of work: held once, taken over from dead or silent holders, never from live ones."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nas import api, cli
from nas.core.errors import RunError
from nas.core.locks import Claims, folder_lock
from nas.core.processes import ProcessIdentity, this_process
from tests.core.test_processes import gone_pid
from tests.support.safety import copy_run, folder_digests, one_line_error

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from nas.core.locks import Claims, folder_lock
with folder_lock(sys.argv[1], sys.argv[2]):
    print("locked", flush=True)
    sys.stdin.read()                  # held until the test closes stdin (or kills this process)
"""
CLAIMER = """
import os, sys
from nas.core.locks import Claims
assert Claims().try_take(sys.argv[1])
os._exit(0)                           # dies holding it
"""


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


def _holder(folder: Path, what: str = "search") -> subprocess.Popen:
    """A process holding the lock of `folder` until its stdin closes (returns once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), what], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_training_of_a_run_in_use_is_refused_naming_the_pid(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    argv = ["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs), "--resume",
            "--quiet"]
    holder = _holder(runs / "tiny", "run")          # what a running `nas train` holds
    try:
        before = folder_digests(runs)
        one_line_error(capsys, argv, f"{runs / 'tiny'}: this run is in use by process {holder.pid}",
                       "wait for it to finish or stop it")
        assert folder_digests(runs) == before
    finally:
        holder.stdin.close()
        holder.wait()
    assert cli.main(argv) == 0                        # released when its holder exited


def test_a_second_search_in_a_folder_in_use_is_refused_naming_the_pid(trained, tmp_path, capsys):
    out = tmp_path / "s"
    holder = _holder(out)
    try:
        before = folder_digests(tmp_path)
        for searcher in ("evolution", "random"):
            one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--searcher", searcher,
                                    "--trials", "2", "--out", str(out), "--quiet"],
                           f"{out}: this search is in use by process {holder.pid}")
        assert folder_digests(tmp_path) == before
    finally:
        holder.stdin.close()
        holder.wait()
    assert cli.main(["search", "tiny", "--runs-dir", str(trained), "--trials", "2", "--out", str(out),
                     "--quiet"]) == 0                    # released when its holder exited


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    holder = _holder(tmp_path)
    with pytest.raises(RunError, match=f"in use by process {holder.pid}"), folder_lock(tmp_path, "search"):
        pass
    holder.kill()
    holder.wait()
    with folder_lock(tmp_path, "search") as lock:
        assert ProcessIdentity.from_text(lock.read_text()) == this_process()


@pytest.mark.parametrize("written, named", [("4242\n", "process 4242"), ("", "another process"),
                                            ("pid=4242 host=elsewhere boot=b pidns=1 start=9\n",
                                             "process 4242 on elsewhere")])
def test_the_holder_is_named_from_what_it_wrote(tmp_path, written, named):
    """A lock file of an older version holds a bare PID; a holder elsewhere is named with its host."""
    holder = _holder(tmp_path)
    try:
        (tmp_path / ".lock").write_text(written)
        with pytest.raises(RunError, match=f"in use by {named} \\(lock"), folder_lock(tmp_path, "search"):
            pass
    finally:
        holder.stdin.close()
        holder.wait()


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_the_lock_is_released_when_the_command_fails(tmp_path, failure):
    with pytest.raises(failure), folder_lock(tmp_path, "run"):
        raise failure()
    with folder_lock(tmp_path, "run"):
        pass


def test_replaying_results_counts_every_arch_once(trained, tmp_path):
    run = api.load_run("tiny", trained)
    out = tmp_path / "s"
    first = api.search(run, "random", trials=4, out=out, progress=False)
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines + lines) + "\n")      # as two unlocked processes used to write it
    again = api.search(run, "random", trials=6, out=out, progress=False)
    assert (first.new, again.new, again.evaluated) == (4, 2, 6)
    assert any("repeats 4 archs" in note for note in again.notes)
    ids = [json.loads(line)["arch_id"] for line in results.read_text().splitlines()]
    assert len(set(ids)) == 6 and ids[8:] not in (ids[:2], ids[2:4])


# -- claims on pieces of work (the ground truth's trainings) ------------------------------------
def test_a_claim_is_held_once_and_released(tmp_path):
    path = tmp_path / "a.lock"
    with Claims() as first, Claims() as second:
        assert first.try_take(path) and not second.try_take(path)
        text = path.read_text()
        token = text.split()[-1].removeprefix("token=")
        assert ProcessIdentity.from_text(text) == this_process() and len(token) == 32 and int(token, 16) >= 0
        first.release(path)
        assert not path.exists() and second.try_take(path) and not first.try_take(path)
    assert not path.exists()                     # closing releases what is still held


def test_a_claim_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
    path = tmp_path / "a.lock"
    holder = subprocess.run([sys.executable, "-c", CLAIMER, str(path)], env=_env(), cwd=ROOT, check=True)
    assert holder.returncode == 0 and path.exists()       # it exited without releasing (os._exit)
    with Claims(stale_s=1e9) as claims:
        assert claims.try_take(path) and claims.token in path.read_text()
    assert not list(tmp_path.iterdir())                     # no file set aside is left


def test_a_claim_from_another_pid_namespace_waits_for_its_heartbeat(tmp_path):
    """Containers sharing the host name: the holder's pid means nothing here, so it is not judged."""
    path = tmp_path / "a.lock"
    with Claims(stale_s=1e9) as claims:
        assert claims.try_take(path)
        claims.release(path)
    gone = dataclasses.replace(this_process(), pid=gone_pid())
    for holder, taken in ((dataclasses.replace(gone, pidns="1"), False), (gone, True)):
        path.write_text(f"{holder.to_text()} token=0123456789abcdef\n")
        with Claims(stale_s=1e9) as claims:
            assert claims.try_take(path) == taken


@pytest.mark.parametrize("holder", ["elsewhere 1 0123456789abcdef0123456789abcdef",     # an older claim file
                                    "pid=1 host=elsewhere boot=b pidns=1 start=5 token=0123456789abcdef"])
def test_a_claim_of_another_host_is_stale_once_its_heartbeat_stops(tmp_path, monkeypatch, holder):
    path = tmp_path / "a.lock"
    path.write_text(holder + "\n")
    clock = [100.0]
    monkeypatch.setattr("nas.core.locks.time.monotonic", lambda: clock[0])
    with Claims(stale_s=60) as claims:
        assert not claims.try_take(path)              # first look: the clock starts
        clock[0] += 59
        assert not claims.try_take(path)
        os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))   # the holder's heartbeat
        clock[0] += 59
        assert not claims.try_take(path)              # it moved: the clock starts again
        clock[0] += 60
        assert claims.try_take(path) and "elsewhere" not in path.read_text()


def test_the_heartbeat_refreshes_held_claims(tmp_path):
    path = tmp_path / "a.lock"
    with Claims(heartbeat_s=0.05) as claims:
        assert claims.try_take(path)
        os.utime(path, (0, 0))
        deadline = time.monotonic() + 30
        while path.stat().st_mtime == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert path.stat().st_mtime > 0


def test_a_fresh_claim_made_during_a_takeover_is_put_back(tmp_path, monkeypatch):
    """Two processes judged one claim stale; the slower one must not remove the winner's new claim."""
    path = tmp_path / "a.lock"
    with Claims() as slow, Claims() as winner:
        assert winner.try_take(path)
        assert not slow._remove_stale(path, b"elsewhere 1 stale\n")
        assert path.read_text() == f"{winner.token}\n" and list(tmp_path.iterdir()) == [path]


def test_a_removed_lock_leaves_nothing_and_one_opened_before_its_removal_is_not_held(tmp_path):
    from nas.core.locks import LOCK_FILE, _still_named

    folder = tmp_path / ".m.exporting"
    with folder_lock(folder, "export folder", remove=True) as path:
        early = os.open(path, os.O_RDWR)       # a second process that opened the file before the holder removed it
    assert not folder.exists()
    try:
        assert not _still_named(early, folder / LOCK_FILE)
        with folder_lock(folder, "export folder", remove=True) as again:     # the path's new file, lockable
            fresh = os.open(again, os.O_RDWR)
            assert _still_named(fresh, again)
            os.close(fresh)
    finally:
        os.close(early)
    assert not folder.exists()
