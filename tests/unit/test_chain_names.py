"""chains.bind and chains.check_chain_name: the connection string that puts a command's sessions
in its chain's schema, and the names a chain may have."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from indexer.base import chains


@pytest.mark.parametrize("url, pgoptions, options", [
    ("postgresql://u:secret@db:5433/idx", None, "-c search_path=base"),
    ("postgresql://u@db/idx?options=-c%20statement_timeout%3D5s", None, "-c statement_timeout=5s -c search_path=base"),
    ("host=db dbname=idx options='-c work_mem=64MB'", "-c lock_timeout=1s", "-c work_mem=64MB -c search_path=base"),
    ("host=db dbname=idx", "-c lock_timeout=1s", "-c lock_timeout=1s -c search_path=base"),
])
def test_bind_keeps_what_the_url_says_and_adds_the_chain_s_search_path(monkeypatch, url, pgoptions, options):
    if pgoptions is None:
        monkeypatch.delenv("PGOPTIONS", raising=False)
    else:
        monkeypatch.setenv("PGOPTIONS", pgoptions)
    bound = conninfo_to_dict(chains.bind(url, "base"))
    given = conninfo_to_dict(url)
    assert bound == {**given, "options": options}


@pytest.mark.parametrize("name", ["public", "eth", "base_sepolia", "_x", "a" * 40, "l2_2"])
def test_a_chain_may_be_named(name):
    chains.check_chain_name(name)


@pytest.mark.parametrize("name", ["", "Eth", "a-b", "a b", "1st", "a" * 41, "chains", "pg_temp", "information_schema",
                                  'x"; DROP TABLE blocks; --', "é"])
def test_no_other_name_is_a_chain(name):
    with pytest.raises(ValueError, match="not a chain name"):
        chains.check_chain_name(name)
    with pytest.raises(ValueError, match="not a chain name"):
        chains.bind("host=db", name)
