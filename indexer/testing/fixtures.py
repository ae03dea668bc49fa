"""Recorded JSON-RPC answers of real chains (tests/fixtures, sources in its README.md): each file
is `{"block": <eth_getBlockByNumber(n, true)>, "receipts": [<receipt>, ...]}`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def names() -> list[str]:
    """Every recorded block, as `<chain>-<number>`."""
    return sorted(path.stem for path in FIXTURES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    """One recorded block: {"block": ..., "receipts": [...]}."""
    return orjson.loads((FIXTURES / f"{name}.json").read_bytes())
