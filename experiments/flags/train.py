"""``cpgym train`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.train`).

The training flags are generated from the config dataclasses (:class:`policies.routing.train_config.TrainConfig`,
:class:`policies.routing.episodes.EpisodeSource`, :class:`policies.reconfig.train_config.ReconfigTrainConfig`,
:class:`policies.routing.train_arms.ArmTrainConfig`), which live apart from the training code: reading
them loads neither gymnasium, torch nor Stable-Baselines3.
"""

from __future__ import annotations

import argparse

from envs.sim.options import add_config_arguments
from envs.workloads import default_trace_path
from experiments.flags.common import add_sim_arguments, add_workload_arguments
from policies.reconfig.defaults import DEFAULT_RECONFIG_WORKLOAD
from policies.reconfig.train_config import ReconfigTrainConfig
from policies.routing.episodes import EpisodeSource
from policies.routing.train_arms import ArmTrainConfig
from policies.routing.train_config import TrainConfig

#: Parent of the default run folders (``--out`` omitted): ``runs/train/<run name>``.
DEFAULT_RUNS_DIR = "runs/train"

#: Episode source when neither --trace nor --workload is given, per kind.
DEFAULT_SOURCES = {
    "routing": "the Mooncake conversation trace",
    "reconfig": "the matched-phases workload (the paper's dynamic scenarios, every phase at 0.4-0.8 of its mix's "
                "measured capacity: below saturation; 'phases' is past the default pool's capacity)",
}


#: ``--out`` help per kind: the files, and what a run stopped midway (an error, Ctrl-C) keeps.
OUT_HELP = {
    "routing": "run folder (model.zip, checkpoints/ every --checkpoint-every steps, progress.csv, episodes.csv, "
               "train_config.json, provenance.json; a run stopped midway keeps all but the final model files; Ctrl-C "
               "saves interrupted_model.zip instead of model.zip)",
    "reconfig": "run folder (model.zip + vecnormalize.pkl, checkpoints/ every --checkpoint-every steps, progress.csv, "
                "train_config.json, provenance.json; a run stopped midway keeps all but the final model files; Ctrl-C "
                "saves interrupted_model.zip + interrupted_vecnormalize.pkl instead)",
}


#: ``--overwrite`` help (the refusal: ``experiments.commands.train.check_checkpoint_out``).
OVERWRITE_HELP = "replace a checkpoint already in --out (default: a --out holding one is refused)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    _add_arms_parser(kinds)
    for kind, help_text in (("routing", "learn which worker serves each request (one step per request)"),
                            ("reconfig", "learn split/merge operations (one step per decision window)")):
        k = kinds.add_parser(kind, help=help_text, description=help_text)
        add_workload_arguments(k, default_text=DEFAULT_SOURCES[kind], default_workload=DEFAULT_RECONFIG_WORKLOAD,
                               default_trace=str(default_trace_path())
                               if kind == "routing" else None)
        add_sim_arguments(k, seed=False)  # environments draw simulator seeds from --train-seed
        if kind == "routing":
            add_config_arguments(k, EpisodeSource, title="episodes")
            add_config_arguments(k, TrainConfig, title="training")
        else:
            add_config_arguments(k, ReconfigTrainConfig, title="episodes and training")
        k.add_argument("--out", metavar="DIR", help=OUT_HELP[kind] + f"; default "
                       f"{DEFAULT_RUNS_DIR}/{{workload}}__{kind}__{{train seed}}__{{unix time}}")
        k.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
        k.add_argument("--quiet", action="store_true",
                       help="no progress output (default: a bar on a terminal, a line every 10 s otherwise, "
                            "with mean TTFT and SLO attainment of the last 20 episodes)")


def _add_arms_parser(kinds) -> None:
    """``cpgym train arms``: the arm-selection router (``policies.routing.train_arms``; no RL)."""
    help_text = ("fit the Vertumnus router's (beta, lambda) choice per decision window from load/workload features "
                 "(per-window costs of every grid arm on training windows; model selection on validation windows)")
    k = kinds.add_parser("arms", help=help_text, description=help_text)
    add_sim_arguments(k, seed=False)  # workload and simulator seed: --seed of the config
    add_config_arguments(k, ArmTrainConfig, title="cells, arms and model selection")
    k.add_argument("--out", metavar="DIR",
                   help="checkpoint folder (arm_model.json, train_config.json, validation.csv, costs.csv.gz, headroom.csv); "
                        f"default {DEFAULT_RUNS_DIR}/{{workloads}}__arms__{{seed}}__{{unix time}}")
    k.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    k.add_argument("--quiet", action="store_true", help="no progress lines")
