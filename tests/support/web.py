"""The fleet page's app for the tests: mounted under /cluster-doctor of a bare FastAPI app, as the
api-server mounts it, with the seeded fleet's clock."""

from __future__ import annotations

from cluster_doctor.domain.config import Settings
from cluster_doctor.web import app as webapp
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.support import fleet_seed as seed

JWT_SECRET = "cluster-doctor-unit-tests-" + "0" * 64


def make_client(dsn: dict, *, authenticated: bool = True, settings: Settings | None = None) -> TestClient:
    sub = webapp.create_app(connector_provider=lambda s: dsn, settings_provider=lambda: settings or Settings(),
                            clock=lambda: seed.NOW)
    if authenticated:
        sub.dependency_overrides[webapp.require_ui_access] = lambda: "test-user"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    return TestClient(root, follow_redirects=False)
