"""What a node may not slip past decoding: a backslash of its own in a field (COPY would read it
as an escape and store another byte), and a null logs bloom (NULL in logs_bloom means "stored
before migration 005")."""

from __future__ import annotations

import copy

import pytest

from indexer.chaindata.chain import decode

from indexer.base.errors import ChainDataError
from indexer.testing import fixtures

N = 18_000_000


pytestmark = pytest.mark.usefixtures("rows_backend")


def decoded(mutate):  # type: ignore[no-untyped-def]
    recorded = copy.deepcopy(fixtures.load("mainnet-18000000"))
    mutate(recorded["block"], recorded["receipts"])
    return decode(N, [recorded["block"]], {N: recorded["receipts"]})


@pytest.mark.parametrize("mutate", [
    lambda b, r: b.update(miner="0xab\\146\\146"),
    lambda b, r: b.update(mixHash=b["mixHash"][:-4] + "\\\\41"),
])
def test_a_backslash_of_the_node_s_own_is_refused(mutate):
    with pytest.raises(ChainDataError, match="not hex data"):
        decoded(mutate)


@pytest.mark.parametrize("mutate", [
    lambda b, r: b.update(logsBloom=None),
    lambda b, r: r[3].update(logsBloom=None),
])
def test_a_null_logs_bloom_is_refused(mutate):
    with pytest.raises((ChainDataError, ValueError), match="logsBloom is null"):
        decoded(mutate)


def test_the_untouched_answer_decodes():
    assert len(decoded(lambda b, r: None).transactions) == 94
