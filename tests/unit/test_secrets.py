"""The scrubber: which parts of the configured URLs are secrets, and that they leave every text and
every log line, whatever wrote it."""

from __future__ import annotations

import io
import logging
import threading

import pytest

from indexer.base import logs
from indexer.base.errors import Secrets, redact

KEY = "0123456789abcdef0123456789abcdef"
RPC = f"https://projectid77:{KEY}@mainnet.example:8443/v3/{KEY}?apikey=qk%2Bsecret99&chain=1"


@pytest.fixture
def secrets() -> Secrets:
    return Secrets([RPC, "http://127.0.0.1:8545"], "postgresql://indexer:db%40password1@db:5432/indexer")


@pytest.mark.parametrize("echoed", [
    f"POST /v3/{KEY}?apikey=qk%2Bsecret99&chain=1 HTTP/1.1",  # urllib3's debug line
    f"invalid project id {KEY}",  # one segment alone
    "apikey qk+secret99 is not valid",  # a query value, percent-decoded
    "apikey qk%2Bsecret99 is not valid",  # and as written
    "no such user projectid77",
    f"Basic auth failed for projectid77:{KEY}",
    "password db@password1 rejected",  # the database's, decoded
    f"<html><body>Cannot POST /v3/{KEY}</body></html>",
])
def test_every_secret_part_leaves_the_text(secrets, echoed):
    scrubbed = secrets.scrub(echoed)
    assert "***" in scrubbed
    for part in (KEY, "qk%2Bsecret99", "qk+secret99", "projectid77", "db@password1", "db%40password1"):
        assert part not in scrubbed, scrubbed


def test_what_is_not_secret_is_kept(secrets):
    text = "http://mainnet.example:8443: eth_getBlockByNumber failed: header not found (indexer v3.2 chain=1)"
    assert secrets.scrub(text) == text
    # The database's user and name are words of every log line, not secrets.
    assert secrets.scrub("indexer.operations.worker: job 3 done") == "indexer.operations.worker: job 3 done"


SHORT = Secrets(["https://node.example/rpc/Sh0rt7?key=Ab1&chain=1&x", "https://me:pw4@eth.example/eth/k"])


@pytest.mark.parametrize(("echoed", "scrubbed"), [
    ("unknown key Sh0rt7", "unknown key ***"),
    ("unknown key Sh0rt7.", "unknown key ***."),
    ("'Sh0rt7' is not a project", "'***' is not a project"),
    ("POST /rpc/Sh0rt7?key=Ab1&chain=1&x failed", "POST ***?*** failed"),
    ("path rpc/Sh0rt7, key Ab1, password pw4, and x", "path ***/***, key ***, password ***, and ***"),
    ("eth_getBlockByNumber at https://eth.example failed", "eth_getBlockByNumber at https://eth.example failed"),
    ("indexer.node.rpc: v3.2 of Sh0rt7s, chain 1, block 1", "indexer.node.rpc: v3.2 of Sh0rt7s, chain 1, block 1"),
])
def test_a_short_part_is_scrubbed_as_a_whole_token_and_nothing_more(echoed, scrubbed):
    assert SHORT.scrub(echoed) == scrubbed


def test_unconfigured_passwords_are_still_redacted():
    none = Secrets()
    assert none.scrub("postgresql://u:hunter22@h/x host=h password='a b' port=1") == \
        "postgresql://u:***@h/x host=h password=*** port=1"


def test_a_conninfo_password_is_a_secret():
    assert Secrets([], "host=db password='longpassword9' dbname=x").scrub("got longpassword9") == "got ***"


def test_log_lines_are_scrubbed_in_the_message_its_arguments_and_the_traceback(secrets):
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure("DEBUG", secrets, "%(levelname)s %(name)s: %(message)s", stream=out)
        logging.getLogger("urllib3.connectionpool").debug('%s://%s:%s "%s %s %s" %s %s', "https", "mainnet.example",
                                                          8443, "POST", f"/v3/{KEY}?apikey=qk%2Bsecret99&chain=1",
                                                          "HTTP/1.1", 200, 512)
        try:
            raise ValueError(f"bad answer from {RPC}")
        except ValueError:
            logging.getLogger("indexer.operations.worker").exception("job %d crashed", 7)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    text = out.getvalue()
    assert 'DEBUG urllib3.connectionpool: https://mainnet.example:8443 "POST ***?*** HTTP/1.1" 200 512' in text
    assert "ERROR indexer.operations.worker: job 7 crashed" in text and "ValueError: bad answer from https://***@mainnet" in text
    assert KEY not in text and "projectid77" not in text and "secret99" not in text


def test_a_short_user_alone_is_no_secret():
    assert Secrets(["https://me@node.example/"]).scrub("me and the node") == "me and the node"


def test_a_hostile_value_quoted_in_an_error_is_redacted_in_linear_time():
    # A node's megabyte "hash" in a message: quadratic, this took hours of a worker's CPU (10 KB
    # already 1.5 s); linear, well under a second. The thread is given a minute, not timed.
    hostile = "block 7: receipt 0 does not belong to transaction 0x" + "ab" * 500_000
    done: list[str] = []
    scrubbing = threading.Thread(target=lambda: done.append(Secrets().scrub(hostile + " https://u:pw@host/")),
                                 daemon=True)
    scrubbing.start()
    scrubbing.join(60)
    assert done == [hostile + " https://u:***@host/"]
    scheme = "a" * 40  # a scheme past the bound goes by its last 32 characters, the password with it
    assert redact(f"{scheme}://me:pw@host") == f"{scheme}://me:***@host"
