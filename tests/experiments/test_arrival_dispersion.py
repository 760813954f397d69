"""experiments/scripts/arrival_dispersion.py: variance / mean of binned arrival counts."""

import numpy as np
import pytest

from experiments.scripts.arrival_dispersion import dispersion, main


def test_poisson_arrivals_have_dispersion_one_and_a_wandering_rate_more():
    rng = np.random.default_rng(0)
    poisson = np.cumsum(rng.exponential(1 / 10.0, size=60_000))  # 10 req/s for ~6000 s
    for bin_s in (1.0, 20.0):
        assert dispersion(poisson, bin_s, 0.0, 5_000.0) == pytest.approx(1.0, abs=0.15)
    # a rate that alternates 5 / 15 req/s every 100 s: 20 s counts vary far more than Poisson ones
    chunks, t = [], 0.0
    for i in range(50):
        rate = 5.0 if i % 2 else 15.0
        n = rng.poisson(rate * 100.0)
        chunks.append(np.sort(t + rng.uniform(0.0, 100.0, size=n)))
        t += 100.0
    wandering = np.concatenate(chunks)
    assert dispersion(wandering, 20.0, 0.0, 5_000.0) > 10.0
    regular = np.arange(0.0, 100.0, 0.5)  # one arrival every 0.5 s: no counting noise at all
    assert dispersion(regular, 5.0, 0.0, 100.0) == 0.0


def test_dispersion_edge_cases():
    with pytest.raises(ValueError, match="bin_s must be > 0"):
        dispersion(np.array([1.0]), 0.0, 0.0, 10.0)
    assert np.isnan(dispersion(np.array([1.0]), 10.0, 0.0, 15.0))  # one whole bin only
    assert np.isnan(dispersion(np.array([]), 1.0, 0.0, 10.0))


@pytest.mark.parametrize("bins", ["0", "a,b", "1,-5", "inf"])
def test_bad_bins_are_refused_by_name(bins, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["experiments/specs/quick.yaml", "--bins-s", bins])
    assert exc.value.code == 2
    assert "--bins-s" in capsys.readouterr().err


def test_missing_spec_is_one_line(capsys):
    assert main(["/nonexistent/spec.yaml"]) == 2
    assert "arrival_dispersion:" in capsys.readouterr().err
