import psycopg
import pytest
from cluster_doctor.domain.status import EXECUTED, FAILING, NOT_EXECUTED, Status


def test_the_enum_is_the_database_check(db_dsn):
    """The CHECK on validation_history.status is the contract; the enum names exactly its values."""
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conrelid = 'validation_history'::regclass AND contype = 'c' "
                    "AND pg_get_constraintdef(oid) LIKE '%status%'")
        (definition,) = cur.fetchone()
    assert {s.value for s in Status} == {v for v in Status if f"'{v}'" in definition}
    assert definition.count("'::text") == len(Status)


def test_executed_and_failing():
    assert set(EXECUTED) | set(NOT_EXECUTED) == set(Status) and not set(EXECUTED) & set(NOT_EXECUTED)
    assert [s for s in Status if s.executed] == [Status.PASS, Status.FAIL, Status.ERROR]
    assert [s for s in Status if s.failing] == list(FAILING) == [Status.FAIL, Status.ERROR]
    assert Status("pass") == "pass" and f"{Status.TIMEOUT}" == "timeout"


def test_parse_names_the_known_values():
    with pytest.raises(ValueError, match="unknown status 'ok' .*pass, fail, error, timeout, preempted, skipped"):
        Status.parse("ok")
