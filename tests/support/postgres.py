"""A real PostgreSQL server for the storage tests: Debian's `postgresql` binaries, started on the
loopback address on a free port, its data in a temporary folder, stopped at the end.

PostgreSQL refuses to run as root, so under root the server runs as the `postgres` user the
package creates (`runuser`). The server asks a password on TCP (scram-sha-256), so a wrong one is
refused as it would be on a real deployment. Where PostgreSQL is not installed the tests skip
with the one command that installs it (`make test` installs it when it runs as root).
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

INSTALL = "sudo apt-get install -y postgresql"
USER, PASSWORD = "nas", "s3cret-pw"
_SERVICE_USER = "postgres"          # created by Debian's package
_SHM = Path("/dev/shm")


@dataclass
class PostgresServer:
    """A running server; `url` names its database with the test user's password."""

    bin_dir: Path
    data_dir: Path
    port: int
    run_as: str | None              # the unprivileged user under root, None otherwise

    def url(self, password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        """Run `pg_ctl -D DATA ARGS` (as the service user under root)."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args)

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data_dir.parent} "
                   "-c fsync=off -c full_page_writes=off")
        self.pg_ctl("-l", str(self.data_dir.parent / "server.log"), "-w", "-o", options, "start")

    def running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists()

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-w", "-m", mode, "stop")

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")


def find_bin_dir() -> Path | None:
    """The newest `/usr/lib/postgresql/N/bin` holding initdb and pg_ctl (else PATH's), or None."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                      if p.parent.name.isdigit() else 0)
    for folder in reversed(versions):
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(_SERVICE_USER)
    except KeyError:
        pytest.skip(f"PostgreSQL runs as a user other than root and there is no '{_SERVICE_USER}' user; "
                    f"install the package that creates it: {INSTALL}")
    return _SERVICE_USER


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (skips where PostgreSQL is not installed)."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(f"PostgreSQL is not installed; install it with: {INSTALL}")
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is missing; install it with: "
                                          "pip install -e '.[postgres]'")
    run_as = _run_as()
    root = Path(tempfile.mkdtemp(prefix="nas-pg-", dir=_SHM if _SHM.is_dir() else None))
    password_file = root / "password"
    password_file.write_text(PASSWORD)
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chown(password_file, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(bin_dir, root / "data", _free_port(), run_as)
    try:
        server._run(str(bin_dir / "initdb"), "-D", str(server.data_dir), "-U", USER, f"--pwfile={password_file}",
                    "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync")
        for attempt in range(3):          # another process may take the free port first
            try:
                server.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise
                server.port = _free_port()
        yield server
    finally:
        if server.running():
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
