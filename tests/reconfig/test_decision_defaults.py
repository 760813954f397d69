"""The decision window and the target-degree menu are defined once (envs/planning/defaults.py)
and every layer's default is that definition."""

import dataclasses
import inspect

from baselines.controller import ControllerConfig
from envs.planning.defaults import DECISION_WINDOW_S, DEFAULT_TARGET_DEGREES
from envs.reconfig_env import PrefillReconfigEnv
from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig
from policies.reconfig.train import ReconfigTrainConfig


def _default(cls, name):
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


def test_decision_window_default_is_the_shared_constant():
    assert DECISION_WINDOW_S == 20.0  # paper §6/§9
    assert ControllerConfig().decision_window_s is DECISION_WINDOW_S
    assert inspect.signature(PrefillReconfigEnv).parameters["decision_window_s"].default is DECISION_WINDOW_S
    assert _default(ReconfigTrainConfig, "decision_window_s") is DECISION_WINDOW_S
    assert _default(DynamicPhasesConfig, "decision_window_s") is DECISION_WINDOW_S


def test_target_degree_menu_default_is_the_shared_constant():
    assert _default(ReconfigTrainConfig, "target_degrees") is DEFAULT_TARGET_DEGREES
