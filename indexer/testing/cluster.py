"""A PostgreSQL cluster of a test's (or the chaos run's) own, made by scripts/pg-start, which it
may restart."""

from __future__ import annotations

import os
import shlex
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# The source checkout (the package is installed editable by scripts/setup-venv): scripts/ is there.
REPO = Path(__file__).resolve().parents[2]


class OwnPostgres:
    def __init__(self) -> None:
        out = subprocess.run([str(REPO / "scripts" / "pg-start")], capture_output=True, text=True, check=True,
                             env={**os.environ, "PGTMP_FAST": "1"}).stdout
        values = dict(line.split("=", 1) for line in out.split())
        self.url, self.bin, self.data = values["PGTMP_URL"], values["PGTMP_BIN"], values["PGTMP_DATA"]

    def pg_ctl(self, *args: str) -> None:
        as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        # The server pg_ctl starts must not inherit our pipes, or run() would wait for it to exit.
        log = str(Path(self.data).parent / "server.log")
        subprocess.run([*as_owner, f"{self.bin}/pg_ctl", "-D", self.data, "-l", log, "-w", *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> None:
        """Starts the server again after `pg_ctl stop`, with the options pg-start gave it (its port
        among them), which PostgreSQL kept in postmaster.opts."""
        options = shlex.split((Path(self.data) / "postmaster.opts").read_text())[1:]  # after the binary
        self.pg_ctl("start", "-o", shlex.join(options))

    def stop(self) -> None:
        subprocess.run([str(REPO / "scripts" / "pg-stop"), self.bin, self.data], check=False)


@contextmanager
def postgres_at(url: str | None) -> Iterator[str]:
    """`url` when one is given (a benchmark's --database-url), otherwise the URL of a PostgreSQL of
    this run's own, stopped on the way out."""
    if url:
        yield url
        return
    own = OwnPostgres()
    try:
        yield own.url
    finally:
        own.stop()
