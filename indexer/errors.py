"""Errors the CLI turns into one line on stderr and an exit code, with secrets redacted."""

from __future__ import annotations

import re

# user:password@ in URLs, password=... in key/value conninfo strings, and API keys in the path
# or query of RPC URLs are all replaced before any message leaves the process.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<secret>[^@/\s]*)@", re.I)
_KV_PASSWORD = re.compile(r"(?P<key>password\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact(text: str) -> str:
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _KV_PASSWORD.sub(lambda m: f"{m['key']}***", text)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (psycopg adds LINE/HINT lines below it)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class IndexerError(Exception):
    """A failure the user can act on; `str()` is the whole message, already redacted."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(redact(" ".join(message.split())))


class DatabaseUnavailable(IndexerError):
    """The database cannot be reached, or refused us."""
