from __future__ import annotations

import pytest

from envs.sim import Workload
from tests.factories import prefix_document_workload


@pytest.fixture(scope="session")
def small_prefix_workload() -> Workload:
    """:func:`tests.factories.prefix_document_workload`: 300 requests at 30 req/s, 20 shared document prefixes."""
    return prefix_document_workload()
