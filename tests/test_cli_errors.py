"""Bad input: one clear line on stderr, exit code 2 (usage) or 1 (runtime), nothing written."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from .conftest import run_indexer


def server(url: str) -> str:
    """host:port of a test database, as errors name it."""
    parts = conninfo_to_dict(url)
    return f"{parts['host']}:{parts['port']}"


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
def test_an_unreachable_database_is_one_redacted_line_naming_it_and_exit_1(command):
    # A closed port on loopback: nothing listens on port 1.
    url = "postgresql://alice:s3cretpw@127.0.0.1:1/indexer"
    result = run_indexer(*command, db_url=url)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f'indexer {command[0]}: error: cannot connect to database "indexer" on 127.0.0.1:1: Connection refused']
    assert "s3cretpw" not in result.stderr + result.stdout


def test_a_stopped_server_is_named_with_its_port_and_database(own_postgres):
    own_postgres.pg_ctl("stop")
    url = own_postgres.url.replace("postgres@", "postgres:pw5ecret@")
    result = run_indexer("status", db_url=url)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f'indexer status: error: cannot connect to database "postgres" on {server(url)}: Connection refused']
    assert "pw5ecret" not in result.stderr


def test_a_database_that_does_not_exist_is_named_with_its_server_and_exit_1(db_url):
    from .conftest import url_for
    url = url_for("no_such_database")
    result = run_indexer("plan", "--from", "0", "--to", "100", db_url=url)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f'indexer plan: error: cannot connect to database "no_such_database" on'
                                          f' {server(url)}: database "no_such_database" does not exist']


@pytest.mark.parametrize(("url", "message"), [
    ("host=127.0.0.1 password=hunter22 dbname",
     'not a PostgreSQL URL or key=value string: missing "=" after "dbname" in connection info string'),
    # The node's URL where the database's belongs, and another database's.
    ("http://127.0.0.1:8545", "not a PostgreSQL URL (it begins with http://): give postgresql://USER@HOST:PORT/DATABASE,"
                              " with USER:PASSWORD@ if a password is needed, or key=value pairs"),
    ("mysql://root:hunter22@db/indexer", "not a PostgreSQL URL (it begins with mysql://)"),
])
def test_a_database_url_that_is_not_postgresql_s_is_a_usage_error_naming_it(url, message):
    result = run_indexer("status", db_url=url)
    line = one_usage_error(result, "status")
    assert line.startswith(f"indexer status: error: INDEXER_DATABASE_URL: {message}"), line
    assert "hunter22" not in result.stderr
    flag = one_usage_error(run_indexer("plan", "--from", "0", "--to", "1", "--database-url", url), "plan")
    assert flag.startswith(f"indexer plan: error: --database-url: {message}"), flag


def test_plan_on_an_unmigrated_database_names_it_and_says_to_migrate(blank_db_url):
    result = run_indexer("plan", "--from", "0", "--to", "100", db_url=blank_db_url)
    assert result.returncode == 1
    name = conninfo_to_dict(blank_db_url)["dbname"]
    assert result.stderr.splitlines() == [
        f'indexer plan: error: database "{name}" on {server(blank_db_url)} lacks the indexer\'s tables'
        ' (relation "schema_migrations" does not exist): run `indexer migrate` first']


def test_status_on_an_unmigrated_database_names_it_and_says_to_migrate(blank_db_url):
    result = run_indexer("status", db_url=blank_db_url)
    assert result.returncode == 1
    name = conninfo_to_dict(blank_db_url)["dbname"]
    assert result.stderr.splitlines() == [
        f'indexer status: error: database "{name}" on {server(blank_db_url)} lacks the indexer\'s tables'
        ' (relation "jobs" does not exist): run `indexer migrate` first']


def test_without_a_database_url_errors_say_the_default_was_used():
    """No INDEXER_DATABASE_URL: the default reaches whatever listens on 127.0.0.1:5432, here
    perhaps this machine's own cluster, which is not the indexer's: the error names it and says
    the URL was not set, rather than only inviting `indexer migrate`."""
    result = run_indexer("status")
    if result.returncode == 0:
        pytest.skip("an indexer database answers at the default URL on this machine")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith('indexer status: error: ') and 'database "postgres" on 127.0.0.1:5432' in line, line
    assert "INDEXER_DATABASE_URL is not set, and this is its default" in line, line
    assert "run `indexer migrate` first" not in line


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


def one_usage_error(result, command: str) -> str:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"indexer {command}: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["plan", "verify"])
@pytest.mark.parametrize("to", ["99999999999999999999", "9223372036854775808", "9" * 5000])
def test_a_block_number_the_schema_cannot_hold_is_a_usage_error(db_url, conn, command, to):
    line = one_usage_error(run_indexer(command, "--from", "0", "--to", to, db_url=db_url), command)
    assert "argument --to: block numbers are at most 9,223,372,036,854,775,807 (PostgreSQL's bigint;" in line
    assert job_count(conn) == 0


@pytest.mark.parametrize("text", ["١٢٣", "１２", " 12", "12 ", "1_000", "+5", "0x10", "1,00", "1,000,00"])
def test_only_ascii_digits_are_block_numbers(db_url, conn, text):
    line = one_usage_error(run_indexer("plan", "--from", "0", "--to", text, db_url=db_url), "plan")
    assert line.endswith(f"argument --to: not a block number: {text!r} (see --help)")
    assert job_count(conn) == 0


def test_block_numbers_may_be_grouped_by_thousands_with_commas(db_url, conn):
    result = run_indexer("plan", "--from", "10,000", "--to", "30,000", "--chunk", "10,000", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "planned 2 index_blocks jobs (20,000 blocks)" in result.stdout


@pytest.mark.parametrize(("age", "message"), [
    ("99999999999d", "a retention is at most 36500d (100 years), got '99999999999d'"),
    ("876001h", "a retention is at most 36500d (100 years), got '876001h'"),
    ("9" * 5000 + "d", "a retention is at most 36500d (100 years)"),
    ("３0d", "not a retention like 30d or 12h: '３0d'"),
])
def test_a_retention_too_long_or_not_in_ascii_digits_is_a_usage_error(db_url, conn, age, message):
    months = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'jobs_history'::regclass").fetchone()
    line = one_usage_error(run_indexer("prune", "--older-than", age, db_url=db_url), "prune")
    assert message in line
    assert conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'jobs_history'::regclass").fetchone() == months


def test_the_longest_retention_runs(db_url):
    result = run_indexer("prune", "--older-than", "36500d", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("dropped 0 month(s)")


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("INDEXER_LEASE_SECONDS", "inf", "Input should be a finite number"),
    ("INDEXER_LEASE_SECONDS", "nan", "Input should be a finite number"),
    ("INDEXER_LEASE_SECONDS", "1e10", "Input should be less than or equal to 3600"),
    ("INDEXER_BACKOFF_BASE_SECONDS", "1e10", "Input should be less than or equal to 3600"),
    ("INDEXER_POLL_SECONDS", "inf", "Input should be a finite number"),
    ("INDEXER_WORKERS", "257", "Input should be less than or equal to 256"),
    ("INDEXER_MAX_ATTEMPTS", "1000000000000", "Input should be less than or equal to 1000"),
    ("INDEXER_CONFIRMATIONS", "100000000", "Input should be less than or equal to 100000"),
])
def test_a_numeric_setting_out_of_its_range_is_a_usage_error_naming_it(db_url, conn, variable, value, message):
    result = run_indexer("plan", "--from", "0", "--to", "100", db_url=db_url, env={variable: value})
    assert one_usage_error(result, "plan") == f"indexer plan: error: {variable}: {message}"
    assert job_count(conn) == 0


@pytest.mark.parametrize(("workers", "message"), [
    ("257", "argument --workers: must be between 1 and 256, got '257'"),
    ("١٢", "argument --workers: not a whole number: '١٢'"),
])
def test_workers_are_bounded(db_url, workers, message):
    line = one_usage_error(run_indexer("work", "--drain", "--workers", workers, db_url=db_url), "work")
    assert message in line
