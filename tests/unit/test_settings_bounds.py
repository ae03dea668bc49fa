"""Every numeric `INDEXER_*` setting has a finite range: no database, no node."""

from __future__ import annotations

import annotated_types
import pydantic
import pytest

from indexer.base import settings

NUMERIC = [name for name, field in settings.Settings.model_fields.items() if field.annotation in (int, float)]


def upper_bound(name: str) -> float:
    for rule in settings.Settings.model_fields[name].metadata:
        if isinstance(rule, annotated_types.Le):
            return rule.le
    raise AssertionError(f"INDEXER_{name.upper()} has no upper bound")


def refused(name: str, text: str) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        settings.Settings(**{name: text})
    (error,) = caught.value.errors()
    assert error["loc"] == (name,)
    return error["msg"]


def test_the_numeric_settings_are_found():
    assert {"lease_seconds", "workers", "chunk", "rpc_timeout", "backoff_base_seconds"} <= set(NUMERIC)


@pytest.mark.parametrize("name", NUMERIC)
def test_every_numeric_setting_has_an_upper_bound_and_refuses_more(name):
    bound = upper_bound(name)
    settings.Settings(**{name: str(bound)})
    refused(name, str(bound + 1))


@pytest.mark.parametrize("name", [n for n in NUMERIC if settings.Settings.model_fields[n].annotation is float])
@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e10"])
def test_no_float_setting_takes_infinity_nan_or_a_huge_value(name, text):
    refused(name, text)


@pytest.mark.parametrize("name", NUMERIC)
def test_every_range_is_in_the_settings_description(name):
    bound = upper_bound(name)
    assert f"{bound:,.0f}" in settings.Settings.model_fields[name].description or f"{bound:.0f}" in \
        settings.Settings.model_fields[name].description


def test_workers_default_to_the_cpu_count_within_the_bound(monkeypatch):
    monkeypatch.setattr(settings.os, "cpu_count", lambda: 1024)
    monkeypatch.delenv("INDEXER_WORKERS", raising=False)
    assert settings.Settings().workers == settings.MAX_WORKERS
