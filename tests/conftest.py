"""Fixtures shared by every test folder (the plain factories are in ``tests/factories.py``)."""

from __future__ import annotations

import pytest

from envs.sim import Calibration, SimConfig
from tests.factories import SMALL_POOL, toy_calibration


@pytest.fixture(scope="session")
def toy_cal() -> Calibration:
    """:func:`tests.factories.toy_calibration` with its defaults: ``E_C = 1 + 0.1*R/C`` [s]."""
    return toy_calibration()


@pytest.fixture
def small_config() -> SimConfig:
    """``SimConfig`` on :data:`tests.factories.SMALL_POOL`, every other field at its default."""
    return SimConfig(pool=SMALL_POOL)
