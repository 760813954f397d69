"""Fixtures shared by every test folder (the plain factories are in ``tests/factories.py``).

Session-scoped: what several test modules built again each (a roofline calibration, the
12,031-request conversation trace parsed from disk); every one is immutable (frozen dataclasses),
so sharing it cannot couple tests.
"""

from __future__ import annotations

import os

import pytest

from envs import workloads
from envs.sim import Calibration, SimConfig, Workload
from kernels_ref.roofline import Efficiency, build_calibration_dict
from kernels_ref.specs import get_gpu, get_model
from tests.factories import SMALL_POOL, toy_calibration

# Ray's head waits ~20 s for its GCS server to come up; on a loaded 2-core CI machine that start
# can take longer (a slow-run flake: "Failed to start GCS"). Ray reads this budget from the
# environment of the process that starts the head (ray/_private/node.py); the tests that start Ray
# inherit it.
os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")


@pytest.fixture(scope="session")
def toy_cal() -> Calibration:
    """:func:`tests.factories.toy_calibration` with its defaults: ``E_C = 1 + 0.1*R/C`` [s]."""
    return toy_calibration()


@pytest.fixture
def small_config() -> SimConfig:
    """``SimConfig`` on :data:`tests.factories.SMALL_POOL`, every other field at its default."""
    return SimConfig(pool=SMALL_POOL)


@pytest.fixture(scope="session")
def a100() -> Calibration:
    """Qwen3-8B on an A100-80GB, the roofline calibration at 50 % compute, HBM and link efficiency."""
    return Calibration.from_dict(build_calibration_dict(get_model("Qwen3-8B"), get_gpu("A100-80GB"),
                                                        Efficiency(0.5, 0.5, 0.5)))


@pytest.fixture(scope="session")
def conversation_trace() -> Workload:
    """The shared conversation trace (``default_traces_dir()/conversation_trace.jsonl``), loaded once;
    skips the test where the traces are not installed."""
    path = workloads.default_traces_dir() / "conversation_trace.jsonl"
    if not path.is_file():
        pytest.skip(f"shared traces not found at {path.parent}")
    return workloads.load_trace(path)
