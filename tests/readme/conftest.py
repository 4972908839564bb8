"""One scratch checkout and HOME per test module (tests/support/readme_commands.py)."""

import pytest

from tests.support.readme_commands import scratch_checkout


@pytest.fixture(scope="module")
def scratch():
    with scratch_checkout() as paths:
        yield paths
