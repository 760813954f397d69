"""The simulator, pool and KV-tier flags are generated from the SimConfig field metadata
(envs/sim/options.py), so their defaults cannot drift from the dataclasses': these tests fail if a
flag's default (or its conversion to the field) differs from the field default."""

import dataclasses

import pytest

from envs.sim import PoolConfig, SimConfig
from envs.sim.options import flag_defaults
from envs.sim.tier_config import TierConfig
from experiments.cli import build_parser, parse_args
from experiments.common import sim_config_from_args


def _subcommands():
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


#: commands with the shared simulator flags and their own --supported-degrees default (None: PoolConfig's)
COMMANDS = {"simulate": None, "compare": None, "capacity": None, "kv-tiers": None, "reproduce": (2, 4),
            "cache-ablation": None}


@pytest.mark.parametrize("command, degrees", COMMANDS.items())
def test_sim_flag_defaults_build_the_dataclass_defaults(command, degrees):
    cfg = sim_config_from_args(parse_args([command]))
    expected = SimConfig() if degrees is None else SimConfig(pool=PoolConfig(supported_degrees=degrees))
    assert cfg == expected
    assert cfg.to_dict() == expected.to_dict()  # field by field, compare=False fields included


def test_tier_flag_defaults_build_the_tier_config_defaults():
    # with --kv-tiers hbm the tier flags are not read (TierConfig() is returned): enable every tier
    cfg = sim_config_from_args(parse_args(["simulate", "--kv-tiers", "hbm,dram,store"]))
    assert cfg.kv_tiers == TierConfig(levels=("hbm", "dram", "store"))
    assert dataclasses.astuple(cfg.kv_tiers) == dataclasses.astuple(TierConfig(levels=("hbm", "dram", "store")))


def test_every_generated_flag_default_is_its_field_default_in_the_flag_units():
    parser = _subcommands()["simulate"]
    expected = flag_defaults(SimConfig)
    assert {"pool_gpus", "supported_degrees", "kv_tiers", "dram_gb_per_node", "store_lookup_ms", "kv_handoff_gbps",
            "slo", "slo_scale", "seed", "faults"} <= set(expected)
    for dest, default in expected.items():
        assert parser.get_default(dest) == default, dest
    assert expected["dram_gb_per_node"] == TierConfig().dram_capacity_bytes_per_node / 1e9
    assert expected["store_lookup_ms"] == TierConfig().store_lookup_latency_s * 1e3
    assert expected["supported_degrees"] == ",".join(map(str, PoolConfig().supported_degrees))


def test_simulate_help_shows_the_dataclass_defaults():
    text = " ".join(_subcommands()["simulate"].format_help().split())
    assert "evaluate --kind" not in text  # the --pool-composition note named a removed mode
    for fragment in (f"(default: {PoolConfig().num_gpus})", f"(default: {PoolConfig().composition})",
                     f"(default: {TierConfig().num_layers})", "(default: 1000)", "(default: 0.5)", "(default: scaled)"):
        assert fragment in text, fragment
    layerwise = next(a for a in _subcommands()["simulate"]._actions if "--kv-layerwise" in a.option_strings)
    assert "default" not in layerwise.help and layerwise.default is False  # a switch: off unless given


def test_command_specific_degrees_default_is_shown_and_used():
    parser = _subcommands()["reproduce"]
    action = next(a for a in parser._actions if "--supported-degrees" in a.option_strings)
    assert parser.get_default("supported_degrees") == "2,4"
    assert "(default: 2,4; the paper's Qwen3 degrees, §9)" in " ".join(action.help.split())
