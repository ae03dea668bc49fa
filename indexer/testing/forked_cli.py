"""`indexer` commands for the tests, each run in a process forked from one that has imported the
command line already, instead of a new interpreter that imports it again.

Each `indexer` process spends about 0.3 s of CPU importing psycopg, pydantic and the rest before
it does anything, and the suite runs about a thousand short commands (plan, status, abi...):
on two cores that was the largest single share of its time. Forked, a command starts in a few
milliseconds and runs the same `indexer.cli.main` as the console script, with its own argv,
environment, working directory, stdin, stdout and stderr, and exits with the code the script
would (SystemExit handled as the interpreter does). What it does not exercise is the
interpreter's own start and the console script's two lines, which tests that exec `INDEXER`
cover (`indexer --version`, the pools of `indexer work`).

One server per test process, started at the first command: `python -m indexer.testing.forked_cli
SOCKET`. For each request it forks a waiter, which forks the command and reports its pid, then its
exit code as `subprocess` gives it (negative: the signal that ended it), so that commands may run
side by side and a command killed by a signal is reported all the same.
"""

from __future__ import annotations

import atexit
import importlib
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

_RECEIVE = 1 << 20  # a request: the command's argv, environment and directory, as JSON


class Forked:
    """A command forked by this process's server, with what the tests use of `subprocess.Popen`:
    `pid`, `poll`, `wait`, `send_signal`, `terminate`, `kill`, `returncode`. Its stdout and
    stderr are the file descriptors given (copied into it), its stdin /dev/null."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: int, stderr: int) -> None:
        if env.get("PYTHONPATH") != os.environ.get("PYTHONPATH"):  # it would run the server's code
            raise ValueError("a command with a PYTHONPATH of its own cannot be forked: exec it")
        self.args = argv
        self.returncode: int | None = None
        self._conn = _server().request()
        with open(os.devnull, "rb") as stdin:
            socket.send_fds(self._conn, [json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()],
                            [stdin.fileno(), stdout, stderr])
        self.pid: int = json.loads(self._conn.recv(_RECEIVE))["pid"]

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.settimeout(0)
            try:
                self._ended(self._conn.recv(_RECEIVE))
            except BlockingIOError:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._ended(self._conn.recv(_RECEIVE))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        assert self.returncode is not None
        return self.returncode

    def _ended(self, report: bytes) -> None:
        self.returncode = json.loads(report)["code"]
        self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # ended since, and not yet reported
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run(argv: list[str], *, env: dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout)` gives for the `indexer` console script `argv[0]`, forked."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = Forked(argv, env=env, cwd=cwd, stdout=out_w, stderr=err_w)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    readers = [_Reader(out_r), _Reader(err_r)]
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        stdout, stderr = (r.text(5) for r in readers)  # unless a child of its own holds them open
        raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr) from None
    stdout, stderr = (r.text(None) for r in readers)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


class _Reader:
    """One pipe read to its end in a thread of its own (a command may fill both pipes)."""

    def __init__(self, fd: int) -> None:
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._read, args=(fd,), daemon=True)
        self.thread.start()

    def _read(self, fd: int) -> None:
        with open(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                self.chunks.append(chunk)

    def text(self, timeout: float | None) -> str:
        """As `subprocess` decodes it in text mode: the locale's encoding, universal newlines."""
        self.thread.join(timeout)
        data = b"".join(self.chunks).decode(locale.getpreferredencoding(False))
        return data.replace("\r\n", "\n").replace("\r", "\n")


class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="indexer-forked-cli-")
        self.path = str(Path(self.dir.name) / "socket")
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listening.bind(self.path)
        listening.listen(64)
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(listening.fileno())],
                                     pass_fds=[listening.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL)
        listening.close()
        atexit.register(self.close)

    def request(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.path)
        return conn

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.dir.cleanup()


_started: _Server | None = None
_starting = threading.Lock()


def _server() -> _Server:
    global _started
    with _starting:
        if _started is None or _started.proc.poll() is not None:
            _started = _Server()
        return _started


# -- the server's side --------------------------------------------------------------------------


def serve(listening: socket.socket) -> None:
    """Forks a waiter for each request, until this process is killed."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters reap themselves
    while True:
        conn, _ = listening.accept()
        if os.fork() == 0:
            listening.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _wait_for_command(conn)  # never returns
        conn.close()


def _wait_for_command(conn: socket.socket) -> None:
    code = -signal.SIGKILL
    try:
        data, fds, _, _ = socket.recv_fds(conn, _RECEIVE, 3)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run_command(json.loads(data), fds)  # never returns
        for fd in fds:
            os.close(fd)
        conn.send(json.dumps({"pid": pid}).encode())
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        conn.send(json.dumps({"code": code}).encode())
    finally:
        os._exit(0)


def _run_command(request: dict[str, Any], fds: list[int]) -> None:
    """Becomes the command: its stdio, directory, environment and argv, then the console
    script's `sys.exit(main())`; exits as the interpreter would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    code = 1
    try:
        from indexer.cli import main

        code = _exit_code(main())
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:  # the interpreter ends such a process by SIGINT itself
        traceback.print_exc()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _exit_code(code: object) -> int:
    """The exit status of `sys.exit(code)`: 0 for None, the number, or 1 with the value printed."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# What the commands import, the command line's lazy imports included.
PRELOADED = ("indexer.cli", "indexer.decoding.abi", "indexer.node.rpc", "indexer.operations.chains_status",
             "indexer.operations.exporter", "indexer.operations.pool", "indexer.operations.status",
             "indexer.operations.verify", "indexer.operations.verify_node")


if __name__ == "__main__":
    for module in PRELOADED:
        importlib.import_module(module)
    serve(socket.socket(fileno=int(sys.argv[1])))
