"""Fixtures shared by the layers' tests."""

import pytest
from cluster_doctor.store.history import ResultStore

from tests.conftest import _fresh_database
from tests.support import fleet_seed as seed


@pytest.fixture(scope="module")
def small_db(pg_admin_dsn, template_db):
    """The small seeded fleet (tests/support/fleet_seed.py), one database per test module: read-only use."""
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        seed.small_fleet(ResultStore(dsn))
        yield dsn
