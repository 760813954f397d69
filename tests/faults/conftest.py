from tests.sim.conftest import make_workload, simple_calibration  # noqa: F401  (shared fixtures/helpers)
