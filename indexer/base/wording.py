"""How counts read in what the commands print: "1 job", "2 jobs", "1,000 blocks"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
