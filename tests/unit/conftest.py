"""Fixtures of the offline unit tests."""

from __future__ import annotations

import pytest

from indexer.chaindata import rows


@pytest.fixture(params=["native", "python"])
def rows_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test twice: with the C lines in front (what a worker runs) and with rows.py alone (an
    install without a compiler); tests/unit/test_native_rows.py checks the C one was built. A
    test module takes it with `pytestmark = pytest.mark.usefixtures("rows_backend")`."""
    if request.param == "python":
        monkeypatch.setattr(rows, "_native_rows", None)
    return request.param
