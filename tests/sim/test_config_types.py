"""Frozen simulator configs refuse values of the wrong type by field name (a string failed inside a
comparison, a float GPU count inside the placement, ``engine={...}`` mid-run; 1.5 batch tokens
and 8.0 GPUs per node were accepted) and accept numpy integers (a numpy seed was refused)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim import EngineConfig, LatencyConfig, PoolConfig, PredictionErrorConfig, SimConfig, SLOConfig


@pytest.mark.parametrize("make, match", [
    (lambda: PoolConfig(num_gpus="40"), r"pool.num_gpus must be an integer >= 1, got '40'"),
    (lambda: PoolConfig(num_gpus=40.5), r"pool.num_gpus must be an integer >= 1, got 40.5"),
    (lambda: PoolConfig(gpus_per_node=8.0), r"pool.gpus_per_node must be an integer >= 1, got 8.0"),
    (lambda: PoolConfig(supported_degrees=(2.0, 4.0)), r"pool.supported_degrees must be powers of two >= 1"),
    (lambda: PoolConfig(supported_degrees="24"), r"pool.supported_degrees must be powers of two >= 1, got '24'"),
    (lambda: PoolConfig(composition=5), r"pool.composition must be a string such as 'cp4x6,cp2x8'"),
    (lambda: EngineConfig(max_batch_tokens=1.5), r"engine.max_batch_tokens must be an integer >= 1, got 1.5"),
    (lambda: EngineConfig(max_batch_tokens=float("inf")), r"engine.max_batch_tokens must be an integer >= 1"),
    (lambda: EngineConfig(max_batch_tokens="16384"), r"engine.max_batch_tokens must be an integer >= 1"),
    (lambda: EngineConfig(max_batch_requests=2.5), r"engine.max_batch_requests must be an integer >= 1"),
    (lambda: SimConfig(seed=True), r"seed must be an integer >= 0, got True"),
    (lambda: SimConfig(horizon_s="10"), r"horizon_s must be a number > 0 or None, got '10'"),
    (lambda: SimConfig(engine={"max_batch_tokens": 5}), r"engine must be of type EngineConfig, got dict"),
    (lambda: SimConfig(pool=None), r"pool must be of type PoolConfig, got NoneType"),
    (lambda: SimConfig(faults={}), r"faults must be of type FaultConfig or None, got dict"),
])
def test_config_fields_of_the_wrong_type_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_numpy_integers_are_accepted_and_stored_as_int():
    cfg = SimConfig(seed=np.int64(3), pool=PoolConfig(num_gpus=np.int32(8), gpus_per_node=np.int64(8),
                                                      composition="cp4x2", supported_degrees=np.array([4, 2])),
                    engine=EngineConfig(max_batch_tokens=np.int64(1024)))
    assert (cfg.seed, cfg.pool.num_gpus, cfg.pool.supported_degrees, cfg.engine.max_batch_tokens) == (3, 8, (2, 4), 1024)
    assert all(type(v) is int for v in (cfg.seed, cfg.pool.num_gpus, cfg.pool.gpus_per_node, *cfg.pool.supported_degrees,
                                        cfg.engine.max_batch_tokens))


@pytest.mark.parametrize("make, message", [
    (lambda: SLOConfig(ttft_slo_s="5"), "slo.ttft_slo_s must be a finite number > 0, got '5'"),
    (lambda: LatencyConfig(first_decode_step_s="0.03"),
     "latency.first_decode_step_s must be a finite number >= 0, got '0.03'"),
    (lambda: PredictionErrorConfig(bias="1.1"), "prediction_error.bias must be a finite number > 0, got '1.1'"),
    (lambda: PredictionErrorConfig(noise_sigma=[0.1]),
     "prediction_error.noise_sigma must be a finite number >= 0, got [0.1]"),
])
def test_a_string_number_is_shown_as_a_string(make, message):
    # the message printed "got 5" for the string '5' (or a TypeError came from inside the comparison)
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value) == message


@pytest.mark.parametrize("degree_bias, match", [
    ({4: 1.15}, "prediction_error.degree_bias must be a tuple of"),  # iterated the keys: TypeError in len()
    (((3, 1.1),), r"prediction_error.degree_bias entries must be \(CP degree"),  # accepted, never applied
    (((4, 1.1), (4, 2.0)), "prediction_error.degree_bias names CP degree 4 twice"),  # the last one won silently
])
def test_degree_bias_refuses_what_it_would_not_apply_as_written(degree_bias, match):
    with pytest.raises(ValueError, match=match):
        PredictionErrorConfig(degree_bias=degree_bias)


def test_degree_bias_pairs_are_stored_as_int_and_float_tuples():
    cfg = PredictionErrorConfig(degree_bias=[[np.int64(4), 1], (2, 0.9)])
    assert cfg.degree_bias == ((4, 1.0), (2, 0.9)) and cfg.factor_for(4) == 1.0 and cfg.factor_for(2) == 0.9
