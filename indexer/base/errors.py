"""Errors the CLI turns into one line on stderr and an exit code, with secrets redacted; and the
configured URLs' secrets, scrubbed from what the node says and from every log line."""

from __future__ import annotations

import re
from typing import Iterable, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

# user:password@ in any URL and password=... in key/value conninfo strings, whoever configured
# them; the configured URLs' other secret parts are `Secrets`' to find.
# The scheme's length is bounded: unbounded, every start inside a long run of letters and digits
# (a node's 100 KB "hash" quoted in an error) scanned to the run's end, 74 s of CPU for that one
# message. A longer scheme still matches by its last 32 characters, so the password goes all the same.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]{0,31}://)(?P<user>[^:/@\s]*):(?P<secret>[^@/\s]*)@", re.I)
_KV_PASSWORD = re.compile(r"(?P<key>password\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact(text: str) -> str:
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _KV_PASSWORD.sub(lambda m: f"{m['key']}***", text)


# A part of a configured URL this long or longer is scrubbed wherever it appears, even inside
# another word: API keys are 32 characters or more, and a gateway may glue one to anything. A
# shorter part is scrubbed only as a whole token: where neither side touches a letter, a digit or
# "_", nor a "." "-" or "~" joined to one. So a 6-character key quoted alone ("unknown key
# Sh0rt7", "/v3/Sh0rt7?") goes, while the same letters inside "indexer.node.rpc", "eth_getBlockByNumber"
# or "v3.2" stay, and a message loses at most the token itself.
MIN_SECRET = 8
SCRUBBED = "***"
_WORD = "A-Za-z0-9_"
_JOINER = ".~-"


def _token(part: str) -> str:
    return (rf"(?<![{_WORD}])(?<![{_WORD}][{_JOINER}]){re.escape(part)}"
            rf"(?![{_WORD}])(?![{_JOINER}][{_WORD}])")


class _Configured(Protocol):
    database_url: str

    @property
    def rpc_urls(self) -> list[str]: ...


class Secrets:
    """The secret parts of the configured URLs, and `scrub`, which takes them out of any text.

    From an RPC URL: its whole path and query (unless just "/"), its "user:password", each path
    segment, query value and password whatever its length, and its user from MIN_SECRET
    characters (a short one, like "me", is a word), each as written and percent-decoded. Path
    segments and query values of digits alone shorter than MIN_SECRET (a chain id, a version)
    are no keys: scrubbed alone they would blank every such number in every message, so they go
    only with the whole path or query. From the database URL (URL or key=value form): its
    password, from MIN_SECRET characters (shorter ones, like the compose file's "indexer", are
    words of every log line); `redact`'s patterns apply as well, which find passwords of any
    length, configured or not, in URLs and conninfo strings. Parts shorter than MIN_SECRET are
    scrubbed as whole tokens (above)."""

    def __init__(self, rpc_urls: Iterable[str] = (), database_url: str | None = None) -> None:
        parts: set[str] = set()
        for url in rpc_urls:
            parts |= _url_secrets(url)
        if database_url:
            parts |= {p for p in _database_passwords(database_url) if len(p) >= MIN_SECRET}
        found = {v for p in parts for v in (p, unquote(p)) if v.strip()}
        self.parts = sorted(found, key=len, reverse=True)  # longest first: a part inside another goes with it
        alternatives = [re.escape(p) if len(p) >= MIN_SECRET else _token(p) for p in self.parts]
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None

    @classmethod
    def of(cls, cfg: _Configured) -> "Secrets":
        ws_url = getattr(cfg, "ws_url", None)  # a WebSocket URL's key is as secret as the HTTP one's
        return cls([*cfg.rpc_urls, *([ws_url] if ws_url else [])], cfg.database_url)

    def scrub(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(SCRUBBED, text)
        return redact(text)


def _a_key(part: str) -> bool:
    """Whether a path segment or query value may be a key (see `Secrets`)."""
    return bool(part) and not (part.isdigit() and len(part) < MIN_SECRET)


def _url_secrets(url: str) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    found: set[str] = set()
    if parts.path not in ("", "/"):
        found.add(parts.path)
        found |= {s for s in parts.path.split("/") if _a_key(unquote(s))}
    if parts.query:
        found.add(parts.query)
        for pair in re.split(r"[&;]", parts.query):
            name, equals, value = pair.partition("=")
            value = value if equals else name  # "?KEY": a value with no name
            if _a_key(unquote(value)):
                found.add(value)  # as written; percent-decoded below
        found |= {v for _, v in parse_qsl(parts.query, keep_blank_values=True) if _a_key(v)}  # "+" as a space too
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, colon, password = userinfo.partition(":")
        if colon:
            found |= {userinfo, password}
        if len(user) >= MIN_SECRET:
            found.add(user)
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


class ChainDataError(IndexerError):
    """The node's answers disagree with each other (or a block is missing): refetch, then fail."""


class DatabaseUnavailable(IndexerError):
    """The database cannot be reached, or refused us."""
