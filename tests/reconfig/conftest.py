from tests.sim.conftest import simple_calibration  # noqa: F401  (shared toy calibration fixture)
