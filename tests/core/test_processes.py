"""One liveness check: a zombie is dead, a pid of another PID namespace or host is not judged,
a reused pid is another process; identities round-trip through their text and dict forms."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from nas.core.errors import Interrupted
from nas.core.processes import (ProcessIdentity, alive, pid_alive, stopped_on_interrupt, this_process,
                                worker_pool)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def gone_pid() -> int:
    """A pid no process of this namespace has now."""
    pid = 4_000_000 - 7
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_this_process_reads_its_place_and_start_from_proc():
    me = this_process()
    assert me.pid == os.getpid() and alive(me)
    assert me.boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert f"pid:[{me.pidns}]" == os.readlink("/proc/self/ns/pid")
    assert me.start == int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_a_zombie_is_dead_while_its_pid_still_exists():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while _state(pid) != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        os.kill(pid, 0)                         # the pid exists: a signal-0 probe calls it alive
        assert not pid_alive(pid)
        assert not alive(dataclasses.replace(this_process(), pid=pid, start=None))
    finally:
        os.waitpid(pid, 0)
    assert not pid_alive(pid)


def test_another_pid_namespace_is_not_judged_and_this_one_is():
    gone = dataclasses.replace(this_process(), pid=gone_pid(), start=None)
    assert not alive(gone)
    assert alive(dataclasses.replace(gone, pidns="1"))            # a container sharing the host name
    assert alive(dataclasses.replace(gone, boot="another-boot"))  # another machine of that name
    assert alive(dataclasses.replace(gone, host="elsewhere"))


def test_a_reused_pid_is_another_process():
    me = this_process()
    assert alive(me) and not alive(dataclasses.replace(me, start=me.start + 1))


def test_identities_round_trip_and_older_records_parse_to_none():
    me = this_process()
    assert ProcessIdentity.from_text(me.to_text() + " token=abc") == me
    assert ProcessIdentity.from_dict({"arch_id": "x", **me.to_dict()}) == me
    unknown_start = dataclasses.replace(me, start=None)
    assert ProcessIdentity.from_text(unknown_start.to_text()) == unknown_start
    for old in ("1234", "myhost 1234 0123456789abcdef", f"pid={me.pid} host={me.host}"):
        assert ProcessIdentity.from_text(old) is None, old
    assert ProcessIdentity.from_dict({"host": "h/pid:[4026531836]", "pid": 12}) is None   # before boot ids


@pytest.mark.parametrize("pid", [True, -1, "12", None])
def test_a_record_with_a_bad_pid_parses_to_none(pid):
    assert ProcessIdentity.from_dict({**this_process().to_dict(), "pid": pid}) is None


_ORPHANING_PARENT = """
import multiprocessing, sys, time
from concurrent.futures import ProcessPoolExecutor
from nas.core.processes import worker_pool
import os

def pid():
    return os.getpid()

if __name__ == "__main__":
    pool = {make_pool}
    print(pool.submit(pid).result(), flush=True)
    time.sleep(600)
"""
_UNWATCHED_POOL = 'ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))'


@pytest.mark.slow
@pytest.mark.parametrize("watched", [True, False])
def test_a_pool_worker_exits_with_its_killed_parent_only_when_watched(tmp_path, watched):
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(_ORPHANING_PARENT.format(make_pool="worker_pool(1)" if watched else _UNWATCHED_POOL))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    worker = int(parent.stdout.readline())
    try:
        assert pid_alive(worker)
        parent.send_signal(signal.SIGKILL)      # no handler runs: the pool cannot stop its worker
        parent.wait()
        # the watched worker polls every 0.5 s; the unwatched one gets ample time to show it stays
        deadline = time.monotonic() + (20 if watched else 3)
        while pid_alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_alive(worker) is not watched     # unwatched, it is still there: the watch is what ends it
    finally:
        if pid_alive(worker):
            os.kill(worker, signal.SIGKILL)


_PARENT_DYING_AT_START = """
import os, sys, time
from pathlib import Path

if __name__ == "__mp_main__":   # a spawned worker, before its initialiser runs: it waits for its parent's death
    parent = os.getppid()
    Path({pid_file!r}).write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.05)

if __name__ == "__main__":
    {make_pool}
    pool.submit(os.getpid)      # starts the worker
    time.sleep(600)
"""


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(word) for word in (task / "children").read_text().split()}
    return found


def _poll(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
def test_a_worker_whose_parent_dies_before_its_initialiser_runs_exits_with_the_resource_tracker(tmp_path):
    """The parent's pid is read in the parent: a worker that starts after its parent's death
    (say killed while the pool started) sees it gone, instead of watching its new parent."""
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "worker.pid"
    script = tmp_path / "parent.py"
    script.write_text(_PARENT_DYING_AT_START.format(
        pid_file=str(pid_file), make_pool="from nas.core.processes import worker_pool; pool = worker_pool(1)"))
    parent = subprocess.Popen([sys.executable, str(script)], cwd=Path(__file__).resolve().parents[2])
    children: set[int] = set()
    try:
        assert _poll(pid_file.exists, 120), "the worker did not start"
        worker = int(_poll(lambda: pid_file.read_text(), 10) and pid_file.read_text())
        children = _children(parent.pid)
        assert worker in children and len(children) == 2       # the worker and multiprocessing's resource tracker
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _poll(lambda: not any(pid_alive(pid) for pid in children), 60), \
            f"alive after their parent's death: {[pid for pid in children if pid_alive(pid)]}"
    finally:
        parent.kill()
        for pid in children:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_an_interrupt_terminates_the_pools_workers_instead_of_waiting_for_their_work():
    """SIGTERM during a search's or the finalists' workers: the command stops at once (leaving
    the pool's block had waited for every worker's work)."""
    started = time.monotonic()
    with pytest.raises(Interrupted, match="SIGTERM: stopped"):
        with worker_pool(1) as pool, stopped_on_interrupt(pool):
            worker = pool.submit(os.getpid).result()
            pool.submit(time.sleep, 120)
            raise Interrupted("SIGTERM: stopped", 15)
    assert time.monotonic() - started < 60 and not pid_alive(worker)
