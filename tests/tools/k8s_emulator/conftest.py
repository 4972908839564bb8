"""One emulator process per test session (reset before every test) and a real kubernetes client on it."""

from __future__ import annotations

import pytest
from k8s_emulator import EmulatorProcess
from kubernetes import client

FAST = {
    "startup_delay": 0.05,
    "scheduler_interval": 0.05,
    "static_termination_seconds": 0.05,
    "restart_backoff_seconds": 0.2,
}


@pytest.fixture(scope="session")
def emu_session(tmp_path_factory):
    emu = EmulatorProcess(state_dir=str(tmp_path_factory.mktemp("emulator")), settings=dict(FAST))
    emu.start()
    yield emu
    emu.stop()


@pytest.fixture
def emu(emu_session):
    emu_session.reset()  # empty cluster, settings back to the ones it started with
    return emu_session


@pytest.fixture
def v1(emu) -> client.CoreV1Api:
    return emu.core_v1()
