"""Scripts that produced or check results in ``results/`` (run with ``python -m experiments.scripts.NAME``)."""
