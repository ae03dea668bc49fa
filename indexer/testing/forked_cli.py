"""`indexer` commands for the tests, each run in a process forked from one that has imported the
command line already, instead of a new interpreter that imports it again.

Each `indexer` process spends about 0.3 s of CPU importing psycopg, pydantic and the rest before
it does anything, and the suite runs over a thousand commands and pools: on two cores that was
most of its time. Forked, a command starts in a few milliseconds and runs the same
`indexer.cli.main` as the console script, with its own argv, environment, working directory,
stdin, stdout and stderr, `__main__`, `sys.path[0]` and time zone, and ends as the interpreter
would (non-daemon threads joined, atexit run, streams flushed, SystemExit and KeyboardInterrupt
turned into the same exit status). What it does not exercise is the interpreter's own start, so a
command whose interpreter would start differently (its own PYTHONPATH, locale, hash seed...) is
refused here and must be exec'd; tests that exec `INDEXER` cover the start itself (`indexer
monitor`, the progress line on a terminal, concurrent `migrate`, the benchmark scripts).

One server per test process, started at the first command: `python -m indexer.testing.forked_cli
LISTENING ALIVE`. It ends when the test process does (the `ALIVE` pipe closes). For each request
it forks a waiter, which forks the command in a process group of its own (so that
`processes.in_process_group` finds a pool's workers orphaned by a SIGKILL: their /proc/PID/environ
is the server's, not the command's), hands the client a pidfd of it (signals can never reach another
process given the same pid), and reports its exit status as `subprocess` gives it (negative:
the signal that ended it).
"""

from __future__ import annotations

import atexit
import importlib
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any, NoReturn

_REQUEST_MAX = 1 << 20  # a request: the command's argv, environment and directory, as JSON
_REPLY_MAX = 1 << 16
# Read by the interpreter as it starts: a command that sets them differently from the server's
# would not run as it would exec'd.
INTERPRETER_SETTINGS = ("PYTHONPATH", "PYTHONHOME", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED",
                        "PYTHONWARNINGS", "PYTHONDEVMODE", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUNBUFFERED",
                        "PYTHONOPTIMIZE", "LANG", "LC_ALL", "LC_CTYPE")


class Forked:
    """A command forked by this process's server, with what the tests use of `subprocess.Popen`:
    `pid`, `poll`, `wait`, `send_signal`, `terminate`, `kill`, `returncode`. Its stdout and
    stderr are the file descriptors given (copied into it), its stdin /dev/null. Refuses, as
    `subprocess` would, a directory that is not there and an environment that cannot be one."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: int, stderr: int) -> None:
        server = _server()
        request = _request(argv, env, cwd, server.env)
        self.args = argv
        self.returncode: int | None = None
        self._conn = server.request()
        try:
            with open(os.devnull, "rb") as stdin:
                socket.send_fds(self._conn, [request], [stdin.fileno(), stdout, stderr])
            self._conn.settimeout(60)  # a fork, then the answer
            reply, fds, _, _ = socket.recv_fds(self._conn, _REPLY_MAX, 1)
            self.pid: int = self._read(reply)["pid"]
            self._pidfd = fds[0]
        except BaseException:
            self._conn.close()
            raise

    def _read(self, reply: bytes) -> dict[str, Any]:
        if not reply:
            raise RuntimeError(f"the forked CLI server ended {self.args[1:]} without a word (its errors are on the"
                               " stderr of the test that started it)")
        said = json.loads(reply)
        if "error" in said:
            raise RuntimeError(f"the forked CLI server could not run {self.args[1:]}: {said['error']}")
        return said

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.settimeout(0)
            try:
                self._ended(self._conn.recv(_REPLY_MAX))
            except BlockingIOError:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if timeout is not None and timeout <= 0:
                if self.poll() is None:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                return self.returncode  # type: ignore[return-value]
            self._conn.settimeout(timeout)
            try:
                self._ended(self._conn.recv(_REPLY_MAX))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        assert self.returncode is not None
        return self.returncode

    def _ended(self, reply: bytes) -> None:
        self.returncode = self._read(reply)["code"]
        self._conn.close()
        os.close(self._pidfd)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:  # ended, and not yet reported
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run(argv: list[str], *, env: dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout)` gives for the `indexer` console script `argv[0]`, forked: the timeout
    covers the command and its output's end (a child of its own holding stdout open)."""
    deadline = time.monotonic() + timeout
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
        for reader in readers:
            reader.thread.join(max(0.0, deadline - time.monotonic()))
        if any(reader.thread.is_alive() for reader in readers):
            raise subprocess.TimeoutExpired(argv, timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise subprocess.TimeoutExpired(argv, timeout, *(r.read() for r in readers)) from None
    return subprocess.CompletedProcess(argv, code, *(_text(r.read()) for r in readers))


def _request(argv: list[str], env: dict[str, str], cwd: str, server_env: dict[str, str]) -> bytes:
    if not os.path.isdir(cwd):
        raise FileNotFoundError(2, "No such directory", cwd)
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(f"illegal environment variable name or value: {name!r}")
    for name in INTERPRETER_SETTINGS:
        if env.get(name) != server_env.get(name):
            raise ValueError(f"{name} differs from the forked CLI server's: a command whose interpreter starts"
                             " differently cannot be forked; exec it")
    request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
    if len(request) > _REQUEST_MAX:
        raise ValueError(f"a command of {len(request):,} bytes of argv and environment cannot be forked; exec it")
    return request


def _text(data: bytes) -> str:
    """As `subprocess` decodes output in text mode: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


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

    def read(self) -> bytes:
        """What was read so far."""
        return b"".join(self.chunks)


class _Server:
    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.dir = tempfile.mkdtemp(prefix="indexer-forked-cli-")
        self.path = str(Path(self.dir) / "socket")
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listening.bind(self.path)
        listening.listen(64)
        alive_r, self.alive = os.pipe()  # the server ends when this process does, however it ends
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(listening.fileno()), str(alive_r)],
                                     pass_fds=[listening.fileno(), alive_r], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, env=self.env)
        listening.close()
        os.close(alive_r)
        atexit.register(self.close)

    def request(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.path)
        return conn

    def close(self) -> None:
        os.close(self.alive)
        self.proc.wait()


_started: _Server | None = None
_starting = threading.Lock()


def _server() -> _Server:
    global _started
    with _starting:
        if _started is None or _started.proc.poll() is not None:
            _started = _Server()
        return _started


# -- the server's side --------------------------------------------------------------------------


def serve(listening: socket.socket, alive: int) -> None:
    """Forks a waiter for each request, until the test process has ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters reap themselves
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the test process's to handle
    events = selectors.DefaultSelector()
    events.register(listening, selectors.EVENT_READ)
    events.register(alive, selectors.EVENT_READ)
    while all(key.fileobj is listening for key, _ in events.select()):
        conn, _ = listening.accept()
        if os.fork() == 0:
            listening.close()
            os.close(alive)
            _wait_for_command(conn)
        conn.close()
    path = listening.getsockname()
    os.unlink(path)
    os.rmdir(os.path.dirname(path))


def _wait_for_command(conn: socket.socket) -> NoReturn:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        data, fds, flags, _ = socket.recv_fds(conn, _REQUEST_MAX + 1, 3)
        if flags & socket.MSG_TRUNC or len(fds) != 3:
            raise ValueError("a request cut short")
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _become_command(request, fds)
        try:
            os.setpgid(pid, pid)  # as the command does itself: whichever runs first
        except (PermissionError, ProcessLookupError):
            pass
        pidfd = os.pidfd_open(pid)
        for fd in fds:
            os.close(fd)
        socket.send_fds(conn, [json.dumps({"pid": pid}).encode()], [pidfd])
        os.close(pidfd)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        conn.send(json.dumps({"code": code}).encode())
    except BaseException:
        try:
            conn.send(json.dumps({"error": traceback.format_exc(limit=3)}).encode())
        except OSError:
            pass
    finally:
        os._exit(0)


def _become_command(request: dict[str, Any], fds: list[int]) -> NoReturn:
    """Becomes the command: its process group, stdio, directory, environment, argv and
    `__main__`, then the console script's `sys.exit(main())`; ends as the interpreter would."""
    code, interrupted = 1, False
    try:
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        argv = request["argv"]
        sys.argv = argv
        sys.path[0] = os.path.dirname(argv[0])
        sys.modules["__main__"] = _console_script(argv[0])
        from indexer.cli import main

        code = _exit_code(main())
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        interrupted = True
    except BaseException:
        sys.excepthook(*sys.exc_info())
    _finish(code, interrupted)


def _console_script(path: str) -> types.ModuleType:
    """The `__main__` of the console script run as a file (multiprocessing's fork server reads
    it), without running it again."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__spec__ = None
    return main


def _exit_code(code: object) -> int:
    """The exit status of `sys.exit(code)`: 0 for None, the number (-1 past a C long), or 1 with
    the value printed."""
    if code is None:
        return 0
    if isinstance(code, int):
        return (code if -2**63 <= code < 2**63 else -1) & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish(code: int, interrupted: bool) -> NoReturn:
    """What the interpreter does at its end: non-daemon threads joined, atexit run, the streams
    flushed (120 if they cannot be), and a process ended by Ctrl-C ended by SIGINT itself."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        sys.excepthook(*sys.exc_info())
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


# What the commands import, the command line's lazy imports included.
PRELOADED = ("indexer.cli", "indexer.decoding.abi", "indexer.node.rpc", "indexer.operations.chains_status",
             "indexer.operations.exporter", "indexer.operations.pool", "indexer.operations.status",
             "indexer.operations.verify", "indexer.operations.verify_node")


if __name__ == "__main__":
    for module in PRELOADED:
        importlib.import_module(module)
    serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]))
