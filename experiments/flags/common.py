"""The flags shared by the commands that run simulations: the workload flags
(:func:`add_workload_arguments`) and the pool, simulator and KV-tier flags generated from
:class:`envs.sim.config.SimConfig` (:func:`add_sim_arguments`). Read back by
:func:`experiments.common.workload_source_from_args` and :func:`experiments.common.sim_config_from_args`.

Light on purpose: the ``cpgym`` parser imports it, and it loads neither the simulator, numpy nor
the workload generators (``tests/experiments/test_cli_startup.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from envs.sim.config import SimConfig
from envs.sim.options import add_config_arguments
from envs.workloads import DEFAULT_WORKLOAD, WORKLOAD_NAMES


def add_workload_arguments(p: argparse.ArgumentParser, default_text: str | None = None,
                           default_workload: str = DEFAULT_WORKLOAD, default_trace: str | None = None) -> None:
    """The shared workload flags (read by :func:`experiments.common.workload_source_from_args`). The source used when
    neither ``--trace`` nor ``--workload`` is given is ``default_trace`` if given, else the named
    ``default_workload``; both are stored as parser defaults, so that the help text (``default_text``
    if given, else generated) and :func:`experiments.common.workload_source_from_args` name the same source."""
    if default_text is None:
        default_text = f"the trace {Path(default_trace).name}" if default_trace is not None else default_workload
    p.set_defaults(_default_workload=default_workload, _default_trace=default_trace)
    g = p.add_argument_group("workload")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="PATH", help="trace file: Mooncake JSONL, Azure 2023 CSV or the L-Eval lengths CSV")
    src.add_argument("--workload", metavar="NAME",
                     help=f"named synthetic workload: {', '.join(sorted(WORKLOAD_NAMES))} (default, without --trace or "
                          f"--workload: {default_text})")
    rate = g.add_mutually_exclusive_group()
    rate.add_argument("--target-rps", type=float, metavar="X", help="time-scale arrivals to this mean rate [requests/s]")
    rate.add_argument("--rate-scale", type=float, metavar="X", help="multiply the arrival rate by X")
    g.add_argument("--arrival-window-s", type=float, nargs=2, metavar=("START", "END"),
                   help="keep arrivals in [START, END) s (after rate scaling)")
    g.add_argument("--skip-invalid", action="store_true",
                   help="skip invalid trace lines and report their count instead of failing")
    g.add_argument("--workload-seed", type=int, default=0,
                   help="seed of the synthetic generator / arrival spreading (default 0)")
    g.add_argument("--workload-param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a parameter of the named workload's generator, e.g. duration_s=120 (repeatable)")


def add_sim_arguments(p: argparse.ArgumentParser, seed: bool = True, composition: bool = True,
                      supported_degrees: tuple[int, ...] | None = None, supported_degrees_note: str = "",
                      horizon: bool = True) -> None:
    """The shared pool, simulator and KV-tier flags (read by :func:`experiments.common.sim_config_from_args`),
    generated from the :class:`SimConfig` field metadata (``envs/sim/options.py``: each default
    is the dataclass's). ``seed=False`` leaves out ``--seed`` for commands that
    draw simulator seeds themselves (training), ``composition=False`` leaves out
    ``--pool-composition`` for commands that set the composition of each run themselves
    (``cpgym dynamic``); ``supported_degrees`` is the command's default of ``--supported-degrees``
    (``None``: :class:`PoolConfig`'s; ``supported_degrees_note`` says where it comes from in the
    help); ``horizon=False`` hides ``--horizon-s`` from the help of a command that refuses it (it
    stays parsed, so that the command can say why)."""
    exclude = (() if seed else ("seed",)) + (() if composition else ("pool.composition",))
    defaults = {} if supported_degrees is None else {"pool.supported_degrees": tuple(supported_degrees)}
    notes = {}
    if supported_degrees_note:
        notes["pool.supported_degrees"] = supported_degrees_note
    add_config_arguments(p, SimConfig, title=SIM_GROUP, exclude=exclude, defaults=defaults, notes=notes,
                         hidden=() if horizon else ("horizon_s",))


#: ``--help`` title of the pool and simulator flags.
SIM_GROUP = "pool and simulator"
