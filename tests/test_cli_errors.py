"""Bad input: one clear line on stderr, exit code 2 (usage) or 1 (runtime), nothing written."""

from __future__ import annotations

import pytest

from .conftest import run_indexer


def job_count(conn) -> int:
    return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "10", "--to", "10"], "--from (10) must be below --to (10)"),
        (["--from", "20", "--to", "10"], "--from (20) must be below --to (10)"),
        (["--from", "-5", "--to", "10"], "block numbers cannot be negative: '-5'"),
        (["--from", "0", "--to", "-1"], "block numbers cannot be negative: '-1'"),
        (["--from", "abc", "--to", "10"], "argument --from: not a block number: 'abc'"),
        (["--from", "0", "--to", "1e6"], "argument --to: not a block number: '1e6'"),
        (["--from", "0", "--to", "10", "--chunk", "0"], "argument --chunk: must be between 1 and 1,000,000 blocks, got '0'"),
        (["--from", "0", "--to", "10", "--chunk", "-3"], "argument --chunk: must be between 1 and 1,000,000 blocks"),
        (["--from", "0", "--to", "10", "--chunk", "2000000"], "must be between 1 and 1,000,000 blocks"),
        (["--from", "0", "--to", "10", "--chunk", "ten"], "argument --chunk: not a whole number of blocks: 'ten'"),
        (["--to", "10"], "the following arguments are required: --from"),
    ],
)
def test_bad_plan_arguments_are_usage_errors(db_url, conn, args, message):
    result = run_indexer("plan", *args, db_url=db_url)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("indexer plan: error: "), result.stderr
    assert message in result.stderr
    assert job_count(conn) == 0


@pytest.mark.parametrize("chunk", ["zero", "0", "2000000"])
def test_a_bad_chunk_in_the_environment_is_a_usage_error(db_url, conn, chunk):
    # The same bounds as --chunk: one setting, one range.
    result = run_indexer("plan", "--from", "0", "--to", "100", db_url=db_url, env={"INDEXER_CHUNK": chunk})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert "INDEXER_CHUNK" in result.stderr
    assert job_count(conn) == 0


@pytest.mark.parametrize("command", [["migrate"], ["plan", "--from", "0", "--to", "100"], ["status"], ["reap"], ["retry", "--failed"]])
def test_an_unreachable_database_is_one_redacted_line_and_exit_1(command):
    # A closed port on loopback: nothing listens on port 1.
    url = "postgresql://alice:s3cretpw@127.0.0.1:1/indexer"
    result = run_indexer(*command, db_url=url)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"indexer {command[0]}: error: cannot connect to the database")
    assert "s3cretpw" not in result.stderr + result.stdout


def test_a_database_that_does_not_exist_is_exit_1(db_url):
    from .conftest import url_for
    result = run_indexer("plan", "--from", "0", "--to", "100", db_url=url_for("no_such_database"))
    assert result.returncode == 1
    assert 'database "no_such_database" does not exist' in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_malformed_database_url_is_exit_1(db_url):
    result = run_indexer("status", db_url="host=127.0.0.1 password=hunter22 dbname")
    assert result.returncode == 1
    assert result.stderr.startswith("indexer status: error: invalid database URL")
    assert "hunter22" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_plan_on_an_unmigrated_database_says_to_migrate(blank_db_url):
    result = run_indexer("plan", "--from", "0", "--to", "100", db_url=blank_db_url)
    assert result.returncode == 1
    assert "run `indexer migrate` first" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_flags_override_the_environment_and_dotenv(db_url, conn, tmp_path):
    (tmp_path / ".env").write_text(f"INDEXER_DATABASE_URL={db_url}\nINDEXER_CHUNK=25\n")
    result = run_indexer("plan", "--from", "0", "--to", "100", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert job_count(conn) == 4  # chunk 25 from .env
    result = run_indexer("plan", "--from", "100", "--to", "200", "--chunk", "50", cwd=tmp_path,
                         env={"INDEXER_CHUNK": "10"})
    assert result.returncode == 0, result.stderr
    assert job_count(conn) == 6  # the flag beats the environment, which beats .env


def test_verify_checks_its_range_like_plan(db_url):
    result = run_indexer("verify", "--from", "9", "--to", "3", db_url=db_url)
    assert result.returncode == 2
    assert result.stderr.strip() == "indexer verify: error: --from (9) must be below --to (3); --to is exclusive (see --help)"
