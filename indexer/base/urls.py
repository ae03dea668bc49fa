"""RPC endpoint URLs: parsing INDEXER_RPC_URL, and the part of a URL that may be shown."""

from __future__ import annotations

from urllib.parse import urlsplit


def endpoint_label(url: str) -> str:
    """scheme://host:port: what may appear in logs and metric labels. API keys often sit in the
    path, the query or the user part, so none of those are kept."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def parse_urls(text: str) -> list[str]:
    """INDEXER_RPC_URL: one URL, or several separated by commas or spaces (failover order)."""
    urls = [u for u in text.replace(",", " ").split() if u]
    if not urls:
        raise ValueError("no RPC URL given")
    for url in urls:
        parts = urlsplit(url)
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError(f"not an http(s) URL: the port of {parts.scheme}://{parts.hostname} is not a number") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # Only the scheme and host are echoed: the rest may hold a key.
            shown = url if "://" not in url else endpoint_label(url)
            raise ValueError(f"not an http(s) URL: {shown[:60]!r}")
    return urls
