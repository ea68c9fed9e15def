"""A real PostgreSQL for a test run: Debian's ``initdb`` and ``pg_ctl`` into a temporary
directory, listening on a free loopback port (never the machine's own server on :5432).
``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.ports import free_port

__all__ = ["PG_BIN", "Postgres"]


def _bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


PG_BIN = _bin()


class Postgres:
    """A PostgreSQL server this test run owns, with trust authentication on loopback."""

    def __init__(self) -> None:
        if PG_BIN is None:
            raise RuntimeError("PostgreSQL not found: apt-get install postgresql (./dev.sh does)")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="tableside-pg-"))
        self.data = self.dir / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the server is the postgres user's
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._databases = 0

    def _run(self, *command: str) -> None:
        done = subprocess.run(
            [*self._as, *command], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        assert PG_BIN is not None
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")  # fmt: skip
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=40"
        )
        self._run(str(PG_BIN / "pg_ctl"), "start", "-w", "-D", str(self.data), "-o", options,
                  "-l", str(self.dir / "server.log"))  # fmt: skip

    def restart(self) -> None:
        """Stop and start the server (every connection to it breaks)."""
        assert PG_BIN is not None
        self._run(str(PG_BIN / "pg_ctl"), "restart", "-w", "-m", "fast", "-D", str(self.data),
                  "-l", str(self.dir / "server.log"))  # fmt: skip

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database's URL."""
        import psycopg

        self._databases += 1
        name = f"floor_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        assert PG_BIN is not None
        if (self.data / "postmaster.pid").exists():
            self._run(str(PG_BIN / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.data))
        shutil.rmtree(self.dir, ignore_errors=True)
