"""Errors the CLI turns into one line on stderr and an exit code, with secrets redacted; and the
configured URLs' secrets, scrubbed from what the node says and from every log line."""

from __future__ import annotations

import re
from typing import Iterable, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

# user:password@ in any URL and password=... in key/value conninfo strings, whoever configured
# them; the configured URLs' other secret parts are `Secrets`' to find.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<secret>[^@/\s]*)@", re.I)
_KV_PASSWORD = re.compile(r"(?P<key>password\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact(text: str) -> str:
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _KV_PASSWORD.sub(lambda m: f"{m['key']}***", text)


# A part of a configured URL is scrubbed on its own, wherever it appears, from this length up:
# API keys are 32 characters or more, while shorter segments ("v3", "rpc", "mainnet") are words
# that scrubbing everywhere would only garble messages with. Shorter parts are still scrubbed as
# part of the whole path or query they belong to.
MIN_SECRET = 8
SCRUBBED = "***"


class _Configured(Protocol):
    database_url: str

    @property
    def rpc_urls(self) -> list[str]: ...


class Secrets:
    """The secret parts of the configured URLs, and `scrub`, which takes them out of any text.

    From an RPC URL: its whole path and query (unless just "/"), its "user:password", and each
    path segment, query value, user and password of at least MIN_SECRET characters on its own
    (gateways echo parts), each as written and percent-decoded. From the database URL (URL or
    key=value form): its password, from MIN_SECRET characters (shorter ones, like the compose
    file's "indexer", are words of every log line); `redact`'s patterns apply as well, which
    find passwords of any length, configured or not, in URLs and conninfo strings."""

    def __init__(self, rpc_urls: Iterable[str] = (), database_url: str | None = None) -> None:
        parts: set[str] = set()
        for url in rpc_urls:
            parts |= _url_secrets(url)
        if database_url:
            parts |= {p for p in _database_passwords(database_url) if len(p) >= MIN_SECRET}
        found = {v for p in parts for v in (p, unquote(p)) if v.strip()}
        self.parts = sorted(found, key=len, reverse=True)  # longest first: a part inside another goes with it
        self._pattern = re.compile("|".join(map(re.escape, self.parts))) if self.parts else None

    @classmethod
    def of(cls, cfg: _Configured) -> "Secrets":
        return cls(cfg.rpc_urls, cfg.database_url)

    def scrub(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(SCRUBBED, text)
        return redact(text)


def _url_secrets(url: str) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    found: set[str] = set()
    if parts.path not in ("", "/"):
        found.add(parts.path)
        found |= {s for s in parts.path.split("/") if len(s) >= MIN_SECRET}
    if parts.query:
        found.add(parts.query)
        found |= {v for _, v in parse_qsl(parts.query, keep_blank_values=True) if len(v) >= MIN_SECRET}
        found |= {v for v in re.split(r"[&;=]", parts.query) if len(v) >= MIN_SECRET}  # as written
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        if ":" in userinfo:
            found.add(userinfo)
        found |= {p for p in userinfo.split(":") if len(p) >= MIN_SECRET}
    return found


def _database_passwords(url: str) -> set[str]:
    if "://" in url:
        password = urlsplit(url).password
        return {password} if password else set()
    return {m["secret"].strip("'").replace("\\'", "'") for m in _KV_PASSWORD.finditer(url)}


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
